#!/bin/sh
# Every C file in the tree is formatted as .clang-format says: this fails on
# the first file clang-format would change and prints what it would change.
# Fix a failure with: clang-format -i FILE
set -eu
root="${1:?usage: format_test.sh SOURCE_ROOT CLANG_FORMAT}"
clang_format="${2:?usage: format_test.sh SOURCE_ROOT CLANG_FORMAT}"
cd "$root"
files=$(find include src tests bench examples -name '*.[ch]' | sort)
count=$(echo "$files" | wc -l)
# shellcheck disable=SC2086
"$clang_format" --style=file --dry-run --Werror $files
echo "format: $count files as .clang-format says"
