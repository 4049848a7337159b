/* What the group suites (test_group_collect.c, test_group_cancel.c) share:
 * group operations polled by hand on the test thread, results that own
 * memory and the dispose function that frees them, the children (values,
 * boxes, gated or never finishing) with their global counters, and id
 * look-ups. support_group.c has the functions. */
#ifndef RT_TESTS_SUPPORT_GROUP_H
#define RT_TESTS_SUPPORT_GROUP_H

#include "support.h"

/* The test thread polls group operations by hand with the event waker
 * (support.h) of hand_woken. */
extern struct event hand_woken;
rt_context hand_context(void);

/* rt_group_next polled by hand on the test thread until ready, limited to
 * timeout_ns by an rt_timeout on rt when timeout_ns >= 0 (rt may be NULL
 * when there is no limit). Returns the result: the next's, or -ETIMEDOUT;
 * *res receives the child collected when it is 0. */
int hand_next(rt_runtime *rt, rt_group *g, int64_t timeout_ns, rt_group_result *res);

/* Asserts that `g` (a group of rt) has nothing left to collect: a next on
 * it, open, waits (it times out); once the group is closed, a next reports
 * -ECHILD. */
void assert_group_drained(rt_runtime *rt, rt_group *g);

/* rt_group_join_all (closing false) or rt_group_close (true) polled by hand
 * until ready, limited as hand_next. Returns the result; *failed and
 * *cancelled (may be NULL) receive the failed and cancelled counts when it
 * is 0. */
int hand_wait(rt_runtime *rt, rt_group *g, bool closing, int64_t timeout_ns, size_t *failed,
              size_t *cancelled);

/* A result that owns memory, so that a lost one shows up as a leak. */
#define BOX_MAGIC 0xB0C5B0C5u

struct box {
    unsigned magic;
    int index;
};

/* What the dispose function saw. */
struct dispose_log {
    atomic_int boxes;     /* non-NULL values (each freed) */
    atomic_int nulls;     /* NULL values */
    atomic_int bad;       /* values that were not boxes */
    atomic_ulong indices; /* bit per box index */
    struct event called;  /* signalled once per non-NULL value */
};

/* Frees a box and records it in the dispose_log `arg` (new_group passes
 * dlog). */
extern struct dispose_log dlog;
void dispose_box(void *value, void *arg);

/* The children. Counters are global; each test runs in its own process. */
extern atomic_int child_drops;
extern atomic_int child_off_worker; /* polls of pinned children elsewhere */
extern struct event child_polled;   /* signalled at each child's first poll */
extern struct event child_dropped;

enum child_kind {
    CHILD_VALUE,   /* finishes with `value` (after `yields` yields) */
    CHILD_BOX,     /* finishes with box_new(index) (after `yields` yields) */
    CHILD_GATED,   /* finishes with `value` once its gate opens */
    CHILD_FOREVER, /* never finishes; stores no waker (only a cancel ends it) */
};

struct child {
    enum child_kind kind;
    int index;
    int yields;
    bool polled;
    uintptr_t value;
    struct gate *gate; /* CHILD_GATED */
    void *buf;         /* freed by the drop when not NULL */
    int pinned_to;     /* checked at every poll when worker_out is set */
    int *worker_out;   /* where the first poll reports its worker (may be NULL) */
    char *name_out;    /* where the first poll copies rt_current_task_name() */
};

rt_poll child_poll(void *state, rt_context *cx, void **out);
void child_drop(void *state);

/* Spawns a copy of *c into g; returns its id (never 0). */
uint64_t spawn_child(rt_group *g, const struct child *c);

/* A group of rt, with dispose_box and dlog as its dispose function when
 * with_dispose is true. */
rt_group *new_group(rt_runtime *rt, bool with_dispose);

/* The index of id in ids[0..n), or n. */
size_t index_of_id(const uint64_t *ids, size_t n, uint64_t id);

#endif
