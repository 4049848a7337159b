/* A process for the signal suite, started by it with SIGINT ignored (as a
 * background job of a non-interactive shell starts): it listens for SIGINT,
 * says `ready` on its standard output, and exits 0 once SIGINT arrived
 * within 10 s, with SIGINT ignored again after its listener is freed.
 * Exit status 3: SIGINT was not ignored at the start; 4: the action was
 * not put back; 1: no SIGINT came; 2: a call failed. */
#include <asyncrt.h>

#include <signal.h>
#include <stdio.h>

struct waiter {
    rt_coro co;
    rt_signal *sig;
    rt_signal_recv recv;
    rt_timeout limit;
};

static rt_poll waiter_poll(void *state, rt_context *cx, void **out)
{
    struct waiter *w = state;
    RT_CORO_BEGIN(&w->co);
    rt_signal_recv_init(&w->recv, w->sig);
    rt_timeout_init(&w->limit, NULL, &w->recv.future, RT_SEC(10));
    RT_AWAIT(&w->co, cx, &w->limit);
    RT_RETURN(&w->co, out, (intptr_t)w->limit.result);
    RT_CORO_END(&w->co, out);
}

int main(void)
{
    struct sigaction sa;
    if (sigaction(SIGINT, NULL, &sa) != 0 || sa.sa_handler != SIG_IGN)
        return 3;
    rt_config cfg;
    rt_config_init(&cfg);
    cfg.workers = 1;
    rt_runtime *rt;
    if (rt_runtime_new(&cfg, &rt) < 0)
        return 2;
    struct waiter w = {0};
    if (rt_signal_new(rt, SIGINT, &w.sig) < 0)
        return 2;
    printf("ready\n");
    fflush(stdout);
    void *result = NULL;
    int err = rt_block_on(rt, waiter_poll, rt_coro_drop, &w, sizeof w, &result, NULL);
    rt_signal_free(w.sig);
    rt_runtime_free(rt);
    if (err < 0)
        return 2;
    if (sigaction(SIGINT, NULL, &sa) != 0 || sa.sa_handler != SIG_IGN)
        return 4;
    return (intptr_t)result >= 1 ? 0 : 1;
}
