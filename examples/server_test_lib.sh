# What the example server tests share (sourced, not run): start a server on
# a free port and read the port from its `listening 127.0.0.1:PORT` line,
# then, after SIGTERM, expect it to exit with status 0 within 10 s. Sets
# $pid and $port; the caller defines fail() and calls server_cleanup on exit.

server_out=$(mktemp)
pid=""
port=""

server_cleanup() {
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$server_out"
}

# start_server PATH ARGS...
start_server() {
    # exec: $! is then the server itself, never a shell around it.
    (exec "$@" --port 0 >"$server_out") &
    pid=$!
    local line=""
    for _ in $(seq 100); do # up to 10 s
        line=$(head -n1 "$server_out")
        if [[ $line =~ ^listening\ 127\.0\.0\.1:([0-9]+)$ ]]; then
            port=${BASH_REMATCH[1]}
            return
        fi
        kill -0 "$pid" 2>/dev/null || fail "the server exited before listening"
        sleep 0.1
    done
    fail "no 'listening 127.0.0.1:PORT' line within 10 s (got '$line')"
}

# After SIGTERM: the server must be gone within 10 s, with status 0.
expect_clean_exit() {
    for _ in $(seq 100); do # up to 10 s
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -0 "$pid" 2>/dev/null && fail "the server did not exit within 10 s of SIGTERM"
    local status=0
    wait "$pid" || status=$?
    pid=""
    [ "$status" -eq 0 ] || fail "the server exited with status $status after SIGTERM"
}
