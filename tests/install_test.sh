#!/usr/bin/env bash
# Installs asyncrt into a temporary prefix with `meson install`, then builds a
# program outside the tree the way a user would:
#     cc app.c $(pkg-config --cflags --libs asyncrt)
# and runs it, against the shared library and against the static one. With
# a sanitizer, the library is built under it, and asyncrt.pc alone must give
# the program everything it needs to link (a ThreadSanitizer build calls
# liburcu's queue out of line). Then a CMake project finds the installed
# package with find_package(asyncrt) and links each of its two targets.
#   tests/install_test.sh SOURCE_ROOT [none|address,undefined|thread]
set -euo pipefail
trap 'echo "install test: failed at line $LINENO" >&2' ERR
src=$1
sanitizer=${2:-none}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# A plain setup, with every option at its default, on a machine that has the
# library's own dependencies but not Criterion: pkg-config sees only ck and
# liburcu. The tests then switch themselves off and the install works.
mkdir -p "$tmp/pc"
for pc in ck liburcu; do
    f=$(pkg-config --variable=pcfiledir "$pc")/$pc.pc
    ln -s "$f" "$tmp/pc/$pc.pc"
done
PKG_CONFIG_LIBDIR="$tmp/pc" meson setup "$tmp/build" "$src" --prefix="$tmp/prefix" \
    --buildtype=release -Dsanitizer="$sanitizer" -Dbench=disabled -Dexamples=disabled \
    >"$tmp/setup.log" 2>&1 || { cat "$tmp/setup.log"; exit 1; }
grep -q "Run-time dependency criterion found: NO" "$tmp/setup.log" ||
    { echo "install test: Criterion was visible to the setup" >&2; exit 1; }
ninja -C "$tmp/build" install >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; exit 1; }

pcdir=$(dirname "$(find "$tmp/prefix" -name asyncrt.pc | head -n 1)")
# A consumer that has no ck.pc or liburcu.pc: asyncrt.pc must name neither,
# and must bring no flags of theirs (static linking included).
export PKG_CONFIG_LIBDIR="$pcdir"
flags=$(pkg-config --cflags --libs --static asyncrt)
case "$sanitizer:$flags" in
    thread:*-lurcu-common*) ;; # the one library a ThreadSanitizer build needs
    *ck*|*urcu*|*-D__x86_64__*) echo "install test: asyncrt.pc leaks: $flags" >&2; exit 1 ;;
esac
case "$sanitizer:$flags" in
    none:*-fsanitize*) echo "install test: a plain asyncrt.pc asks for a sanitizer" >&2; exit 1 ;;
    none:*) ;;
    *:*-fsanitize="$sanitizer"*) ;;
    *) echo "install test: asyncrt.pc of a $sanitizer build lacks -fsanitize: $flags" >&2; exit 1 ;;
esac
test "$(pkg-config --modversion asyncrt)" = "$(sed -n 's/^#define ASYNCRT_VERSION_STRING "\(.*\)"/\1/p' "$src/include/asyncrt/version.h")"
test -f "$tmp/prefix/include/asyncrt.h"
test -f "$tmp/prefix/include/asyncrt/task.h"

cp "$src/tests/consumer_app.c" "$tmp/app.c"

cc=${CC:-cc}
# shellcheck disable=SC2046
"$cc" -std=c11 -Wall -Wextra -Werror -o "$tmp/app" "$tmp/app.c" $(pkg-config --cflags --libs asyncrt)
libdir=$(pkg-config --variable=libdir asyncrt)
LD_LIBRARY_PATH="$libdir" "$tmp/app"
# The program must really use the installed shared library.
# (ldd's whole output first: grep -q stops reading at its match, and under
# pipefail the SIGPIPE that ldd may then get would fail the test.)
deps=$(LD_LIBRARY_PATH="$libdir" ldd "$tmp/app")
grep -q "$libdir/libasyncrt.so" <<<"$deps"

# Static: the archive, then what `pkg-config --static` lists besides it.
# shellcheck disable=SC2046
"$cc" -std=c11 -Wall -Wextra -Werror -static-libgcc -o "$tmp/app_static" "$tmp/app.c" \
    $(pkg-config --cflags asyncrt) "$libdir/libasyncrt.a" \
    $(pkg-config --static --libs asyncrt | sed 's/-lasyncrt//; s/-L[^ ]*//g')
"$tmp/app_static"

# CMake: find_package(asyncrt) from the prefix, both imported targets. The
# installed tree is moved first: the package must find itself from where it
# lies, not from the prefix it was built for.
mv "$tmp/prefix" "$tmp/moved"
cmake -S "$src/tests/cmake_consumer" -B "$tmp/cmake" -DCMAKE_PREFIX_PATH="$tmp/moved" \
    -DCMAKE_C_COMPILER="$cc" -DAPP_SOURCE="$tmp/app.c" >"$tmp/cmake.log" 2>&1 ||
    { cat "$tmp/cmake.log"; exit 1; }
cmake --build "$tmp/cmake" >>"$tmp/cmake.log" 2>&1 || { cat "$tmp/cmake.log"; exit 1; }
deps=$(ldd "$tmp/cmake/app_shared")
grep -q "$tmp/moved/.*libasyncrt.so" <<<"$deps" ||
    { echo "install test: the CMake program does not use the installed library: $deps" >&2; exit 1; }
"$tmp/cmake/app_shared"
"$tmp/cmake/app_static"
# A version the package does not satisfy is refused: 0.x minor releases
# change the API.
sed 's/find_package(asyncrt 0.1 REQUIRED)/find_package(asyncrt 0.99 REQUIRED)/' \
    "$src/tests/cmake_consumer/CMakeLists.txt" >"$tmp/newer.txt"
mkdir -p "$tmp/newer" && cp "$tmp/newer.txt" "$tmp/newer/CMakeLists.txt"
if cmake -S "$tmp/newer" -B "$tmp/cmake-newer" -DCMAKE_PREFIX_PATH="$tmp/moved" \
    -DAPP_SOURCE="$tmp/app.c" >"$tmp/cmake-newer.log" 2>&1; then
    echo "install test: find_package(asyncrt 0.99) accepted this version" >&2
    exit 1
fi
echo "install test passed (sanitizer: $sanitizer)"
