#!/usr/bin/env bash
# Starts echo_server on a free port, echoes a line over two connections (bash's
# /dev/tcp), then sends SIGTERM while both are still open: the server must exit
# with status 0 within a few seconds.
#
#   echo_server_test.sh PATH_TO_ECHO_SERVER
set -euo pipefail
server=$1
out=$(mktemp)
pid=""
cleanup() {
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$out"
}
trap cleanup EXIT
fail() { echo "echo_server_test: $*" >&2; exit 1; }

# exec: $! is then the server itself, never a shell around it.
(exec "$server" --port 0 --workers 2 >"$out") &
pid=$!

port=""
for _ in $(seq 100); do # up to 10 s
    line=$(head -n1 "$out")
    if [[ $line =~ ^listening\ 127\.0\.0\.1:([0-9]+)$ ]]; then
        port=${BASH_REMATCH[1]}
        break
    fi
    kill -0 "$pid" 2>/dev/null || fail "the server exited before listening"
    sleep 0.1
done
[ -n "$port" ] || fail "no 'listening 127.0.0.1:PORT' line within 10 s (got '$line')"

exec 3<>"/dev/tcp/127.0.0.1/$port"
exec 4<>"/dev/tcp/127.0.0.1/$port"
for fd in 3 4; do
    msg="hello from connection $fd"
    printf '%s\n' "$msg" >&"$fd"
    IFS= read -r -t 5 reply <&"$fd" || fail "no echo on connection $fd"
    [ "$reply" = "$msg" ] || fail "connection $fd: sent '$msg', got '$reply'"
done

kill -TERM "$pid"
for _ in $(seq 100); do # up to 10 s
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
done
kill -0 "$pid" 2>/dev/null && fail "the server did not exit within 10 s of SIGTERM"
status=0
wait "$pid" || status=$?
pid=""
[ "$status" -eq 0 ] || fail "the server exited with status $status after SIGTERM"
exec 3>&- 4>&-
echo "echo_server_test: ok (port $port)"
