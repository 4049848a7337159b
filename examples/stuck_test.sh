#!/usr/bin/env bash
# examples/stuck: "ready" once stuck, a dump on SIGQUIT that names every
# stuck fiber's await point as stuck.c:LINE (the two lockers, with the same
# stack, in one block), still running after it, and exit status 0 on
# SIGTERM.
set -euo pipefail
stuck=${1:?usage: stuck_test.sh STUCK}
src=$(dirname "$0")/stuck.c
dir=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$dir"' EXIT
mkfifo "$dir/out"
"$stuck" >"$dir/out" 2>"$dir/err" &
pid=$!
exec 3<"$dir/out"
read -r -t 30 line <&3
[ "$line" = ready ] || { echo "expected ready, got: $line" >&2; exit 1; }
kill -QUIT "$pid"
# The dump ends with the waiter's block; wait for both await points.
for _ in $(seq 300); do
    [ "$(grep -c "waiting at .*stuck.c:" "$dir/err" || true)" -ge 2 ] && break
    sleep 0.1
done
cat "$dir/err"
# The lockers' second lock and the waiter's receive, by line number.
lock_line=$(grep -n 'never returns: a deadlock' "$src" | cut -d: -f1)
recv_line=$(grep -n 'never returns: no one sends' "$src" | cut -d: -f1)
# The two lockers wait at the same line with the same stack: one block of 2.
grep -q "2 tasks waiting at .*stuck.c:$lock_line in locker" "$dir/err"
grep -q "1 task waiting at .*stuck.c:$recv_line in waiter" "$dir/err"
grep -q "receive on channel" "$dir/err" || grep -q "recv" "$dir/err"
kill -0 "$pid" # still running after the dump
kill -TERM "$pid"
wait "$pid"
echo "stuck: dump named stuck.c:$lock_line and stuck.c:$recv_line; exited 0"
