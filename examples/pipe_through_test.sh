#!/usr/bin/env bash
# Drives pipe_through: text through cat and tr both ways, the child's exit
# status passed on (also for a child killed by a signal), a reader that goes
# away early on either side (as `| head -n1` does), and a program that does
# not exist.
#
#   pipe_through_test.sh PATH_TO_PIPE_THROUGH
set -euo pipefail
pt=$1
fail() { echo "pipe_through_test: $*" >&2; exit 1; }

out=$(printf 'one\ntwo\n' | "$pt" cat | cat)
[ "$out" = $'one\ntwo' ] || fail "through cat: '$out'"
out=$(printf 'shout\n' | "$pt" tr a-z A-Z | cat)
[ "$out" = "SHOUT" ] || fail "through tr: '$out'"
# More than a pipe's buffer, both ways at once.
n=$(head -c 1000000 /dev/zero | "$pt" cat | wc -c)
[ "$n" -eq 1000000 ] || fail "1 MB through cat came out as $n bytes"
status=0; printf 'x' | "$pt" sh -c 'cat >/dev/null; exit 7' >/dev/null || status=$?
[ "$status" -eq 7 ] || fail "exit status 7 came back as $status"
status=0; "$pt" sh -c 'kill -TERM $$' </dev/null >/dev/null || status=$?
[ "$status" -eq $((128 + 15)) ] || fail "a child ended by SIGTERM gave $status"
# The reader downstream goes away after one line: the child's output pipe is
# closed, so the child (sort, still writing) gets SIGPIPE, and pipe_through
# exits at once with its status, 128 + 13.
ms_now() { date +%s%3N; }
for run in 1 2 3; do
    start=$(ms_now)
    out=$(seq 1 100000 | timeout 10 "$pt" sort -rn | head -n1; echo "${PIPESTATUS[*]}")
    took=$(( $(ms_now) - start ))
    [ "$out" = $'100000\n0 141 0' ] ||
        fail "run $run, reader gone downstream: '$out' (timeout's 124 means it hung)"
    [ "$took" -lt 1000 ] || fail "run $run, reader gone downstream: took $took ms"
done
# The child goes away before reading all its input: pipe_through stops
# reading its own input, so the writer upstream gets SIGPIPE too.
out=$(seq 1 1000000 | timeout 10 "$pt" head -n1; echo "${PIPESTATUS[*]}")
[ "$out" = $'1\n141 0' ] || fail "child gone early: '$out'"
status=0; "$pt" /no/such/program </dev/null >/dev/null 2>&1 || status=$?
[ "$status" -eq 127 ] || fail "a missing program gave $status"
echo "pipe_through_test: ok"
