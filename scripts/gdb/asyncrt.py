# gdb commands for asyncrt's fibers (include/asyncrt/fiber.h, "Seeing
# fibers"; docs/debugging.md).
#
#     (gdb) source scripts/gdb/asyncrt.py
#     (gdb) asyncrt fibers rt       # rt: any expression that gives the rt_runtime *
#
# Lists every fiber of the runtime: its task id, where it was spawned,
# where it last awaited, and its backtrace from that await up, each frame
# with the function and file:line gdb knows for it. Works on a running
# program (stopped) and on a core file. It needs the library's debug
# information (a -g build: the struct layouts come from it) and, like the
# task dump's backtrace, frame pointers in the fiber's own code
# (-fno-omit-frame-pointer): the walk follows the frame records from the
# await up, staying inside the fiber's stack.
import struct

import gdb


def _pointer_size():
    return gdb.lookup_type("void").pointer().sizeof


def _read_words(addr, count):
    size = _pointer_size()
    data = gdb.selected_inferior().read_memory(addr, size * count)
    # Both architectures asyncrt supports (x86-64, AArch64) are little-endian.
    return struct.unpack("<" + ("Q" if size == 8 else "I") * count, bytes(data))


def _string(value):
    if int(value) == 0:
        return None
    return value.string()


def _describe_pc(pc):
    """'function (file:line)' for a return address, as gdb knows it."""
    inside = pc - 1  # within the call, not after it
    name = None
    try:
        block = gdb.block_for_pc(inside)
        while block is not None and block.function is None:
            block = block.superblock
        if block is not None:
            name = block.function.print_name
    except RuntimeError:
        block = None
    if name is None:
        text = gdb.execute("info symbol 0x%x" % inside, to_string=True).strip()
        name = text.split(" in section")[0] if not text.startswith("No symbol") else "??"
    sal = gdb.find_pc_line(inside)
    if sal.symtab is not None:
        return "%s (%s:%d)" % (name, sal.symtab.filename, sal.line)
    return name


def _walk(fiber_ptr):
    """Return addresses from the fiber's last await up to its function."""
    fiber = fiber_ptr.dereference()
    low = int(fiber["stack"]["low"])
    high = int(fiber_ptr)  # the control block sits above the stack it may use
    fp = int(fiber["await_frame"])
    root = int(fiber["root_frame"])
    size = _pointer_size()
    pcs = []
    while len(pcs) < 64 and low <= fp <= high - 2 * size and fp % size == 0:
        caller, pc = _read_words(fp, 2)
        if pc == 0 or caller == root or caller <= fp:
            break
        pcs.append(pc)
        fp = caller
    return pcs


def _registries(rt):
    for i in range(int(rt["nworkers"])):
        yield rt["workers"][i]["registry"]
    for i in range(int(rt["nforeign"])):
        yield rt["foreign"][i]["registry"]


class AsyncrtPrefix(gdb.Command):
    """Commands for asyncrt runtimes: asyncrt fibers RUNTIME."""

    def __init__(self):
        super().__init__("asyncrt", gdb.COMMAND_DATA, gdb.COMPLETE_NONE, True)


class AsyncrtFibers(gdb.Command):
    """asyncrt fibers RUNTIME: every fiber of the runtime (an rt_runtime *
expression), with where it waits and its backtrace from that await up."""

    def __init__(self):
        super().__init__("asyncrt fibers", gdb.COMMAND_STACK, gdb.COMPLETE_EXPRESSION)

    def invoke(self, arg, from_tty):
        if not arg.strip():
            raise gdb.GdbError("usage: asyncrt fibers RUNTIME (an rt_runtime * expression)")
        poll = gdb.lookup_static_symbol("fiber_poll")
        if poll is None:
            raise gdb.GdbError("asyncrt: no fiber_poll symbol; is the library's debug "
                               "information loaded (a -g build)?")
        poll_addr = int(poll.value().address)
        rt = gdb.parse_and_eval(arg).cast(gdb.lookup_type("struct rt_runtime").pointer())
        task_type = gdb.lookup_type("struct rt_task").pointer()
        fiber_task_type = gdb.lookup_type("struct fiber_task").pointer()
        found = 0
        for registry in _registries(rt):
            entries = registry["entries"]
            for i in range(int(registry["len"])):
                entry = entries[i]
                task = gdb.Value(int(entry["task"]) & ~1).cast(task_type)
                if int(task["u"]["poll"]) != poll_addr:
                    continue  # a stackless task, or a task that finished
                found += 1
                ft = task["future_state"].address.cast(fiber_task_type)
                head = "fiber task %d" % int(task["id"])
                site = _string(entry["site"])
                if site is not None:
                    head += ", spawned at %s" % site
                print(head)
                fiber_ptr = ft["f"]
                if int(fiber_ptr) == 0:
                    print("    not started yet")
                    continue
                fiber = fiber_ptr.dereference()
                await_file = _string(fiber["await_file"])
                if await_file is None:
                    print("    has not awaited yet")
                    continue
                print("    last await at %s:%d in %s" % (await_file, int(fiber["await_line"]),
                                                        _string(fiber["await_function"]) or "?"))
                for n, pc in enumerate(_walk(fiber_ptr)):
                    print("    #%d 0x%x in %s" % (n, pc, _describe_pc(pc)))
        print("%d fiber%s" % (found, "" if found == 1 else "s"))


AsyncrtPrefix()
AsyncrtFibers()
