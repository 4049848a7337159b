/* The diagnostics' hook table and the trace flag; see diag_hooks.h. */
#include "diag_hooks.h"

#include <stddef.h>

#include "atomic.h"

uint32_t rt__trace_active;

static const rt__diag_hooks *installed;

void rt__diag_hooks_install(const rt__diag_hooks *hooks)
{
    /* Release: pairs with rt__diag_hooks_get's acquire. Two runtimes made
     * at once store the same pointer. */
    rt__store_release_ptr((void **)&installed, (void *)hooks);
}

const rt__diag_hooks *rt__diag_hooks_get(void)
{
    return rt__load_acquire_ptr((void *const *)&installed);
}

void rt__trace_event(uint32_t type, uint64_t task, int worker, uint64_t arg)
{
    /* The flag was raised by the recorder, which exists only where the
     * table was installed; a build without diagnostics never gets here. */
    const rt__diag_hooks *h = rt__diag_hooks_get();
    if (h != NULL)
        h->trace_record(type, task, worker, arg);
}
