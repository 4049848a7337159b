/* Test-program support for a sanitizer=thread build; linked into the test
 * programs of that build only.
 *
 * 1. Criterion under ThreadSanitizer. Criterion's sandboxing library
 * (BoxFort) maps an "inheritable arena" at a random fixed address
 * 0x200000000000 + (rand_r() & 0x3fffff) * 16 MiB and maps it again at the
 * same address in every test process. Under TSan almost all of that range is
 * shadow memory or a protected gap, and TSan's mmap interceptor refuses
 * MAP_FIXED outside application memory, so after ten random tries Criterion
 * gives up with "Could not initialize inheritable arena: Resource temporarily
 * unavailable" (Criterion issue #274) or crashes. The only application memory
 * in that range is where position-independent executables are loaded,
 * 0x550000000000 to 0x568000000000. This rand_r interposes glibc's (the
 * program's definition wins for the call from libcriterion) and only ever
 * yields offsets inside that range. Nothing in the suites or in asyncrt calls
 * rand_r.
 *
 * 2. Verdicts. A TSan report at exit does not change a Criterion verdict, so
 * a race would pass unnoticed; halting on the first report aborts the test
 * process and Criterion counts the test as failed. TSAN_OPTIONS from the
 * environment still override this default. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdint.h>
#include <stdlib.h>

int rand_r(unsigned int *seed)
{
    const uint64_t arena_base = 0x200000000000ull;
    const uint64_t step_shift = 24; /* BoxFort steps in 16 MiB */
    const uint64_t first = (0x550000000000ull - arena_base) >> step_shift;
    const uint64_t span = (0x568000000000ull - 0x550000000000ull) >> step_shift;
    *seed = *seed * 1103515245u + 12345u;
    return (int)(first + (*seed >> 8) % span);
}

const char *__tsan_default_options(void);

const char *__tsan_default_options(void)
{
    return "halt_on_error=1";
}
