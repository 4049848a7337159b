#!/usr/bin/env bash
# The USDT probes of src/base/events.h: every probe is in the library's ELF
# notes (provider asyncrt, the stapsdt notes `readelf -n` lists), and, where
# the machine allows attaching uprobes, perf counts at least N hits of
# asyncrt:poll_start while a program polls N tasks through the library.
# Where it does not (no tracefs, not root, perf missing or refusing), the
# attach is skipped with "perf attach skipped: <why>" and the test passes on
# the ELF check alone. A probe it adds is deleted again on every way out.
#
#   usdt_test.sh LIBASYNCRT.so USDT_POLLS_PROGRAM
set -euo pipefail
lib="${1:?usage: usdt_test.sh LIBASYNCRT.so USDT_POLLS_PROGRAM}"
prog="${2:?usage: usdt_test.sh LIBASYNCRT.so USDT_POLLS_PROGRAM}"
n=2000
probes="spawn poll_start poll_end wake steal park unpark reactor_turn timer_fire"

# ---- the ELF notes ----------------------------------------------------------
command -v readelf >/dev/null || { echo "usdt_test.sh: readelf (binutils) is needed" >&2; exit 1; }
# Each stapsdt note lists "Provider: P" then "Name: N".
names=$(readelf -n "$lib" | awk '
    /^ *Provider:/ { provider = $2 }
    /^ *Name:/ && provider == "asyncrt" { print $2; provider = "" }' | sort -u)
status=0
for p in $probes; do
    if ! grep -qx "$p" <<<"$names"; then
        echo "usdt_test.sh: no probe asyncrt:$p in $lib's stapsdt notes" >&2
        status=1
    fi
done
[ "$status" -eq 0 ] || exit 1
echo "usdt: every probe (asyncrt: $probes) is in $lib's stapsdt notes"

# ---- attaching --------------------------------------------------------------
skip() {
    echo "perf attach skipped: $*"
    exit 0
}
command -v perf >/dev/null || skip "perf is not installed"
[ "$(id -u)" -eq 0 ] || skip "not root (uprobes need root)"
tracefs=""
for d in /sys/kernel/tracing /sys/kernel/debug/tracing; do
    if [ -e "$d/uprobe_events" ]; then
        tracefs=$d
        break
    fi
done
[ -n "$tracefs" ] || skip "no tracefs with uprobe_events (mount -t tracefs nodev /sys/kernel/tracing)"

event=sdt_asyncrt:poll_start
added=0
# perf probe puts the library into perf's build-id cache (~/.debug); an entry
# that was not there before is removed again too.
build_id=$(readelf -n "$lib" | awk '/Build ID:/ { print $3; exit }')
cached_before=0
if [ -n "$build_id" ] && [ -e "${HOME:-/root}/.debug/.build-id/${build_id:0:2}/${build_id:2}" ]; then
    cached_before=1
fi
cleanup() {
    if [ "$added" -eq 1 ]; then
        perf probe -q -d "$event" >/dev/null 2>&1 || echo "usdt_test.sh: could not delete $event" >&2
    fi
    if [ "$cached_before" -eq 0 ]; then
        perf buildid-cache --remove "$lib" >/dev/null 2>&1 || true
    fi
}
trap cleanup EXIT

if grep -q "^p:sdt_asyncrt/poll_start " "$tracefs/uprobe_events" 2>/dev/null; then
    skip "$event already exists (someone else's probe; not touching it)"
fi
# Newer perf reads the SDT notes of -x itself; older perf finds them only in
# its build-id cache.
if ! out=$(perf probe -x "$lib" -a "$event" 2>&1); then
    perf buildid-cache --add "$lib" >/dev/null 2>&1 || true
    out=$(perf probe -x "$lib" -a "$event" 2>&1) || skip "perf probe refused: $(tail -n 1 <<<"$out")"
fi
added=1

# perf stat -x, writes "count,unit,event,..." to stderr; the program's own
# output goes to /dev/null.
if ! out=$(perf stat -x, -e "$event" -- "$prog" "$n" 2>&1 >/dev/null); then
    skip "perf stat refused: $(tail -n 1 <<<"$out")"
fi
count=$(awk -F, -v ev="$event" '$3 == ev { print $1 }' <<<"$out")
case "$count" in
    ''|*[!0-9]*) skip "perf stat counted nothing usable: $(tail -n 1 <<<"$out")" ;;
esac
if [ "$count" -lt "$n" ]; then
    echo "usdt_test.sh: perf counted $count hits of $event for $n polls" >&2
    exit 1
fi
echo "usdt: perf counted $count hits of $event for $n polls"
