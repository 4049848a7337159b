#!/bin/sh
# scripts/gdb/asyncrt.py against a live program and against its core file:
# `asyncrt fibers` lists the three fibers of gdb_fibers_target with where
# they await (file:line in gdb_target_leaf) and a backtrace that goes
# through gdb_target_middle for two of them.
set -eu
target="${1:?usage: gdb_test.sh TARGET SCRIPT}"
script="${2:?usage: gdb_test.sh TARGET SCRIPT}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
line=$(grep -n "gdb_test.sh: the await" "$(dirname "$0")/gdb_fibers_target.c" | cut -d: -f1)

check() {
    out="$1"
    what="$2"
    fail=0
    grep -q "^3 fibers$" "$out" || { echo "gdb_test.sh ($what): not 3 fibers" >&2; fail=1; }
    n=$(grep -c "last await at .*gdb_fibers_target.c:$line in gdb_target_leaf" "$out" || true)
    [ "$n" -eq 3 ] || { echo "gdb_test.sh ($what): $n fibers await at line $line" >&2; fail=1; }
    n=$(grep -c "#0 0x[0-9a-f]* in gdb_target_leaf (.*gdb_fibers_target.c:$line)" "$out" || true)
    [ "$n" -eq 3 ] || { echo "gdb_test.sh ($what): $n frames #0 in gdb_target_leaf" >&2; fail=1; }
    n=$(grep -c "#1 0x[0-9a-f]* in gdb_target_middle" "$out" || true)
    [ "$n" -eq 2 ] || { echo "gdb_test.sh ($what): $n frames #1 in gdb_target_middle" >&2; fail=1; }
    if [ "$fail" -ne 0 ]; then
        cat "$out" >&2
        exit 1
    fi
}

gdb -nx -batch -ex "set pagination off" -x "$script" -ex run \
    -ex "asyncrt fibers gdb_target_runtime" -ex "generate-core-file $work/core" -ex kill \
    "$target" >"$work/live" 2>&1 </dev/null
check "$work/live" "a running program"
gdb -nx -batch -x "$script" -ex "asyncrt fibers gdb_target_runtime" "$target" "$work/core" \
    >"$work/core.out" 2>&1 </dev/null
check "$work/core.out" "a core file"
echo "gdb: asyncrt fibers lists the fibers of a running program and of its core file"
