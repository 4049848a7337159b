#!/usr/bin/env bash
# Every atomic access in src/ goes through src/base/atomic.h, which compiles to
# Concurrency Kit or, under ThreadSanitizer, to __atomic builtins with the
# order each access needs: a raw builtin elsewhere would escape both.
set -euo pipefail
src="${1:?usage: atomics_test.sh SRC_DIR}"
hits=$(grep -rnE --include='*.[ch]' '__atomic_|__sync_' "$src" | grep -v "^$src/base/atomic.h:" || true)
if [ -n "$hits" ]; then
    echo "atomic builtins outside src/base/atomic.h:" >&2
    echo "$hits" >&2
    exit 1
fi
echo "atomics: every atomic access in $src goes through src/base/atomic.h"
