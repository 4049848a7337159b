#!/usr/bin/env bash
# Drives kv_server over real connections (bash's /dev/tcp): the commands and
# their replies, the idle timeout, and the stop on SIGTERM, which must tell
# an open connection before the server exits with status 0.
#
#   kv_server_test.sh PATH_TO_KV_SERVER
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
fail() { echo "kv_server_test: $*" >&2; exit 1; }

(exec "$server" --port 0 --workers 2 --idle-ms 1500 >"$out") &
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
for _ in $(seq 100); do # up to 10 s
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
done
kill -0 "$pid" 2>/dev/null && fail "the server did not exit within 10 s of SIGTERM"
status=0
wait "$pid" || status=$?
pid=""
[ "$status" -eq 0 ] || fail "the server exited with status $status after SIGTERM"
exec 3>&- 4>&- 6>&-
echo "kv_server_test: ok (port $port)"
