/* The counter behind fault.h's wrappers (fault-injection builds only). */
#include "fault.h"

#ifdef RT_FAULT_INJECTION

#include "atomic.h"

/* The plan is written by the test before the runtime it tests starts any
 * thread (pthread_create orders it before everything the threads do), so the
 * checks read it relaxed. Only `calls` and `failed` change while threads run:
 * each request takes its number with one fetch-and-add, and that number alone
 * decides its fate, so every number is used exactly once. */
static struct {
    uint64_t nth;           /* the first request to fail, counting from 1; 0: none */
    uint32_t persistent;    /* 1: every request from nth on fails; 0: only nth */
    uint32_t kinds;         /* bit k set: requests of kind k are counted */
    int err;                /* errno to fail with; 0: the kind's own */
    uint64_t calls;         /* requests counted since the last arm */
    uint64_t failed;        /* requests failed since the last arm */
    const char *first_site; /* where the first failed request was made */
} plan = {.kinds = ~0u};

static const int natural_errno[RT__FAULT_KINDS] = {
    [RT__FAULT_ALLOC] = ENOMEM, [RT__FAULT_MMAP] = ENOMEM, [RT__FAULT_THREAD] = EAGAIN,
    [RT__FAULT_SYNC] = ENOMEM,  [RT__FAULT_FD] = EMFILE,   [RT__FAULT_EPOLL] = ENOMEM,
};

int rt__fault_check(rt__fault_kind kind, const char *site)
{
    if (!(rt__load_relaxed_u32(&plan.kinds) & (1u << kind)))
        return 0;
    uint64_t n = rt__faa_u64(&plan.calls, 1) + 1;
    uint64_t nth = rt__load_relaxed_u64(&plan.nth);
    if (nth == 0 || n < nth || (n > nth && !rt__load_relaxed_u32(&plan.persistent)))
        return 0;
    if (rt__faa_u64(&plan.failed, 1) == 0)
        rt__store_relaxed_ptr((void **)&plan.first_site, (void *)site);
    return plan.err != 0 ? plan.err : natural_errno[kind];
}

void rt__fault_arm(uint64_t nth, bool persistent, uint32_t kinds, int err)
{
    plan.nth = nth;
    plan.persistent = persistent;
    plan.kinds = kinds != 0 ? kinds : ~0u;
    plan.err = err;
    rt__store_relaxed_u64(&plan.calls, 0);
    rt__store_relaxed_u64(&plan.failed, 0);
    plan.first_site = NULL;
}

uint64_t rt__fault_calls(void)
{
    return rt__load_relaxed_u64(&plan.calls);
}

uint64_t rt__fault_failed(void)
{
    return rt__load_relaxed_u64(&plan.failed);
}

const char *rt__fault_first_site(void)
{
    return rt__load_relaxed_ptr((void *const *)&plan.first_site);
}

#endif
