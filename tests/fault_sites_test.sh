#!/usr/bin/env bash
# Every resource request of the library goes through src/base/fault.h, so that the
# fault-injection test can fail it. This fails when a source file in src/
# calls one of the wrapped functions directly (comments are ignored).
set -euo pipefail
src="${1:?usage: fault_sites_test.sh SRC_DIR}"
calls='malloc|calloc|realloc|aligned_alloc|posix_memalign|strdup|mmap|pthread_create|pthread_mutex_init|pthread_cond_init|epoll_create1?|eventfd|timerfd_create|signalfd|socket|socketpair|accept4?|pipe2?|dup[23]?|open|openat|epoll_ctl'
status=0
for f in $(find "$src" -name '*.[ch]' | sort); do
    [ "$(basename "$f")" = fault.h ] && continue
    # Drop block and line comments, then look for a call not preceded by an
    # identifier character (rt__malloc, ->open and .socket are fine).
    hits=$(sed -e 's://.*$::' "$f" | awk '
        { line = $0
          while (1) {
              if (in_comment) {
                  e = index(line, "*/"); if (e == 0) { line = ""; break }
                  line = substr(line, e + 2); in_comment = 0
              }
              s = index(line, "/*"); if (s == 0) break
              out = out substr(line, 1, s - 1); line = substr(line, s + 2); in_comment = 1
          }
          print NR ": " out line; out = "" }' |
        grep -E "(^|[^A-Za-z0-9_.>])($calls)\(" |
        grep -vE "epoll_ctl\([^,]*, *EPOLL_CTL_(DEL|MOD)" || true)
    if [ -n "$hits" ]; then
        echo "$f: resource request outside src/base/fault.h's wrappers:" >&2
        echo "$hits" >&2
        status=1
    fi
done
[ "$status" -eq 0 ] && echo "fault sites: every resource request in $src goes through src/base/fault.h"
exit "$status"
