#!/bin/sh
# The library's layers depend one way (docs/design.md, "Layers"): a source
# file includes only headers of its own layer and of the layers below it.
# Together with -Werror=implicit-function-declaration, which makes every
# call go through a header, that keeps calls one-way too. This fails on any
# include that reaches up, or a header that is in no layer.
set -eu
src="${1:?usage: layers_test.sh SRC_DIR}"
layers="base task reactor scheduler diag toolkit fiber top"

rank() {
    i=0
    for l in $layers; do
        [ "$l" = "$1" ] && { echo $i; return; }
        i=$((i + 1))
    done
    echo "layers_test.sh: unknown layer $1" >&2
    exit 2
}

# The layer of a file: its folder under src/, or "top" for src/ itself.
layer_of() {
    d=$(dirname "${1#"$src"/}")
    [ "$d" = "." ] && echo top || echo "$d"
}

status=0
files=$(find "$src" -name '*.[ch]' | sort)
for f in $files; do
    own=$(rank "$(layer_of "$f")")
    for h in $(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$f"); do
        target=$(find "$src" -name "$h" | head -n 1)
        if [ -z "$target" ]; then
            echo "$f: includes $h, which is in no layer" >&2
            status=1
            continue
        fi
        theirs=$(rank "$(layer_of "$target")")
        if [ "$theirs" -gt "$own" ]; then
            echo "$f ($(layer_of "$f")) includes $h ($(layer_of "$target")): a lower layer reaches up" >&2
            status=1
        fi
    done
done
[ "$status" -eq 0 ] && echo "layers: every include in $src points to the same layer or one below ($layers)"
exit $status
