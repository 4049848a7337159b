/* The magazine layer's slow paths; see block_cache.h. */
#include "block_cache.h"

__thread rt__block_cache *rt__tls_block_cache __attribute__((tls_model("initial-exec")));

void rt__block_cache_set_current(rt__block_cache *c)
{
    rt__tls_block_cache = c;
}

void rt__block_cache_init(rt__block_cache *c)
{
    c->mags[0].count = c->mags[1].count = 0;
    c->loaded = &c->mags[0];
    c->spare = &c->mags[1];
}

static void give_back(rt__magazine *m)
{
    if (m->count > 0)
        rt__block_pool_give(m->rounds, m->count);
    m->count = 0;
}

void rt__block_cache_clear(rt__block_cache *c)
{
    /* A zeroed cache was never initialised (rt_runtime_new failed before
     * reaching it) and holds nothing. */
    if (c->loaded == NULL)
        return;
    give_back(c->loaded);
    give_back(c->spare);
}

static void swap(rt__block_cache *c)
{
    rt__magazine *t = c->loaded;
    c->loaded = c->spare;
    c->spare = t;
}

void *rt__block_cache_refill_and_pop(rt__block_cache *c)
{
    /* The loaded magazine is empty: use the spare if it has blocks, else
     * fill the empty one from the pool. */
    if (c->spare->count > 0)
        swap(c);
    else if ((c->loaded->count = rt__block_pool_take(c->loaded->rounds, RT__MAGAZINE_SIZE)) == 0)
        return NULL;
    return rt__block_cache_pop(c);
}

void rt__block_cache_rotate_and_push(rt__block_cache *c, void *b)
{
    /* The loaded magazine is full: if the spare is full too, its blocks go
     * back to the pool; then the two swap, and the empty one takes `b`. */
    if (c->spare->count == RT__MAGAZINE_SIZE)
        give_back(c->spare);
    swap(c);
    rt__block_cache_push(c, b);
}
