/* The thread-local cooperative budget (budget.h) and rt_coop_proceed. */
#include "budget.h"

#include "common.h"

__thread rt__budget rt__tls_budget __attribute__((tls_model("initial-exec")));

RT_EXPORT bool rt_coop_proceed(rt_context *cx)
{
    if (rt__unlikely(cx == NULL))
        return true; /* nothing to wake: no budget is spent */
    return rt__coop_proceed(cx);
}
