#!/usr/bin/env bash
# Drives connector against echo_server over real connections: every client
# succeeds against a running server, every one fails with a refused
# connection on a closed port, and every one times out against a listener
# that accepts but never answers.
#
#   connector_test.sh PATH_TO_CONNECTOR PATH_TO_ECHO_SERVER
set -euo pipefail
connector=$1
echo_server=$2
# shellcheck source=examples/server_test_lib.sh
. "$(dirname "$0")/server_test_lib.sh"
silent=""
cleanup() {
    server_cleanup
    [ -n "$silent" ] && kill "$silent" 2>/dev/null || true
}
trap cleanup EXIT
fail() { echo "connector_test: $*" >&2; exit 1; }

start_server "$echo_server" --workers 2
out=$("$connector" --port "$port" --count 100 --timeout-ms 10000 --workers 2) ||
    fail "against the echo server: $out"
[ "$out" = "ok 100 failed 0" ] || fail "against the echo server: '$out'"
kill -TERM "$pid"
expect_clean_exit

# The server is gone: its port now refuses connections.
if out=$("$connector" --port "$port" --count 10 --workers 2); then
    fail "a closed port succeeded: '$out'"
fi
# (The message's words are the C library's or Go's: "Connection refused",
# "connection refused".)
[[ $out == *"ok 0 failed 10"* ]] && grep -qi "connection refused" <<<"$out" ||
    fail "closed port: '$out'"

# A listener that accepts and never answers: every read hits the deadline.
silent_out=$(mktemp)
python3 -c '
import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(64)
print(s.getsockname()[1], flush=True)
conns = []
while True:
    conns.append(s.accept()[0])
' >"$silent_out" &
silent=$!
for _ in $(seq 100); do
    [ -s "$silent_out" ] && break
    sleep 0.1
done
silent_port=$(head -n1 "$silent_out")
rm -f "$silent_out"
[ -n "$silent_port" ] || fail "the silent listener did not start"
if out=$("$connector" --port "$silent_port" --count 5 --timeout-ms 300 --workers 2); then
    fail "a silent server succeeded: '$out'"
fi
[[ $out == *"ok 0 failed 5"* ]] && grep -qiE "timed out|timeout" <<<"$out" ||
    fail "silent server: '$out'"
echo "connector_test: ok"
