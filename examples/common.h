/* What the examples share that Go has built in and C does not: reading
 * flags and numbers from the command line (Go's flag and strconv), waiting
 * for a stop signal (Go's os/signal) and a map from strings to strings
 * (Go's map[string]string). Not part of the library; each function is
 * small enough to copy. */
#ifndef ASYNCRT_EXAMPLES_COMMON_H
#define ASYNCRT_EXAMPLES_COMMON_H

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- The command line ------------------------------------------------------- */

/* A number from 0 to max in `text`, or, when it is not one, the usage on
 * standard error and exit status 2. */
static inline unsigned long parse_number(const char *text, unsigned long max, const char *usage)
{
    char *end;
    errno = 0;
    unsigned long v = text != NULL ? strtoul(text, &end, 10) : 0;
    if (text == NULL || errno != 0 || end == text || *end != '\0' || text[0] == '-' || v > max) {
        fprintf(stderr, "bad number '%s'\nusage: %s\n", text != NULL ? text : "", usage);
        exit(2);
    }
    return v;
}

/* The value of the flag `name` ("--port 80") as a number from 0 to max,
 * def when the flag is absent. Every argument must be a flag of `names`
 * (a space-separated list, "--port --workers") followed by its value;
 * anything else prints the usage and exits with status 2. */
static inline unsigned long flag_number(int argc, char **argv, const char *names, const char *name,
                                        unsigned long def, unsigned long max, const char *usage)
{
    unsigned long v = def;
    for (int i = 1; i < argc; i += 2) {
        const char *found = strstr(names, argv[i]);
        size_t n = strlen(argv[i]);
        if (strncmp(argv[i], "--", 2) != 0 || found == NULL ||
            (found[n] != '\0' && found[n] != ' ') || i + 1 == argc) {
            fprintf(stderr, "bad argument '%s'\nusage: %s\n", argv[i], usage);
            exit(2);
        }
        if (strcmp(argv[i], name) == 0)
            v = parse_number(argv[i + 1], max, usage);
    }
    return v;
}

/* The i-th positional argument as a number from 0 to max, def when absent. */
static inline unsigned long arg_number(int argc, char **argv, int i, unsigned long def,
                                       unsigned long max, const char *usage)
{
    return i < argc ? parse_number(argv[i], max, usage) : def;
}

/* ---- Stop signals ----------------------------------------------------------- */

static inline sigset_t stop_signals(void)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    return set;
}

/* Blocks SIGINT and SIGTERM in the calling thread, and so in every thread
 * it creates afterwards, a runtime's included (call it before
 * rt_runtime_new): they then wait for wait_for_stop instead of ending the
 * process. A signal the process started with ignored (a background job's
 * SIGINT) would never arrive: their actions go back to the default. */
static inline void block_stop_signals(void)
{
    sigset_t set = stop_signals();
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
}

/* Waits for SIGINT or SIGTERM (blocked by block_stop_signals) and returns
 * which came. Blocks the calling thread: for main, never for a fiber. */
static inline int wait_for_stop(void)
{
    sigset_t set = stop_signals();
    int signo = 0;
    sigwait(&set, &signo);
    return signo;
}

/* ---- A map of strings ------------------------------------------------------ */

#define STRMAP_BUCKETS 1024

struct strmap_entry {
    struct strmap_entry *next;
    char *key, *value;
};

/* Zero-initialised, it is an empty map. */
struct strmap {
    struct strmap_entry *buckets[STRMAP_BUCKETS];
};

static inline struct strmap_entry **strmap_slot(struct strmap *m, const char *key)
{
    unsigned long h = 5381;
    for (const char *p = key; *p; p++)
        h = h * 33 + (unsigned char)*p;
    struct strmap_entry **e = &m->buckets[h % STRMAP_BUCKETS];
    while (*e != NULL && strcmp((*e)->key, key) != 0)
        e = &(*e)->next;
    return e;
}

/* The value of key, or NULL. */
static inline const char *strmap_get(struct strmap *m, const char *key)
{
    struct strmap_entry *e = *strmap_slot(m, key);
    return e != NULL ? e->value : NULL;
}

/* Sets key to a copy of value: false when out of memory (nothing changed). */
static inline bool strmap_set(struct strmap *m, const char *key, const char *value)
{
    struct strmap_entry **slot = strmap_slot(m, key);
    char *copy = strdup(value);
    if (copy == NULL)
        return false;
    if (*slot == NULL) {
        struct strmap_entry *e = calloc(1, sizeof *e);
        if (e == NULL || (e->key = strdup(key)) == NULL) {
            free(e);
            free(copy);
            return false;
        }
        *slot = e;
    }
    free((*slot)->value);
    (*slot)->value = copy;
    return true;
}

/* Removes key: whether it was there. */
static inline bool strmap_del(struct strmap *m, const char *key)
{
    struct strmap_entry **slot = strmap_slot(m, key), *e = *slot;
    if (e == NULL)
        return false;
    *slot = e->next;
    free(e->key);
    free(e->value);
    free(e);
    return true;
}

/* Frees every entry; the map is empty again. */
static inline void strmap_clear(struct strmap *m)
{
    for (size_t i = 0; i < STRMAP_BUCKETS; i++)
        while (m->buckets[i] != NULL)
            strmap_del(m, m->buckets[i]->key);
}

#endif
