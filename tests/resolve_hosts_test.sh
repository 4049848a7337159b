#!/usr/bin/env bash
# A name from a temporary hosts file, through NSS as any program sees it:
# in a private mount namespace (unshare, as root or through a user
# namespace) a temporary file is bind-mounted over /etc/hosts, and
# resolve_child looks names up with rt_resolve. Skipped (77) where no mount
# namespace can be made.
#
#   resolve_hosts_test.sh PATH_TO_RESOLVE_CHILD
set -euo pipefail
child=$1
hosts=$(mktemp)
trap 'rm -f "$hosts"' EXIT
printf '192.0.2.7 asyncrt-hosts-test.example\n192.0.2.8 second.asyncrt-hosts-test.example\n' >"$hosts"
run() {
    unshare --mount --map-root-user sh -c 'mount --bind "$1" /etc/hosts && exec "$2" "$3"' \
        sh "$hosts" "$child" "$1"
}
if ! unshare --mount --map-root-user true 2>/dev/null; then
    echo "resolve_hosts_test: no mount namespace here: skipped" >&2
    exit 77
fi
out=$(run asyncrt-hosts-test.example) || { echo "resolve_hosts_test: lookup failed" >&2; exit 1; }
[ "$out" = "192.0.2.7" ] || { echo "resolve_hosts_test: got '$out'" >&2; exit 1; }
out=$(run second.asyncrt-hosts-test.example)
[ "$out" = "192.0.2.8" ] || { echo "resolve_hosts_test: second: got '$out'" >&2; exit 1; }
# A name the file does not have fails (.invalid never resolves, RFC 6761).
if run missing.invalid >/dev/null 2>&1; then
    echo "resolve_hosts_test: a name missing from the file resolved" >&2
    exit 1
fi
echo "resolve_hosts_test: ok"
