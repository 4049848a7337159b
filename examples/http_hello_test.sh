#!/usr/bin/env bash
# Drives http_hello over real connections (a python3 client): a GET answered
# with "hello" on a kept-alive connection, pipelined requests answered in
# order, "Connection: close" and HTTP/1.0 closing after the answer, 400 and
# a close for a bad request line, a method other than GET, a header line
# without a colon and a line too long, then SIGTERM with a connection open:
# exit status 0.
#
#   http_hello_test.sh PATH_TO_HTTP_HELLO
set -euo pipefail
server=$1
# shellcheck source=examples/server_test_lib.sh
. "$(dirname "$0")/server_test_lib.sh"
trap server_cleanup EXIT
fail() { echo "http_hello_test: $*" >&2; exit 1; }

start_server "$server" --workers 2

python3 - "$port" <<'PY' || fail "(above)"
import socket, sys

port = int(sys.argv[1])
HELLO = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
HELLO_CLOSE = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello"
BAD = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"

def connect():
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(5)
    return s

def read_exactly(s, n):
    got = b""
    while len(got) < n:
        chunk = s.recv(n - len(got))
        if not chunk:
            sys.exit("closed after %r, %d bytes expected" % (got, n))
        got += chunk
    return got

def expect_closed(s, what):
    # Closed with bytes of the request still unread (after a bad request),
    # the server's socket sends a reset instead of the end of the stream.
    try:
        if s.recv(100) != b"":
            sys.exit(what + ": the connection stayed open")
    except ConnectionResetError:
        pass

# Keep-alive: three requests one after the other on one connection.
s = connect()
for i in range(3):
    s.sendall(b"GET /%d HTTP/1.1\r\nHost: x\r\n\r\n" % i)
    got = read_exactly(s, len(HELLO))
    if got != HELLO:
        sys.exit("keep-alive %d: %r" % (i, got))
# Pipelined: 16 requests in one packet, 16 answers in order.
s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" * 16)
got = read_exactly(s, 16 * len(HELLO))
if got != HELLO * 16:
    sys.exit("pipelined: %r" % got)
# A request split across packets is answered once complete.
s.sendall(b"GET / HTTP/1.1\r\nHo")
s.sendall(b"st: x\r\n\r\n")
if read_exactly(s, len(HELLO)) != HELLO:
    sys.exit("split request")
# Connection: close, in any case, after pipelined ones.
s.sendall(b"GET / HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\nconnection:  Close\r\n\r\n")
if read_exactly(s, len(HELLO) + len(HELLO_CLOSE)) != HELLO + HELLO_CLOSE:
    sys.exit("connection: close")
expect_closed(s, "connection: close")

# HTTP/1.0 closes unless it asks to keep the connection alive.
s = connect()
s.sendall(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
if read_exactly(s, len(HELLO)) != HELLO:
    sys.exit("HTTP/1.0 keep-alive")
s.sendall(b"GET / HTTP/1.0\r\n\r\n")
if read_exactly(s, len(HELLO_CLOSE)) != HELLO_CLOSE:
    sys.exit("HTTP/1.0")
expect_closed(s, "HTTP/1.0")

# Bad requests: 400, and the connection closed.
for bad in [b"POST / HTTP/1.1\r\n\r\n", b"GET /\r\n\r\n", b"GET / HTTP/2.0\r\n\r\n",
            b"GET / HTTP/1.1 extra\r\n\r\n", b"GET / HTTP/1.1\r\nno colon here\r\n\r\n",
            b"GET /" + b"x" * 9000 + b" HTTP/1.1\r\n\r\n"]:
    s = connect()
    s.sendall(bad)
    got = read_exactly(s, len(BAD))
    if got != BAD:
        sys.exit("bad request %r: %r" % (bad[:40], got))
    expect_closed(s, "bad request")
print("http_hello_test: requests ok")
PY

# The stop, with a kept-alive connection open.
exec 3<>"/dev/tcp/127.0.0.1/$port"
printf 'GET / HTTP/1.1\r\nHost: x\r\n\r\n' >&3
IFS= read -r -t 5 status <&3 || fail "no answer before the stop"
[ "$status" = $'HTTP/1.1 200 OK\r' ] || fail "before the stop: '$status'"
kill -TERM "$pid"
expect_clean_exit
exec 3>&-
echo "http_hello_test: ok (port $port)"
