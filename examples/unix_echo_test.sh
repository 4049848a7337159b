#!/usr/bin/env bash
# Starts unix_echo on a socket file in a fresh directory, echoes a line over
# two connections (a python3 client), then sends SIGTERM while both are
# still open: the open connections must be closed, the server must exit
# with status 0 within a few seconds, and its socket file must be gone.
# Then the same on an abstract name, stopped with SIGINT (which a
# background job starts with ignored: rt_signal listens anyway).
#
#   unix_echo_test.sh PATH_TO_UNIX_ECHO
set -euo pipefail
server=$1
dir=$(mktemp -d)
pid=""
cleanup() {
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -rf "$dir"
}
trap cleanup EXIT
fail() { echo "unix_echo_test: $*" >&2; exit 1; }

# start NAME: starts the server on NAME and waits for `listening NAME`.
start() {
    local name=$1 line=""
    : >"$dir/out"
    # exec: $! is then the server itself, never a shell around it.
    (exec "$server" --path "$name" --workers 2 >"$dir/out") &
    pid=$!
    for _ in $(seq 100); do # up to 10 s
        line=$(head -n1 "$dir/out")
        [ "$line" = "listening $name" ] && return
        kill -0 "$pid" 2>/dev/null || fail "the server exited before listening on $name"
        sleep 0.1
    done
    fail "no 'listening $name' line within 10 s (got '$line')"
}

# clients NAME SIGNAL: echoes over two connections, then sends SIGNAL to the
# server while both are open and expects each to be closed by the server.
clients() {
    python3 - "$1" "$pid" "$2" <<'PY'
import os, signal, socket, sys

name, pid, sig = sys.argv[1], int(sys.argv[2]), getattr(signal, sys.argv[3])
# Python writes an abstract name with a leading NUL byte.
address = "\0" + name[1:] if name.startswith("@") else name
conns = []
for i in range(2):
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.settimeout(5)
    c.connect(address)
    conns.append(c)
for i, c in enumerate(conns):
    msg = f"hello from connection {i}\n".encode()
    c.sendall(msg)
    got = b""
    while len(got) < len(msg):
        chunk = c.recv(4096)
        if not chunk:
            sys.exit(f"connection {i}: closed after {got!r}")
        got += chunk
    if got != msg:
        sys.exit(f"connection {i}: sent {msg!r}, got {got!r}")
os.kill(pid, sig)
for i, c in enumerate(conns):
    try:
        if c.recv(4096) != b"":
            sys.exit(f"connection {i}: bytes after the stop")
    except ConnectionResetError:
        pass  # closed as well
    except socket.timeout:
        sys.exit(f"connection {i}: still open 5 s after the signal")
PY
}

# The server must be gone within 10 s, with status 0.
expect_clean_exit() {
    for _ in $(seq 100); do # up to 10 s
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -0 "$pid" 2>/dev/null && fail "the server did not exit within 10 s of the signal"
    local status=0
    wait "$pid" || status=$?
    pid=""
    [ "$status" -eq 0 ] || fail "the server exited with status $status after the signal"
}

path="$dir/echo.sock"
start "$path"
[ -S "$path" ] || fail "no socket file at $path"
clients "$path" SIGTERM || fail "the echo over $path failed"
expect_clean_exit
[ -e "$path" ] && fail "the socket file $path is still there"

abstract="@asyncrt-unix-echo-test-$$"
start "$abstract"
clients "$abstract" SIGINT || fail "the echo over $abstract failed"
expect_clean_exit

echo "unix_echo_test: ok ($path, $abstract)"
