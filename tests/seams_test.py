#!/usr/bin/env python3
"""The seams between the library's files (docs/design.md, "Layers"):

1. No include circle: following the #include "..." lines of src/ from any
   file never comes back to it.
2. No call circle: in the built library, no chain of calls from one file's
   functions through other files' functions comes back to the first file
   (read from the objects' symbol tables with nm, so it sees every call the
   compiler kept, and none that an inline function folded away).
3. The runtime object is the scheduler's: the header that defines struct
   rt_runtime (src/scheduler/runtime_object.h) is reachable through includes
   only from src/scheduler and src/runtime.c. Anywhere else the struct is
   incomplete, so no field of it can be read there; other layers ask the
   scheduler through functions (src/scheduler/runtime_services.h).

    seams_test.py SRC_DIR STATIC_LIBRARY
"""
import collections
import os
import re
import subprocess
import sys

STRUCT_HEADER = "runtime_object.h"
STRUCT_OWNERS = ("scheduler/",)
STRUCT_OWNER_FILES = ("runtime.c",)
LAYERS = ("base", "task", "reactor", "scheduler", "toolkit")


def circles(graph):
    """The strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def show(component, graph, label):
    """One line per edge inside the circle, so the fix is plain."""
    members = set(component)
    lines = []
    for v in component:
        for w in sorted(graph.get(v, ())):
            if w in members:
                why = label(v, w)
                lines.append(f"    {v} -> {w}{why}")
    return "\n".join(lines)


def include_graph(src):
    files = {}
    for root, _, names in os.walk(src):
        for n in names:
            if n.endswith((".c", ".h")):
                path = os.path.join(root, n)
                files[os.path.relpath(path, src)] = path
    by_name = collections.defaultdict(list)
    for rel in files:
        by_name[os.path.basename(rel)].append(rel)
    graph = collections.defaultdict(set)
    for rel, path in files.items():
        with open(path, encoding="utf-8") as f:
            for line in f:
                m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
                if m and m.group(1) in by_name:
                    for target in by_name[m.group(1)]:
                        if target != rel:
                            graph[rel].add(target)
    return files, graph


def call_graph(library):
    out = subprocess.run(["nm", library], capture_output=True, text=True, check=True).stdout
    defines, uses, member = {}, collections.defaultdict(set), None
    for line in out.splitlines():
        if line.endswith(".o:"):
            # Meson names an object src_<layer>_<file>.c.o (a thin archive
            # lists it with its folder).
            name = re.sub(r"^src_", "", os.path.basename(line[:-1])).replace(".c.o", ".c")
            layer = name.split("_", 1)[0]
            member = name.replace("_", "/", 1) if layer in LAYERS else name
            continue
        parts = line.split()
        if member is None:
            continue
        if len(parts) == 3 and parts[1] in "TDBRV":
            defines[parts[2]] = member
        elif len(parts) == 2 and parts[0] == "U":
            uses[member].add(parts[1])
    graph = collections.defaultdict(set)
    why = collections.defaultdict(list)
    for f, symbols in uses.items():
        for s in sorted(symbols):
            target = defines.get(s)
            if target is not None and target != f:
                graph[f].add(target)
                why[(f, target)].append(s)
    return graph, why


def main():
    src, library = sys.argv[1], sys.argv[2]
    status = 0

    files, includes = include_graph(src)
    for c in circles(includes):
        print("include circle:\n" + show(c, includes, lambda v, w: ""), file=sys.stderr)
        status = 1

    calls, why = call_graph(library)
    for c in circles(calls):
        print("call circle:\n" + show(c, calls, lambda v, w: " (" + ", ".join(why[(v, w)][:3]) + ")"),
              file=sys.stderr)
        status = 1

    holders = [rel for rel in files if os.path.basename(rel) == STRUCT_HEADER]
    if not holders:
        print(f"no {STRUCT_HEADER} in {src}", file=sys.stderr)
        return 1
    # Everything that sees the struct: the transitive includers of its header.
    reverse = collections.defaultdict(set)
    for v, targets in includes.items():
        for w in targets:
            reverse[w].add(v)
    seen, todo = set(), list(holders)
    while todo:
        v = todo.pop()
        for w in reverse.get(v, ()):
            if w not in seen:
                seen.add(w)
                todo.append(w)
    for rel in sorted(seen):
        if not rel.startswith(STRUCT_OWNERS) and rel not in STRUCT_OWNER_FILES:
            print(f"{rel} sees struct rt_runtime ({STRUCT_HEADER}): only src/scheduler and "
                  "src/runtime.c may; ask through runtime_services.h", file=sys.stderr)
            status = 1

    if status == 0:
        print(f"seams: no include or call circle among {len(files)} files, and struct rt_runtime "
              "is seen only by the scheduler and runtime.c")
    return status


if __name__ == "__main__":
    sys.exit(main())
