/* What the fuzz targets share. Each target copies the pieces it hands to a
 * parser into buffers of exactly their size, so that AddressSanitizer stops a
 * read one byte past a piece even when libFuzzer's input goes on. */
#ifndef RT_FUZZ_COMMON_H
#define RT_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A copy of len bytes in a buffer of exactly len bytes (1 when len is 0, so
 * that malloc never returns NULL for a valid request). */
static inline char *fuzz_copy(const uint8_t *data, size_t len)
{
    char *copy = malloc(len != 0 ? len : 1);
    if (copy == NULL)
        abort();
    if (len != 0)
        memcpy(copy, data, len);
    return copy;
}

/* A NUL-terminated copy, for parsers that take C strings. */
static inline char *fuzz_string(const uint8_t *data, size_t len)
{
    char *copy = malloc(len + 1);
    if (copy == NULL)
        abort();
    if (len != 0)
        memcpy(copy, data, len);
    copy[len] = '\0';
    return copy;
}

/* A failed property: libFuzzer saves the input that led here. */
#define FUZZ_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: property failed: %s\n", __FILE__, __LINE__, #cond);            \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#endif
