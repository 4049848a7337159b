/* The magazine layer's slow paths and the depot; see block_cache.h. */
#include "block_cache.h"

#include "atomic.h"

#include <stdbool.h>
#include <stdlib.h>

/* A full magazine in the depot: its first block carries the link to the next
 * magazine in its second word (the first word links the magazine's blocks). */
static inline void **depot_link(void *first_block)
{
    return (void **)first_block + 1;
}

static void free_chain(void *b)
{
    while (b != NULL) {
        void *next = *(void **)b;
        free(b);
        b = next;
    }
}

int rt__depot_init(rt__depot *d)
{
    d->magazines = NULL;
    d->count = 0;
    return -pthread_mutex_init(&d->lock, NULL);
}

void rt__depot_destroy(rt__depot *d)
{
    while (d->magazines != NULL) {
        void *m = d->magazines;
        d->magazines = *depot_link(m);
        free_chain(m);
    }
    rt__store_relaxed_u32(&d->count, 0);
    pthread_mutex_destroy(&d->lock);
}

void rt__depot_trim(rt__depot *d, uint32_t keep)
{
    if (pthread_mutex_trylock(&d->lock) != 0)
        return;
    void *excess = NULL;
    while (d->count > keep) {
        void *m = d->magazines;
        d->magazines = *depot_link(m);
        rt__store_relaxed_u32(&d->count, d->count - 1);
        *depot_link(m) = excess;
        excess = m;
    }
    pthread_mutex_unlock(&d->lock);
    /* free() outside the lock. */
    while (excess != NULL) {
        void *next = *depot_link(excess);
        free_chain(excess);
        excess = next;
    }
}

/* Gives a full magazine to the depot, or frees it when the depot is full. */
static void depot_put(rt__depot *d, rt__magazine *m)
{
    pthread_mutex_lock(&d->lock);
    if (d->count < RT__DEPOT_MAX) {
        *depot_link(m->head) = d->magazines;
        d->magazines = m->head;
        rt__store_relaxed_u32(&d->count, d->count + 1);
        pthread_mutex_unlock(&d->lock);
    } else {
        pthread_mutex_unlock(&d->lock);
        free_chain(m->head);
    }
    m->head = NULL;
    m->len = 0;
}

/* Takes a full magazine from the depot into `m` (empty). */
static bool depot_get(rt__depot *d, rt__magazine *m)
{
    /* A hint read without the lock (relaxed: it orders nothing); the lock
     * below decides. */
    if (rt__load_relaxed_u32(&d->count) == 0)
        return false;
    pthread_mutex_lock(&d->lock);
    void *first = d->magazines;
    if (first != NULL) {
        d->magazines = *depot_link(first);
        rt__store_relaxed_u32(&d->count, d->count - 1);
    }
    pthread_mutex_unlock(&d->lock);
    if (first == NULL)
        return false;
    m->head = first;
    m->len = RT__MAGAZINE_SIZE;
    return true;
}

void rt__block_cache_init(rt__block_cache *c, rt__depot *depot)
{
    c->loaded.head = c->spare.head = NULL;
    c->loaded.len = c->spare.len = 0;
    c->depot = depot;
}

void rt__block_cache_clear(rt__block_cache *c)
{
    free_chain(c->loaded.head);
    free_chain(c->spare.head);
    c->loaded.head = c->spare.head = NULL;
    c->loaded.len = c->spare.len = 0;
}

void *rt__block_cache_refill_and_pop(rt__block_cache *c)
{
    /* The loaded magazine is empty: use the spare if it has blocks, else a
     * full one from the depot (the empty one stays as the spare). */
    if (c->spare.len > 0) {
        rt__magazine t = c->loaded;
        c->loaded = c->spare;
        c->spare = t;
    } else if (!depot_get(c->depot, &c->loaded)) {
        return NULL;
    }
    return rt__block_cache_pop(c);
}

void rt__block_cache_rotate_and_push(rt__block_cache *c, void *b)
{
    /* The loaded magazine is full: if the spare is full too, it goes to the
     * depot; then the loaded one becomes the spare and an empty one is loaded. */
    if (c->spare.len == RT__MAGAZINE_SIZE)
        depot_put(c->depot, &c->spare);
    rt__magazine t = c->spare;
    c->spare = c->loaded;
    c->loaded = t;
    rt__block_cache_push(c, b);
}
