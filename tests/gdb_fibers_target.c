/* The program tests/gdb_test.sh looks at with scripts/gdb/asyncrt.py: three
 * fibers waiting in gdb_target_leaf (two through gdb_target_middle), then a
 * SIGTRAP with every fiber waiting, so that gdb stops there. Run outside
 * gdb, the trap would end it; it is only ever run under gdb. */
#define _GNU_SOURCE
#include <asyncrt.h>

#include <sched.h>
#include <signal.h>
#include <stdio.h>

rt_runtime *gdb_target_runtime; /* what the test asks gdb to list */

__attribute__((noinline)) void gdb_target_leaf(rt_chan *ch)
{
    void *v;
    rt_chan_recv_await(ch, &v); /* gdb_test.sh: the await */
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void gdb_target_middle(rt_chan *ch)
{
    gdb_target_leaf(ch);
    __asm__ volatile("" ::: "memory");
}

static void *two_deep(void *arg)
{
    gdb_target_middle(arg);
    return NULL;
}

static void *one_deep(void *arg)
{
    gdb_target_leaf(arg);
    return NULL;
}

static int count_waiting(const rt_task_info *info, void *arg)
{
    if (info->state == RT_TASK_WAITING && info->wait.kind == RT_WAIT_RECV)
        ++*(int *)arg;
    return 0;
}

int main(void)
{
    rt_runtime *rt;
    rt_chan *ch;
    if (rt_runtime_new(NULL, &rt) < 0 || rt_chan_new(1, &ch) < 0)
        return 1;
    rt_task *t[3];
    rt_fiber_spawn(rt, two_deep, ch, &t[0]);
    rt_fiber_spawn(rt, two_deep, ch, &t[1]);
    rt_fiber_spawn(rt, one_deep, ch, &t[2]);
    for (int waiting = 0; waiting < 3;) {
        waiting = 0;
        if (rt_runtime_tasks(rt, count_waiting, &waiting) < 0)
            return 1;
        sched_yield();
    }
    gdb_target_runtime = rt;
    raise(SIGTRAP);
    rt_chan_sender_drop(ch);
    for (int i = 0; i < 3; i++) {
        void *value;
        int status;
        rt_task_wait(t[i], -1, &value, &status);
    }
    rt_chan_receiver_drop(ch, NULL, NULL);
    rt_runtime_free(rt);
    puts("done");
    return 0;
}
