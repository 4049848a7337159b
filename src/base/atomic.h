/* The atomics layer every lock-free protocol in asyncrt is written against.
 *
 * In a normal build each operation is a Concurrency Kit `ck_pr` access plus the
 * CK fence that gives it the ordering its name promises. On x86 (CK_MD_TSO) the
 * acquire and release fences are compiler barriers only and every RMW is a
 * locked instruction, so the layer costs nothing beyond the access itself; the
 * one real fence is rt__fence_store_load(), an mfence.
 *
 * ThreadSanitizer models neither ck_pr's volatile/asm accesses nor standalone
 * fences. In a sanitizer=thread build (RT_TSAN) every operation therefore
 * compiles to an __atomic builtin carrying its own memory order, so that every
 * happens-before edge the code relies on is an acquire/release pair TSan can
 * see. The StoreLoad fences (rt__fence_store_load, rt__fence_thief) are still
 * emitted in that build: TSan ignores them, but they are what makes the
 * Dekker-style hand-offs (the deque's take, the idle coordinator) correct on
 * the hardware, and they carry no happens-before edge TSan would need. The
 * deque's take and steal also use `_seq_cst` accesses on both sides, which is
 * sound without the fences under the C11 model.
 *
 * Hand-offs through liburcu's queues are invisible to TSan in every build;
 * rt__tsan_release()/rt__tsan_acquire() mark them.
 *
 * An AddressSanitizer build (RT_ASAN) uses the __atomic builtins too: ASan
 * does not see inside ck_pr's asm, so an atomic access to freed memory (a
 * reference count released once too often, a task word of a freed task)
 * would go unreported.
 *
 * This header is internal and not installed. */
#ifndef RT_SRC_ATOMIC_H
#define RT_SRC_ATOMIC_H

#include <stdbool.h>
#include <stdint.h>

/* The accesses are __atomic builtins, which the sanitizers see. */
#if defined(RT_TSAN) || defined(RT_ASAN)
#define RT__ATOMIC_BUILTINS 1
#endif

#ifndef RT__ATOMIC_BUILTINS
#include <ck_pr.h>
#endif

#ifdef RT_DEBUG_YIELD
#include <sched.h>
/* Widens race windows in debug builds: placed between the steps of a protocol. */
#define RT__DEBUG_YIELD() sched_yield()
/* A named window that a white-box test may stretch far beyond a yield, by
 * setting rt__debug_window_hook (debug-yield builds only; NULL otherwise):
 * for races against a whole shutdown, which one yield never spans. */
extern void (*volatile rt__debug_window_hook)(const char *window);
#define RT__DEBUG_WINDOW(name)                                                                     \
    do {                                                                                           \
        sched_yield();                                                                             \
        void (*hook_)(const char *) = rt__debug_window_hook;                                       \
        if (hook_ != NULL)                                                                         \
            hook_(name);                                                                           \
    } while (0)
#else
#define RT__DEBUG_YIELD() ((void)0)
#define RT__DEBUG_WINDOW(name) ((void)0)
#endif

#ifdef RT__ATOMIC_BUILTINS
#ifdef RT_TSAN
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#define rt__tsan_acquire(p) __tsan_acquire((void *)(p))
#define rt__tsan_release(p) __tsan_release((void *)(p))
#else
#define rt__tsan_acquire(p) ((void)(p))
#define rt__tsan_release(p) ((void)(p))
#endif

static inline uint64_t rt__load_relaxed_u64(const uint64_t *p)
{
    return __atomic_load_n(p, __ATOMIC_RELAXED);
}
static inline uint64_t rt__load_acquire_u64(const uint64_t *p)
{
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
static inline uint64_t rt__load_seq_cst_u64(const uint64_t *p)
{
    return __atomic_load_n(p, __ATOMIC_SEQ_CST);
}
static inline void rt__store_relaxed_u64(uint64_t *p, uint64_t v)
{
    __atomic_store_n(p, v, __ATOMIC_RELAXED);
}
static inline void rt__store_release_u64(uint64_t *p, uint64_t v)
{
    __atomic_store_n(p, v, __ATOMIC_RELEASE);
}
static inline void rt__store_seq_cst_u64(uint64_t *p, uint64_t v)
{
    __atomic_store_n(p, v, __ATOMIC_SEQ_CST);
}
static inline bool rt__cas_u64(uint64_t *p, uint64_t *expected, uint64_t desired)
{
    return __atomic_compare_exchange_n(p, expected, desired, false, __ATOMIC_SEQ_CST,
                                       __ATOMIC_SEQ_CST);
}
static inline uint64_t rt__faa_u64(uint64_t *p, uint64_t delta)
{
    return __atomic_fetch_add(p, delta, __ATOMIC_SEQ_CST);
}
static inline void rt__fao_u64(uint64_t *p, uint64_t bits)
{
    __atomic_fetch_or(p, bits, __ATOMIC_SEQ_CST);
}
static inline uint32_t rt__load_relaxed_u32(const uint32_t *p)
{
    return __atomic_load_n(p, __ATOMIC_RELAXED);
}
static inline void rt__store_relaxed_u32(uint32_t *p, uint32_t v)
{
    __atomic_store_n(p, v, __ATOMIC_RELAXED);
}
static inline uint32_t rt__load_acquire_u32(const uint32_t *p)
{
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
static inline uint32_t rt__load_seq_cst_u32(const uint32_t *p)
{
    return __atomic_load_n(p, __ATOMIC_SEQ_CST);
}
static inline void rt__store_release_u32(uint32_t *p, uint32_t v)
{
    __atomic_store_n(p, v, __ATOMIC_RELEASE);
}
static inline void rt__store_seq_cst_u32(uint32_t *p, uint32_t v)
{
    __atomic_store_n(p, v, __ATOMIC_SEQ_CST);
}
static inline uint32_t rt__fas_u32(uint32_t *p, uint32_t v)
{
    return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST);
}
static inline bool rt__cas_u32(uint32_t *p, uint32_t *expected, uint32_t desired)
{
    return __atomic_compare_exchange_n(p, expected, desired, false, __ATOMIC_SEQ_CST,
                                       __ATOMIC_SEQ_CST);
}
static inline uint32_t rt__faa_u32(uint32_t *p, uint32_t delta)
{
    return __atomic_fetch_add(p, delta, __ATOMIC_SEQ_CST);
}
static inline void *rt__load_relaxed_ptr(void *const *p)
{
    return __atomic_load_n(p, __ATOMIC_RELAXED);
}
static inline void *rt__load_acquire_ptr(void *const *p)
{
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
static inline void rt__store_relaxed_ptr(void **p, void *v)
{
    __atomic_store_n(p, v, __ATOMIC_RELAXED);
}
static inline void rt__store_release_ptr(void **p, void *v)
{
    __atomic_store_n(p, v, __ATOMIC_RELEASE);
}
/* Real fences (see the top of this file): TSan ignores them, the CPU does not. */
static inline void rt__fence_store_load(void)
{
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
/* Orders a thief's two loads in the deque; see deque.c. */
static inline void rt__fence_thief(void)
{
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

#else /* Concurrency Kit build */

#define rt__tsan_acquire(p) ((void)(p))
#define rt__tsan_release(p) ((void)(p))

static inline uint64_t rt__load_relaxed_u64(const uint64_t *p)
{
    return ck_pr_load_64(p);
}
static inline uint64_t rt__load_acquire_u64(const uint64_t *p)
{
    uint64_t v = ck_pr_load_64(p);
    ck_pr_fence_acquire();
    return v;
}
/* A load that follows rt__store_seq_cst_u64() or an RMW on the other side of a
 * Dekker pattern: the StoreLoad barrier is in the store, so this is acquire. */
static inline uint64_t rt__load_seq_cst_u64(const uint64_t *p)
{
    return rt__load_acquire_u64(p);
}
static inline void rt__store_relaxed_u64(uint64_t *p, uint64_t v)
{
    ck_pr_store_64(p, v);
}
static inline void rt__store_release_u64(uint64_t *p, uint64_t v)
{
    ck_pr_fence_release();
    ck_pr_store_64(p, v);
}
/* Release store followed by a StoreLoad fence: later loads cannot be satisfied
 * before this store is visible to every thread. */
static inline void rt__store_seq_cst_u64(uint64_t *p, uint64_t v)
{
    ck_pr_fence_release();
    ck_pr_store_64(p, v);
    ck_pr_fence_store_load();
}
/* Every RMW is a full barrier: the surrounding fences are no-ops on TSO (x86's
 * locked instructions already are) and real barriers on weaker machines. */
static inline bool rt__cas_u64(uint64_t *p, uint64_t *expected, uint64_t desired)
{
    ck_pr_fence_store_atomic();
    ck_pr_fence_load_atomic();
    bool ok = ck_pr_cas_64_value(p, *expected, desired, expected);
    ck_pr_fence_atomic_load();
    ck_pr_fence_atomic_store();
    return ok;
}
static inline uint64_t rt__faa_u64(uint64_t *p, uint64_t delta)
{
    ck_pr_fence_store_atomic();
    ck_pr_fence_load_atomic();
    uint64_t old = ck_pr_faa_64(p, delta);
    ck_pr_fence_atomic_load();
    ck_pr_fence_atomic_store();
    return old;
}
static inline void rt__fao_u64(uint64_t *p, uint64_t bits)
{
    ck_pr_fence_store_atomic();
    ck_pr_fence_load_atomic();
    ck_pr_or_64(p, bits);
    ck_pr_fence_atomic_load();
    ck_pr_fence_atomic_store();
}
static inline uint32_t rt__load_relaxed_u32(const uint32_t *p)
{
    return ck_pr_load_32(p);
}
static inline void rt__store_relaxed_u32(uint32_t *p, uint32_t v)
{
    ck_pr_store_32(p, v);
}
static inline uint32_t rt__load_acquire_u32(const uint32_t *p)
{
    uint32_t v = ck_pr_load_32(p);
    ck_pr_fence_acquire();
    return v;
}
static inline uint32_t rt__load_seq_cst_u32(const uint32_t *p)
{
    return rt__load_acquire_u32(p);
}
static inline void rt__store_release_u32(uint32_t *p, uint32_t v)
{
    ck_pr_fence_release();
    ck_pr_store_32(p, v);
}
/* Release store followed by a StoreLoad fence, as rt__store_seq_cst_u64. */
static inline void rt__store_seq_cst_u32(uint32_t *p, uint32_t v)
{
    ck_pr_fence_release();
    ck_pr_store_32(p, v);
    ck_pr_fence_store_load();
}
static inline uint32_t rt__fas_u32(uint32_t *p, uint32_t v)
{
    ck_pr_fence_store_atomic();
    ck_pr_fence_load_atomic();
    uint32_t old = ck_pr_fas_32(p, v);
    ck_pr_fence_atomic_load();
    ck_pr_fence_atomic_store();
    return old;
}
static inline bool rt__cas_u32(uint32_t *p, uint32_t *expected, uint32_t desired)
{
    ck_pr_fence_store_atomic();
    ck_pr_fence_load_atomic();
    bool ok = ck_pr_cas_32_value(p, *expected, desired, expected);
    ck_pr_fence_atomic_load();
    ck_pr_fence_atomic_store();
    return ok;
}
static inline uint32_t rt__faa_u32(uint32_t *p, uint32_t delta)
{
    ck_pr_fence_store_atomic();
    ck_pr_fence_load_atomic();
    uint32_t old = ck_pr_faa_32(p, delta);
    ck_pr_fence_atomic_load();
    ck_pr_fence_atomic_store();
    return old;
}
static inline void *rt__load_relaxed_ptr(void *const *p)
{
    return ck_pr_load_ptr(p);
}
static inline void *rt__load_acquire_ptr(void *const *p)
{
    void *v = ck_pr_load_ptr(p);
    ck_pr_fence_acquire();
    return v;
}
static inline void rt__store_relaxed_ptr(void **p, void *v)
{
    ck_pr_store_ptr(p, v);
}
static inline void rt__store_release_ptr(void **p, void *v)
{
    ck_pr_fence_release();
    ck_pr_store_ptr(p, v);
}
static inline void rt__fence_store_load(void)
{
    ck_pr_fence_store_load();
}
/* The thief's fence between reading top and bottom (Lê et al., steal()). On
 * TSO loads are not reordered with loads and the owner's mfence in take()
 * is enough; elsewhere it must be a full fence that pairs with the owner's. */
static inline void rt__fence_thief(void)
{
#ifdef CK_MD_TSO
    ck_pr_fence_load();
#else
    ck_pr_fence_memory();
#endif
}
#endif /* RT__ATOMIC_BUILTINS */

/* Per-worker statistics: written by one thread, read by any. A relaxed load and
 * store, never an RMW, so counting costs no locked instruction. */
static inline void rt__stat_add(uint64_t *counter, uint64_t delta)
{
    rt__store_relaxed_u64(counter, rt__load_relaxed_u64(counter) + delta);
}

static inline void rt__cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield" ::: "memory");
#endif
}

#endif
