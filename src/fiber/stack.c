/* Fiber stacks (stack.h). */
#include "stack.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "atomic.h"
#include "common.h"
#include "fault.h"

#ifdef RT_HAVE_VALGRIND
/* Valgrind takes a large jump of the stack pointer for a switch of stacks
 * only when it knows the stacks: unregistered, it warns ("client switching
 * stacks?") and may take fiber frames for invalid memory. The macros are a
 * few instructions that do nothing outside Valgrind. */
#include <valgrind/valgrind.h>
#define RT__STACK_REGISTER(s)                                                                      \
    ((s)->valgrind_id = VALGRIND_STACK_REGISTER((s)->low, (s)->low + (s)->size))
#define RT__STACK_DEREGISTER(s) VALGRIND_STACK_DEREGISTER((s)->valgrind_id)
#else
#define RT__STACK_REGISTER(s) ((void)(s))
#define RT__STACK_DEREGISTER(s) ((void)(s))
#endif

/* Guarded stacks cost two mappings each (the stack and its guard), and a
 * process may have vm.max_map_count of them (65530 by default): the first
 * RT__GUARD_BUDGET stacks alive at once are guarded, the rest unguarded,
 * carved RT__CHUNK_STACKS at a time out of one mapping each. */
#define RT__GUARD_BUDGET 16384u
#define RT__CHUNK_STACKS 64u
/* Stacks kept for reuse; beyond that a guarded one is unmapped and a
 * chunked one has its pages given back (MADV_DONTNEED). */
#define RT__POOL_MAX 16384u

/* A pooled stack's link lives in its own highest bytes, in the page its
 * fiber's control block used: touching the lowest page instead would
 * commit a page the fiber may never have used. */
typedef struct pooled {
    struct pooled *next;
    rt__stack stack;
} pooled;

static inline pooled *pool_node(const rt__stack *s)
{
    return (pooled *)(void *)(s->low + s->size - sizeof(pooled));
}

/* Each thread keeps the last few stacks it released, of one size, for the
 * next fiber it starts (a fiber spawned by a worker usually starts and
 * ends there): no lock on the common path. The cache and the shared pool
 * trade half a cache at a time, under one lock, so that a thread that
 * starts many fibers and one that ends them (a fan-out) take the lock
 * once per RT__THREAD_CACHE / 2 stacks. What a thread holds when it exits
 * goes back to the shared pool. */
#define RT__THREAD_CACHE 32u
typedef struct thread_cache {
    unsigned len;
    rt__stack stacks[RT__THREAD_CACHE];
} thread_cache;
/* Allocated at the thread's first stack put; a pointer, so that the static
 * TLS block a program loading the library at run time must find room for
 * stays small. NULL also when the allocation failed: the thread then uses
 * the pool alone. */
static __thread thread_cache *tls_cache __attribute__((tls_model("initial-exec")));
static __thread bool tls_cache_tried __attribute__((tls_model("initial-exec")));
static pthread_key_t cache_key;
static pthread_once_t cache_key_once = PTHREAD_ONCE_INIT;

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pooled *pool_head;     /* under pool_lock */
static unsigned pool_len;     /* under pool_lock */
static unsigned guarded_live; /* under pool_lock: guarded stacks mapped */
/* The chunk being carved, under pool_lock. */
static unsigned char *chunk_next;
static unsigned chunk_left;
static size_t chunk_stack_size;

size_t rt__page_size(void)
{
    static size_t page;
    size_t p = rt__load_relaxed_u64((uint64_t *)&page);
    if (p == 0) {
        long v = sysconf(_SC_PAGESIZE);
        p = v > 0 ? (size_t)v : 4096;
        rt__store_relaxed_u64((uint64_t *)&page, p);
    }
    return p;
}

static void *map_stack(size_t bytes)
{
    void *m = rt__mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
#ifdef MADV_NOHUGEPAGE
    /* A lazily touched stack must not be backed by a 2 MiB page. */
    (void)madvise(m, bytes, MADV_NOHUGEPAGE);
#endif
    return m;
}

static int map_guarded(size_t size, rt__stack *out)
{
    size_t page = rt__page_size();
    unsigned char *m = map_stack(size + page);
    if (m == NULL)
        return -ENOMEM;
    if (mprotect(m, page, PROT_NONE) != 0) {
        munmap(m, size + page);
        return -ENOMEM;
    }
    *out = (rt__stack){m + page, size, true, false, 0};
    RT__STACK_REGISTER(out);
    return 0;
}

/* Under pool_lock. */
static int carve_chunked(size_t size, rt__stack *out)
{
    if (chunk_left == 0 || chunk_stack_size != size) {
        unsigned char *m = map_stack(size * RT__CHUNK_STACKS);
        if (m == NULL)
            return -ENOMEM;
        /* What was left of a chunk of another size is given up. */
        chunk_next = m;
        chunk_left = RT__CHUNK_STACKS;
        chunk_stack_size = size;
    }
    *out = (rt__stack){chunk_next, size, false, true, 0};
    RT__STACK_REGISTER(out); /* once: a chunked stack is never unmapped */
    chunk_next += size;
    chunk_left--;
    return 0;
}

static void pool_put(rt__stack *s);
static void pool_put_many(rt__stack *stacks, unsigned n);

/* A stack handed out: an unguarded one gets its canary (stack.h). */
static int handed_out(rt__stack *s)
{
    if (!s->guarded)
        *(uint64_t *)(void *)s->low = RT__STACK_CANARY;
    return 0;
}

static void cache_flush(void *arg)
{
    thread_cache *c = arg;
    while (c->len > 0)
        pool_put(&c->stacks[--c->len]);
    tls_cache = NULL;
    free(c);
}

static void cache_key_create(void)
{
    (void)pthread_key_create(&cache_key, cache_flush);
}

/* The calling thread's cache, which the key's destructor gives back to the
 * pool when the thread exits; NULL when it cannot have one. */
static thread_cache *cache_create(void)
{
    tls_cache_tried = true;
    pthread_once(&cache_key_once, cache_key_create);
    thread_cache *c = rt__calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    if (pthread_setspecific(cache_key, c) != 0) {
        free(c);
        return NULL;
    }
    tls_cache = c;
    return c;
}

static size_t round_size(size_t size)
{
    size_t page = rt__page_size();
    size = (size + page - 1) & ~(page - 1);
    return size < 2 * page ? 2 * page : size;
}

/* Under pool_lock: takes a pooled stack of `size` into *out, if any. */
static bool pool_take_locked(size_t size, rt__stack *out)
{
    for (pooled **p = &pool_head; *p != NULL; p = &(*p)->next) {
        if ((*p)->stack.size == size) {
            pooled *hit = *p;
            *p = hit->next;
            pool_len--;
            *out = hit->stack;
            return true;
        }
    }
    return false;
}

int rt__stack_get(size_t size, rt__stack *out)
{
    size = round_size(size);
    thread_cache *c = tls_cache;
    if (c != NULL && c->len > 0 && c->stacks[c->len - 1].size == size) {
        *out = c->stacks[--c->len];
        return handed_out(out);
    }
    pthread_mutex_lock(&pool_lock);
    if (pool_take_locked(size, out)) {
        /* Refill an empty cache while the lock is held. */
        if (c != NULL && c->len == 0)
            while (c->len < RT__THREAD_CACHE / 2 && pool_take_locked(size, &c->stacks[c->len]))
                c->len++;
        pthread_mutex_unlock(&pool_lock);
        return handed_out(out);
    }
    int err;
    if (guarded_live < RT__GUARD_BUDGET) {
        err = map_guarded(size, out);
        if (err == 0)
            guarded_live++;
    } else {
        err = carve_chunked(size, out);
    }
    pthread_mutex_unlock(&pool_lock);
    return err < 0 ? err : handed_out(out);
}

void rt__stack_put(rt__stack *s)
{
    if (s->low == NULL)
        return;
    thread_cache *c = tls_cache;
    if (rt__unlikely(c == NULL) && !tls_cache_tried)
        c = cache_create();
    if (c == NULL || (c->len > 0 && c->stacks[0].size != s->size)) {
        pool_put(s);
        return;
    }
    if (c->len == RT__THREAD_CACHE) {
        /* Full: the older half goes to the pool, the newer (warmer) half
         * stays. */
        unsigned half = RT__THREAD_CACHE / 2;
        pool_put_many(c->stacks, half);
        memmove(c->stacks, c->stacks + half, (c->len - half) * sizeof(c->stacks[0]));
        c->len -= half;
    }
    c->stacks[c->len++] = *s;
    s->low = NULL;
}

/* Under pool_lock: pools s, or says that it must be unmapped (false). */
static bool pool_put_locked(rt__stack *s)
{
    if (pool_len >= RT__POOL_MAX && !s->chunked) {
        guarded_live--;
        return false;
    }
    if (pool_len >= RT__POOL_MAX) {
        /* A chunked stack is never unmapped: its pages go back, but for
         * the top one, which holds the pool's link. */
        size_t page = rt__page_size();
        (void)madvise(s->low, s->size - page, MADV_DONTNEED);
    }
    pooled *node = pool_node(s);
    node->stack = *s;
    node->next = pool_head;
    pool_head = node;
    pool_len++;
    return true;
}

static void unmap_guarded(rt__stack *s)
{
    size_t page = rt__page_size();
    RT__STACK_DEREGISTER(s);
    munmap(s->low - page, s->size + page);
}

static void pool_put(rt__stack *s)
{
    pthread_mutex_lock(&pool_lock);
    bool pooled_it = pool_put_locked(s);
    pthread_mutex_unlock(&pool_lock);
    if (!pooled_it)
        unmap_guarded(s);
    s->low = NULL;
}

/* pool_put of n stacks under one lock. */
static void pool_put_many(rt__stack *stacks, unsigned n)
{
    bool unmap[RT__THREAD_CACHE];
    pthread_mutex_lock(&pool_lock);
    for (unsigned i = 0; i < n; i++)
        unmap[i] = !pool_put_locked(&stacks[i]);
    pthread_mutex_unlock(&pool_lock);
    for (unsigned i = 0; i < n; i++)
        if (unmap[i])
            unmap_guarded(&stacks[i]);
}

bool rt__stack_guard_holds(const rt__stack *s, const void *addr)
{
    if (!s->guarded || s->low == NULL)
        return false;
    const unsigned char *a = addr;
    return a < s->low && a >= s->low - rt__page_size();
}
