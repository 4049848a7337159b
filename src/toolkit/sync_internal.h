/* The objects of asyncrt/sync.h, which users see as opaque: sync.c owns
 * their fields. Internal, not installed. */
#ifndef RT_SRC_SYNC_INTERNAL_H
#define RT_SRC_SYNC_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <asyncrt/sync.h>

/* Counts permits. */
struct rt_semaphore {
    uint32_t lock;     /* spinlock over the fields below */
    uint32_t refs;     /* references (atomic) */
    size_t permits;    /* available, not granted to anyone */
    size_t granted;    /* granted to waiters that have not collected them */
    rt_waitnode *head; /* oldest waiter */
    rt_waitnode *tail; /* newest waiter */
};

/* A semaphore of one permit, the lock. */
struct rt_mutex {
    struct rt_semaphore sem;
};

struct rt_notify {
    uint32_t lock;       /* spinlock over the fields below */
    uint32_t permit;     /* a notify_one that found nobody waiting */
    uint32_t refs;       /* references (atomic) */
    uint64_t generation; /* rt_notify_all calls so far */
    rt_waitnode *head;   /* oldest waiter */
    rt_waitnode *tail;   /* newest waiter */
};

#endif
