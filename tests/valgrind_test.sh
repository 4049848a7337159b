#!/bin/sh
# Valgrind's memcheck follows fiber switches (src/fiber/stack.c registers
# every stack): valgrind_fibers_target runs under it with no error, no
# leak, and none of the "client switching stacks?" warnings that an
# unregistered stack switch gives.
set -eu
valgrind="${1:?usage: valgrind_test.sh VALGRIND TARGET}"
target="${2:?usage: valgrind_test.sh VALGRIND TARGET}"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
"$valgrind" --error-exitcode=9 --leak-check=full --errors-for-leak-kinds=definite \
    "$target" >"$log" 2>&1 || status=$?
if [ "$status" -ne 0 ] || grep -q "switching stacks" "$log" || ! grep -q "^sum " "$log"; then
    cat "$log" >&2
    echo "valgrind_test.sh: exit status $status" >&2
    exit 1
fi
echo "valgrind: $(grep '^sum ' "$log"), no errors, no stack-switch warnings"
