/* The magazine layer's slow paths; see block_cache.h. */
#include "block_cache.h"

#include <stddef.h>

void rt__block_cache_init(rt__block_cache *c)
{
    c->loaded.head = c->spare.head = NULL;
    c->loaded.len = c->spare.len = 0;
}

static void give_back(rt__magazine *m)
{
    if (m->head != NULL)
        rt__block_pool_give(m->head);
    m->head = NULL;
    m->len = 0;
}

void rt__block_cache_clear(rt__block_cache *c)
{
    give_back(&c->loaded);
    give_back(&c->spare);
}

void *rt__block_cache_refill_and_pop(rt__block_cache *c)
{
    /* The loaded magazine is empty: use the spare if it has blocks, else a
     * full one from the pool (the empty one stays as the spare). */
    if (c->spare.len > 0) {
        rt__magazine t = c->loaded;
        c->loaded = c->spare;
        c->spare = t;
    } else if ((c->loaded.len = rt__block_pool_take(&c->loaded.head, RT__MAGAZINE_SIZE)) == 0) {
        return NULL;
    }
    return rt__block_cache_pop(c);
}

void rt__block_cache_rotate_and_push(rt__block_cache *c, void *b)
{
    /* The loaded magazine is full: if the spare is full too, it goes back
     * to the pool; then the loaded one becomes the spare and an empty one
     * is loaded. */
    if (c->spare.len == RT__MAGAZINE_SIZE)
        give_back(&c->spare);
    rt__magazine t = c->spare;
    c->spare = c->loaded;
    c->loaded = t;
    rt__block_cache_push(c, b);
}
