#!/usr/bin/env python3
"""The public names follow the table in docs/guide.md ("Names"). This reads
every public header and fails on a name that breaks it:

- every function and type is rt_..., every macro RT_... (internal ones
  rt__ and RT__); the only lowercase macros are the spawn-site and
  await-site macros, each expanding to its own *_with_site function, and no
  macro shares its name with a function;
- no two names differ only in case;
- `_wait` ends exactly the functions that block the calling thread, each
  with a timeout_ns; `_blocking` only names the blocking pool;
- the end-of-life verbs are _drop (a reference or an operation), _free (an
  owned object), _close (a resource), _cancel (tasks) and _shutdown; none
  of _destroy, _unref, _ref, _detach, _abort, _dispose, _delete;
- absolute time is `_until`: no `_at` or `_deadline` in a function's name;
- the calling thread's questions are rt_current_*;
- an _init function initialises memory its first argument points to, a
  _new function returns the object through a pointer to pointer.

    names_test.py INCLUDE_DIR
"""
import os
import re
import sys

SPAWN_SITE_MACROS = {
    "rt_spawn": "rt_spawn_ex_with_site",
    "rt_spawn_ex": "rt_spawn_ex_with_site",
    "rt_spawn_local": "rt_spawn_local_with_site",
    "rt_group_spawn": "rt_group_spawn_with_site",
    "rt_block_on": "rt_block_on_with_site",
    "rt_fiber_spawn": "rt_fiber_spawn_with_site",
    "rt_fiber_spawn_ex": "rt_fiber_spawn_with_site",
    "rt_fiber_block_on": "rt_fiber_block_on_with_site",
}
# A fiber's await points: each macro passes its file, line and function.
AWAIT_SITE_MACROS = {name: name + "_with_site" for name in (
    "rt_fiber_await", "rt_fiber_yield", "rt_fiber_run_blocking", "rt_sleep_await",
    "rt_chan_send_await", "rt_chan_recv_await", "rt_mutex_lock_await", "rt_io_read_await",
    "rt_io_write_all_await", "rt_tcp_accept_await", "rt_tcp_connect_await", "rt_read_line_await",
    "rt_writer_write_await", "rt_writer_flush_await", "rt_io_copy_await", "rt_fiber_serve", "rt_fiber_await_timeout",
    "rt_fiber_await_until")}
SITE_MACROS = {**SPAWN_SITE_MACROS, **AWAIT_SITE_MACROS}
# Verbs that are not an end of life: a semaphore's permits and a coroutine's
# hold on a lock are released (acquire/release), not the object.
RELEASE_OK = {"rt_semaphore_release", "rt_coro_release"}
BLOCKING_POOL = {"rt_spawn_blocking", "rt_spawn_blocking_ex", "rt_blocking_fn", "rt_fiber_run_blocking",
                 "rt_fiber_run_blocking_with_site"}
BANNED_VERBS = ("destroy", "unref", "ref", "detach", "abort", "dispose", "delete", "deinit",
                "fini", "release")


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def read_headers(include):
    paths = [os.path.join(include, "asyncrt.h")]
    sub = os.path.join(include, "asyncrt")
    paths += sorted(os.path.join(sub, n) for n in os.listdir(sub) if n.endswith(".h"))
    return {p: open(p, encoding="utf-8").read() for p in paths}


def main():
    include = sys.argv[1]
    headers = read_headers(include)
    problems = []
    functions = {}  # name -> (header, parameters)
    macros = {}  # name -> (header, body, function-like)
    types = {}  # name -> header

    for path, text in headers.items():
        rel = os.path.relpath(path, os.path.dirname(include))
        code = strip_comments(text)
        # Macros, with their continuation lines joined.
        joined = re.sub(r"\\\n", " ", code)
        for m in re.finditer(r"^\s*#\s*define\s+(\w+)(\()?(.*)$", joined, flags=re.M):
            macros[m.group(1)] = (rel, m.group(3), m.group(2) is not None)
        body = "\n".join(l for l in joined.splitlines() if not l.lstrip().startswith("#"))
        body = re.sub(r'extern\s+"C"\s*\{', " ", body)
        for m in re.finditer(r"typedef\s[^;{]*?\(\s*\*\s*(\w+)\s*\)\s*\(", body):
            types[m.group(1)] = rel
        for m in re.finditer(r"typedef\s+(?:struct|union|enum)\s+(\w+)", body):
            types[m.group(1)] = rel
        for m in re.finditer(r"\}\s*(\w+)\s*;", body):
            types[m.group(1)] = rel
        for m in re.finditer(r"typedef\s+[\w\s\*]+?\b(\w+)\s*;", body):
            types[m.group(1)] = rel
        for m in re.finditer(r"\b(?:enum\s*\w*\s*\{)([^}]*)\}", body):
            for c in re.findall(r"\b([A-Za-z_]\w*)\s*(?:=|,|$)", m.group(1)):
                macros.setdefault(c, (rel, "", False))
        # Function declarations: a type, a name, a parameter list, a ';'.
        for m in re.finditer(r"(?:^|(?<=[;}]))\s*((?:static\s+inline\s+)?[A-Za-z_][\w\s\*]*?[\s\*])"
                             r"(\w+)\s*\(([^;{}]*?)\)\s*(?:__attribute__\s*\(\(.*?\)\)\s*)?[;{]",
                             body, flags=re.S):
            ret, name, params = m.group(1), m.group(2), m.group(3)
            if ret.strip().startswith("typedef") or name in ("sizeof", "defined"):
                continue
            functions[name] = (rel, " ".join(params.split()))

    def bad(rel, name, why):
        problems.append(f"{rel}: {name}: {why}")

    for name, (rel, params) in sorted(functions.items()):
        if not (name.startswith("rt_") or name.startswith("rt__")):
            bad(rel, name, "a public function is rt_... (rt__ when internal)")
    for name, rel in sorted(types.items()):
        if not (name.startswith("rt_") or name.startswith("rt__")):
            bad(rel, name, "a public type is rt_...")
    for name, (rel, body, fnlike) in sorted(macros.items()):
        if name.startswith(("RT_", "RT__")) or re.fullmatch(r"ASYNCRT_\w+", name):
            continue
        if name in SITE_MACROS:
            target = SITE_MACROS[name]
            if not fnlike or target + "(" not in body.replace(" (", "("):
                bad(rel, name, f"a site macro expands to {target}")
            continue
        bad(rel, name, "a macro is RT_... (RT__ when internal)")
        if name in functions:
            bad(rel, name, "a macro hides the function of the same name")
    for name in SITE_MACROS:
        if name in functions:
            bad(functions[name][0], name, "a site macro hides a function of its name")
    for name in AWAIT_SITE_MACROS:
        if name in macros and name.endswith("_await") and name != "rt_fiber_await" \
                and name[:-len("await")] + "init" not in functions:
            bad(macros[name][0], name, "an _await helper is an operation's init and its await: "
                f"{name[:-len('await')]}init must exist")

    everything = set(functions) | set(types) | set(macros)
    by_case = {}
    for name in everything:
        by_case.setdefault(name.lower(), []).append(name)
    for group in by_case.values():
        if len(group) > 1:
            bad("include", " and ".join(sorted(group)), "names that differ only in case")

    for name, (rel, params) in sorted(functions.items()):
        if name.startswith("rt__"):
            continue
        # "by_ref" is the waker's borrowing form (Rust's wake_by_ref), no verb.
        words = name.replace("_by_ref", "_byref").split("_")[1:]
        if name.endswith("_wait") and "int64_t timeout_ns" not in params:
            bad(rel, name, "a _wait function blocks the calling thread, with a timeout_ns")
        if words[-1] == "await" and name != "rt_fiber_await" and name[:-len("await")] + "init" not in functions:
            bad(rel, name, "an _await helper is an operation's init and its await: "
                f"{name[:-len('await')]}init must exist")
        if "blocking" in words and name not in BLOCKING_POOL:
            bad(rel, name, "_blocking names only the blocking pool; a thread-blocking call ends in _wait")
        for verb in BANNED_VERBS:
            if verb in words and not (verb == "release" and name in RELEASE_OK):
                bad(rel, name, f"'{verb}' is not an end-of-life verb of the table "
                    "(drop, free, close, cancel, shutdown)")
        if words[-1] == "at" or "at" in words[-2:-1] and words[-1] == "init" or "deadline" in words:
            bad(rel, name, "absolute time is _until")
        if "current" in words and words[0] != "current":
            bad(rel, name, "the calling thread's questions are rt_current_*")
        if words[-1] == "init" and not re.match(r"[^,]*\*", params):
            bad(rel, name, "an _init function's first argument points to the memory it initialises")
        if words[-1] == "new" and "**" not in params:
            bad(rel, name, "a _new function returns its object through a pointer to pointer")
    for name, rel in sorted(types.items()):
        if name.endswith("_wait") or "blocking" in name.split("_") and name not in BLOCKING_POOL:
            bad(rel, name, "_wait and _blocking name thread-blocking functions, not types")

    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        return 1
    print(f"names: {len(functions)} functions, {len(types)} types and {len(macros)} macros "
          "follow the table")
    return 0


if __name__ == "__main__":
    sys.exit(main())
