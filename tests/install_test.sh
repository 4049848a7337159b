#!/usr/bin/env bash
# Installs asyncrt into a temporary prefix with `meson install`, then builds a
# program outside the tree the way a user would:
#     cc app.c $(pkg-config --cflags --libs asyncrt)
# and runs it, against the shared library and against the static one.
#   tests/install_test.sh SOURCE_ROOT
set -euo pipefail
trap 'echo "install test: failed at line $LINENO" >&2' ERR
src=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

meson setup "$tmp/build" "$src" --prefix="$tmp/prefix" --buildtype=release \
    -Dtests=false -Dbench=false -Dexamples=false >"$tmp/setup.log" 2>&1 ||
    { cat "$tmp/setup.log"; exit 1; }
ninja -C "$tmp/build" install >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; exit 1; }

pcdir=$(dirname "$(find "$tmp/prefix" -name asyncrt.pc | head -n 1)")
export PKG_CONFIG_PATH="$pcdir"
test -f "$tmp/prefix/include/asyncrt.h"
test -f "$tmp/prefix/include/asyncrt/task.h"

cat >"$tmp/app.c" <<'APP'
#include <asyncrt.h>
#include <stdint.h>
#include <stdio.h>

static rt_poll answer(void *state, rt_context *cx, void **out)
{
    (void)state;
    (void)cx;
    *out = (void *)(uintptr_t)42;
    return RT_READY;
}

int main(void)
{
    rt_runtime *rt;
    if (rt_runtime_new(NULL, &rt) < 0)
        return 1;
    void *value = NULL;
    int err = rt_block_on(rt, answer, NULL, NULL, 0, &value);
    rt_runtime_free(rt);
    printf("answer %d\n", (int)(uintptr_t)value);
    return err == 0 && (uintptr_t)value == 42 ? 0 : 1;
}
APP

cc=${CC:-cc}
# shellcheck disable=SC2046
"$cc" -std=c11 -Wall -Wextra -Werror -o "$tmp/app" "$tmp/app.c" $(pkg-config --cflags --libs asyncrt)
libdir=$(pkg-config --variable=libdir asyncrt)
LD_LIBRARY_PATH="$libdir" "$tmp/app"
# The program must really use the installed shared library.
LD_LIBRARY_PATH="$libdir" ldd "$tmp/app" | grep -q "$libdir/libasyncrt.so"

# shellcheck disable=SC2046
"$cc" -std=c11 -Wall -Wextra -Werror -static-libgcc -o "$tmp/app_static" "$tmp/app.c" \
    $(pkg-config --cflags asyncrt) "$libdir/libasyncrt.a" $(pkg-config --static --libs-only-l asyncrt | sed 's/-lasyncrt//')
"$tmp/app_static"
echo "install test passed"
