#!/usr/bin/env bash
# Drives kv_server over real connections (bash's /dev/tcp): the commands and
# their replies, the idle timeout, and the stop on SIGTERM, which must tell
# an open connection before the server exits with status 0.
#
#   kv_server_test.sh PATH_TO_KV_SERVER
set -euo pipefail
server=$1
# shellcheck source=examples/server_test_lib.sh
. "$(dirname "$0")/server_test_lib.sh"
trap server_cleanup EXIT
fail() { echo "kv_server_test: $*" >&2; exit 1; }

start_server "$server" --workers 2 --idle-ms 1500

# ask FD COMMAND EXPECTED: sends one line, checks the one-line reply.
ask() {
    printf '%s\n' "$2" >&"$1"
    IFS= read -r -t 5 reply <&"$1" || fail "no reply to '$2'"
    [ "$reply" = "$3" ] || fail "'$2': expected '$3', got '$reply'"
}

exec 3<>"/dev/tcp/127.0.0.1/$port"
exec 4<>"/dev/tcp/127.0.0.1/$port"
ask 3 "SET a 1" "OK"
ask 3 "GET a" "1"
ask 4 "GET a" "1" # one map for every connection
ask 4 "SET a 2" "OK"
ask 3 "GET a" "2"
ask 3 "GET b" "NOT_FOUND"
ask 3 "DEL a" "OK"
ask 3 "DEL a" "NOT_FOUND"
ask 3 "GET a" "NOT_FOUND"
ask 3 "FOO a" "ERR unknown command"
ask 3 "SET a" "ERR wrong number of arguments"
ask 3 "GET a b" "ERR wrong number of arguments"

# Pipelined commands: two in one packet, answered together in well under the
# 40 ms that Nagle's algorithm against a delayed ACK would add to the second
# reply, every time (python3 is the interpreter Meson itself runs on). The
# bound leaves room for a sanitizer build's slower start of a connection.
python3 - "$port" <<'PY' || fail "pipelined commands were answered slowly (above)"
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.settimeout(5)
buf = b""
worst = 0.0
for i in range(40):
    start = time.monotonic()
    s.sendall(b"SET p%d %d\nGET p%d\n" % (i, i, i))
    want = b"OK\n%d\n" % i
    while len(buf) < len(want):
        buf += s.recv(4096)
    took = time.monotonic() - start
    worst = max(worst, took)
    if buf[:len(want)] != want:
        sys.exit("pair %d: expected %r, got %r" % (i, want, buf))
    buf = buf[len(want):]
    if took >= 0.020:
        sys.exit("pair %d took %.1f ms" % (i, took * 1000))
s.close()
PY

# A line longer than the server takes (1024 bytes) is refused and the
# connection closed; a CRLF line ending is fine.
exec 7<>"/dev/tcp/127.0.0.1/$port"
ask 7 $'GET a\r' "NOT_FOUND"
printf 'SET k %02000d\n' 0 >&7
IFS= read -r -t 5 reply <&7 || fail "no reply to a line too long"
[ "$reply" = "ERR line too long" ] || fail "line too long: got '$reply'"
exec 7>&-

# A silent connection is told and closed after its idle time.
exec 5<>"/dev/tcp/127.0.0.1/$port"
IFS= read -r -t 10 reply <&5 || fail "no idle timeout on a silent connection"
[ "$reply" = "ERR idle timeout" ] || fail "idle: got '$reply'"
if IFS= read -r -t 5 reply <&5; then fail "the idle connection stayed open ('$reply')"; fi
exec 5>&-

# The stop: an open connection hears of it, and the server exits 0.
exec 6<>"/dev/tcp/127.0.0.1/$port"
ask 6 "SET k v" "OK"
kill -TERM "$pid"
IFS= read -r -t 10 reply <&6 || fail "no goodbye on SIGTERM"
[ "$reply" = "ERR server shutting down" ] || fail "stop: got '$reply'"
expect_clean_exit
exec 3>&- 4>&- 6>&-
echo "kv_server_test: ok (port $port)"
