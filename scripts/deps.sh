# Sourced by scripts/test and scripts/bench: makes sure the Debian 12 packages
# asyncrt builds with are installed. As root it installs what is missing with
# apt-get; otherwise it prints the exact apt-get line and stops.

ASYNCRT_PACKAGES="gcc libc6-dev pkg-config meson ninja-build libck-dev liburcu-dev libcriterion-dev systemtap-sdt-dev"

asyncrt_missing_packages() {
    local missing="" p
    for p in $ASYNCRT_PACKAGES "$@"; do
        if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
            missing="$missing $p"
        fi
    done
    echo "$missing"
}

asyncrt_ensure_packages() {
    local missing
    missing=$(asyncrt_missing_packages "$@")
    [ -z "$missing" ] && return 0
    if [ "$(id -u)" -ne 0 ]; then
        echo "asyncrt needs these Debian packages:$missing" >&2
        echo "install them with:" >&2
        echo "    sudo apt-get install -y$missing" >&2
        exit 1
    fi
    echo "installing:$missing" >&2
    export DEBIAN_FRONTEND=noninteractive
    # The package lists of a fresh machine are empty or stale.
    apt-get update -qq >&2
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $missing >&2
}
