#!/usr/bin/env bash
# Uses asyncrt the way a Meson project that vendors it does: a parent project
# with asyncrt under subprojects/ asks for dependency('asyncrt') and gets it
# from the subproject (meson.override_dependency), which builds only the
# library. Then the parent's program runs.
#   tests/subproject_test.sh SOURCE_ROOT
set -euo pipefail
trap 'echo "subproject test: failed at line $LINENO" >&2' ERR
src=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

mkdir -p "$tmp/parent/subprojects"
ln -s "$src" "$tmp/parent/subprojects/asyncrt"
cat >"$tmp/parent/meson.build" <<'MESON'
project('parent', 'c', default_options: ['c_std=c11', 'warning_level=2', 'werror=true'])
asyncrt = dependency('asyncrt', fallback: 'asyncrt')
executable('app', 'app.c', dependencies: asyncrt)
MESON
cp "$src/tests/consumer_app.c" "$tmp/parent/app.c"

# A system-wide asyncrt must not be picked instead of the subproject.
meson setup "$tmp/build" "$tmp/parent" --force-fallback-for=asyncrt >"$tmp/setup.log" 2>&1 ||
    { cat "$tmp/setup.log"; exit 1; }
ninja -C "$tmp/build" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; exit 1; }
"$tmp/build/app"
# Only the library was built: no tests, benchmarks or examples of asyncrt.
if find "$tmp/build/subprojects" -name 'test_*' -o -name 'asyncrt-bench' | grep -q .; then
    echo "subproject test: the subproject built its tests or benchmarks" >&2
    exit 1
fi
echo "subproject test passed"
