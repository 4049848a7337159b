#!/usr/bin/env bash
# Starts echo_server on a free port, echoes a line over two connections (bash's
# /dev/tcp), then sends SIGTERM while both are still open: the server must exit
# with status 0 within a few seconds.
#
#   echo_server_test.sh PATH_TO_ECHO_SERVER
set -euo pipefail
server=$1
# shellcheck source=examples/server_test_lib.sh
. "$(dirname "$0")/server_test_lib.sh"
trap server_cleanup EXIT
fail() { echo "echo_server_test: $*" >&2; exit 1; }

start_server "$server" --workers 2

exec 3<>"/dev/tcp/127.0.0.1/$port"
exec 4<>"/dev/tcp/127.0.0.1/$port"
for fd in 3 4; do
    msg="hello from connection $fd"
    printf '%s\n' "$msg" >&"$fd"
    IFS= read -r -t 5 reply <&"$fd" || fail "no echo on connection $fd"
    [ "$reply" = "$msg" ] || fail "connection $fd: sent '$msg', got '$reply'"
done

kill -TERM "$pid"
expect_clean_exit
exec 3>&- 4>&-
echo "echo_server_test: ok (port $port)"
