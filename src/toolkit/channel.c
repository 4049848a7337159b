/* Channels: a oneshot slot, and a bounded multi-producer queue with FIFO
 * backpressure.
 *
 * Both are small critical sections under a spinlock: every field below is
 * read and written with the lock held (the CAS that takes it is the acquire,
 * the store that releases it the release), including the state of the send
 * operations queued on a channel. Wakers are taken out under the lock and
 * woken after it is released.
 *
 * The bounded channel keeps one invariant that makes backpressure FIFO:
 * senders wait in the queue only while the buffer is full. A receive that
 * takes a value moves the oldest waiting sender's value into the freed slot
 * at once and marks that sender GRANTED, so the buffer stays full while
 * anyone waits, a new send can never overtake a waiting one, and values
 * enter the buffer in the order their sends began to wait.
 *
 * Receivers keep the mirror invariant: receives wait in their queue only
 * while every buffered value is promised (len <= reserved). A value that
 * comes wakes the oldest waiting receive with a claim on it (GRANTED,
 * reserved + 1); nobody else may take a promised value, so the woken one
 * finds it, and if it is dropped first its claim wakes the next one. The
 * end of the stream wakes every waiting receive without a claim (CLOSED):
 * each looks again, takes what is left or sees -EPIPE, and the receive
 * that takes the last value after the end wakes those that queued again. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <asyncrt/channel.h>
#include <asyncrt/diag.h>
#include <asyncrt/task.h>

#include "operation.h"
#include "fault.h"
#include "common.h"
#include "budget.h"
#include "current.h"
#include "spawning.h"
#include "task_internal.h"
#include "misuse.h"
#include "waitq.h"
#include "waker.h"

/* ---- Oneshot ---------------------------------------------------------------*/

struct rt_oneshot {
    uint32_t lock;                /* spinlock over the fields below */
    bool sent;                    /* a value was sent */
    bool taken;                   /* the receiver took it */
    bool tx_gone;                 /* the sending side is released */
    bool rx_gone;                 /* the receiving side is released */
    void *value;                  /* the value, once sent */
    rt_waker rx_waker;            /* the waiting receive's waker, or the no-op waker */
    const rt_oneshot_recv *rx_op; /* the receive that waits, or NULL */
};

RT_EXPORT int rt_oneshot_new(rt_oneshot **out)
{
    if (out == NULL)
        return -EINVAL;
    rt_oneshot *o = rt__calloc(1, sizeof(*o));
    if (o == NULL)
        return -ENOMEM;
    o->rx_waker = rt__waker_noop();
    *out = o;
    return 0;
}

/* Releases one side (under the lock, which it releases); frees the object
 * when both are gone. *wake is woken afterwards. */
static void oneshot_unlock_and_wake(rt_oneshot *o, rt_waker *wake)
{
    bool both_gone = o->tx_gone && o->rx_gone;
    rt__waitq_unlock(&o->lock);
    rt_waker_wake(wake);
    if (both_gone)
        free(o);
}

/* The misuse reports of the oneshot's and the channel's sides. */
static const char SENDER_GONE[] = "the sending side was released already";
static const char RECEIVER_GONE[] = "the receiving side was released already";
static const char NO_SENDER_LEFT[] = "no sender reference is left to release";
static const char NO_RECEIVER_LEFT[] = "no receiver reference is left to release";
static const char NO_SENDER_TO_CLONE[] =
    "a sender reference cloned while none is held (every sender was released)";
static const char NO_RECEIVER_TO_CLONE[] =
    "a receiver reference cloned while none is held (every receiver was released)";

RT_EXPORT int rt_oneshot_send(rt_oneshot *o, void *value)
{
    if (o == NULL)
        return -EINVAL;
    rt_waker wake = rt__waker_noop();
    rt__waitq_lock(&o->lock);
    if (o->tx_gone) {
        rt__waitq_unlock(&o->lock);
        rt__report_misuse("rt_oneshot_send", o, SENDER_GONE);
        return -EINVAL;
    }
    int err = -EPIPE;
    if (!o->rx_gone) {
        o->value = value;
        o->sent = true;
        wake = o->rx_waker;
        o->rx_waker = rt__waker_noop();
        err = 0;
    }
    o->tx_gone = true;
    oneshot_unlock_and_wake(o, &wake);
    return err;
}

RT_EXPORT void rt_oneshot_sender_drop(rt_oneshot *o)
{
    if (o == NULL)
        return;
    rt__waitq_lock(&o->lock);
    if (o->tx_gone) {
        rt__waitq_unlock(&o->lock);
        rt__report_misuse("rt_oneshot_sender_drop", o, SENDER_GONE);
        return;
    }
    o->tx_gone = true;
    /* The receiver learns that nothing will come. */
    rt_waker wake = o->rx_waker;
    o->rx_waker = rt__waker_noop();
    oneshot_unlock_and_wake(o, &wake);
}

/* The receive under the lock: 0 (taken), -EAGAIN, -EPIPE or -EALREADY. */
static int oneshot_take_locked(rt_oneshot *o, void **value)
{
    if (o->taken)
        return -EALREADY;
    if (o->sent) {
        *value = o->value;
        o->value = NULL;
        o->taken = true;
        return 0;
    }
    return o->tx_gone ? -EPIPE : -EAGAIN;
}

static rt_poll oneshot_recv_vpoll(rt_future *f, rt_context *cx);
static void oneshot_recv_vdrop(rt_future *f);
static void oneshot_recv_vdescribe(const rt_future *f, rt_wait_info *info);
static const rt_future_vtable oneshot_recv_vtable = {oneshot_recv_vpoll, oneshot_recv_vdrop,
                                                     oneshot_recv_vdescribe};

RT_EXPORT int rt_oneshot_recv_init(rt_oneshot_recv *op, rt_oneshot *o)
{
    if (op == NULL)
        return -EINVAL;
    op->future.vtable = &oneshot_recv_vtable;
    op->result = 0;
    op->o = o;
    op->value = NULL;
    if (o == NULL) {
        rt__future_finish(&op->future, -EINVAL);
        return -EINVAL;
    }
    return 0;
}

static rt_poll oneshot_recv_vpoll(rt_future *f, rt_context *cx)
{
    rt_oneshot_recv *op = (rt_oneshot_recv *)f;
    rt_oneshot *o = op->o;
    if (!rt__coop_proceed(cx))
        return RT_PENDING;
    void *v = NULL;
    int err;
    rt_waker old = rt__waker_noop();
    rt__waitq_lock(&o->lock);
    if (o->rx_op != NULL && o->rx_op != op) {
        /* Another receive waits: one receiver per oneshot, and the second
         * one is told rather than left waiting for ever. */
        err = -EBUSY;
    } else {
        err = oneshot_take_locked(o, &v);
        if (err == -EAGAIN) {
            old = rt__waker_store(&o->rx_waker, rt_context_waker(cx));
            o->rx_op = op;
        } else if (o->rx_op == op) {
            o->rx_op = NULL;
            old = o->rx_waker;
            o->rx_waker = rt__waker_noop();
        }
    }
    rt__waitq_unlock(&o->lock);
    rt__waker_drop(&old);
    if (err == -EAGAIN) {
        rt__coop_refund(); /* only completed operations spend budget */
        return RT_PENDING;
    }
    op->o = NULL;
    op->value = v;
    return rt__future_finish(f, err);
}

static void oneshot_recv_vdrop(rt_future *f)
{
    rt_oneshot_recv *op = (rt_oneshot_recv *)f;
    rt_oneshot *o = op->o;
    op->o = NULL;
    rt_waker old = rt__waker_noop();
    rt__waitq_lock(&o->lock);
    if (o->rx_op == op) {
        o->rx_op = NULL;
        old = o->rx_waker;
        o->rx_waker = rt__waker_noop();
    }
    rt__waitq_unlock(&o->lock);
    rt__waker_drop(&old);
}

/* Only the address: every field of the oneshot is the lock's. */
static void oneshot_recv_vdescribe(const rt_future *f, rt_wait_info *info)
{
    const rt_oneshot_recv *op = (const rt_oneshot_recv *)f;
    info->kind = RT_WAIT_RECV;
    info->object = op->o;
    rt__wait_printf(info, "receive on oneshot %p", (const void *)op->o);
}

RT_EXPORT int rt_oneshot_try_recv(rt_oneshot *o, void **value)
{
    if (o == NULL)
        return -EINVAL;
    void *v = NULL;
    rt__waitq_lock(&o->lock);
    int err = oneshot_take_locked(o, &v);
    rt__waitq_unlock(&o->lock);
    if (value != NULL)
        *value = v;
    return err;
}

/* ---- Receiving from a foreign thread -------------------------------------- */

/* Parks the calling thread on a receive of either kind, initialised by the
 * caller, until it finishes or timeout_ns passes (rt__block_on_future);
 * `received` is the operation's value field. */
static int recv_blocking(rt_future *op, void *const *received, int64_t timeout_ns, void **value)
{
    int err = rt__block_on_future(op, timeout_ns);
    /* A no-op once it finished; after a timeout it leaves the queue. */
    rt_future_drop(op);
    if (err == 0)
        err = (int)op->result;
    if (value != NULL)
        *value = err == 0 ? *received : NULL;
    return err;
}

RT_EXPORT int rt_oneshot_recv_wait(rt_oneshot *o, int64_t timeout_ns, void **value)
{
    if (value != NULL)
        *value = NULL;
    rt_oneshot_recv op;
    int err = rt_oneshot_recv_init(&op, o);
    return err < 0 ? err : recv_blocking(&op.future, &op.value, timeout_ns, value);
}

RT_EXPORT int rt_oneshot_receiver_drop(rt_oneshot *o, void **unreceived)
{
    if (unreceived != NULL)
        *unreceived = NULL;
    if (o == NULL)
        return 0;
    rt__waitq_lock(&o->lock);
    if (o->rx_gone) {
        rt__waitq_unlock(&o->lock);
        rt__report_misuse("rt_oneshot_receiver_drop", o, RECEIVER_GONE);
        return 0;
    }
    int had = 0;
    if (o->sent && !o->taken) {
        if (unreceived != NULL)
            *unreceived = o->value;
        had = 1;
    }
    o->rx_gone = true;
    o->rx_op = NULL;
    rt_waker old = o->rx_waker;
    o->rx_waker = rt__waker_noop();
    bool both_gone = o->tx_gone;
    rt__waitq_unlock(&o->lock);
    rt__waker_drop(&old);
    if (both_gone)
        free(o);
    return had;
}

/* ---- Bounded multi-producer channel ---------------------------------------*/

struct rt_chan {
    uint32_t lock;        /* spinlock over everything below */
    bool closed;          /* a receiver closed it: sends fail */
    bool rx_gone;         /* the last receiver reference was dropped */
    size_t senders;       /* sender references */
    size_t receivers;     /* receiver references */
    size_t capacity;      /* slots in buf */
    size_t len;           /* values buffered */
    size_t first;         /* index of the oldest buffered value */
    size_t reserved;      /* receives woken (GRANTED) that have not polled yet */
    rt_waker rx_cache;    /* a clone of the last waiting receive's waker (no-op: none) */
    unsigned busy;        /* threads inside a wake window (lock released): no free */
    bool rx_cache_used;   /* a queued receive uses rx_cache as its waker */
    rt_waitnode *rx_head; /* oldest waiting receive (only while len <= reserved) */
    rt_waitnode *rx_tail; /* newest waiting receive */
    rt_waitnode *tx_head; /* oldest waiting send (only while full) */
    rt_waitnode *tx_tail; /* newest waiting send */
    size_t value_size;    /* bytes per value; sizeof(void *) for rt_chan_new */
    bool pointers;        /* made by rt_chan_new: its values are `void *` */
    /* The ring of values, value_size bytes each, aligned for a pointer. */
    _Alignas(max_align_t) unsigned char buf[];
};

#define RT__CHAN_MAX_CAPACITY ((size_t)1 << 31)

static inline rt_chan_send *send_of_node(rt_waitnode *n)
{
    return (rt_chan_send *)((char *)n - offsetof(rt_chan_send, node));
}

RT_EXPORT int rt_chan_new_sized(size_t capacity, size_t value_size, rt_chan **out)
{
    if (out == NULL || capacity == 0 || capacity > RT__CHAN_MAX_CAPACITY || value_size == 0 ||
        value_size > RT_CHAN_VALUE_MAX)
        return -EINVAL;
    rt_chan *ch = rt__calloc(1, sizeof(*ch) + capacity * value_size);
    if (ch == NULL)
        return -ENOMEM;
    ch->senders = 1;
    ch->receivers = 1;
    ch->capacity = capacity;
    ch->value_size = value_size;
    ch->rx_cache = rt__waker_noop();
    *out = ch;
    return 0;
}

RT_EXPORT int rt_chan_new(size_t capacity, rt_chan **out)
{
    int err = rt_chan_new_sized(capacity, sizeof(void *), out);
    if (err == 0)
        (*out)->pointers = true;
    return err;
}

RT_EXPORT size_t rt_chan_value_size(const rt_chan *ch)
{
    return ch != NULL ? ch->value_size : 0;
}

/* What a send or receive on ch waits for. The capacity is fixed when the
 * channel is made; everything the lock guards (the values buffered, the
 * queues, the operation's own node state) is left out. */
static void chan_describe(rt_wait_info *info, rt_wait_kind kind, const rt_chan *ch)
{
    info->kind = kind;
    info->object = ch;
    rt__wait_printf(info, "%s on channel %p (capacity %zu)",
                    kind == RT_WAIT_SEND ? "send" : "receive", (const void *)ch, ch->capacity);
}

/* The plain forms carry `void *` values: a channel made by rt_chan_new. */
static inline bool chan_holds_pointers(const rt_chan *ch)
{
    return ch->pointers;
}

/* Copies one value; a pointer-size one (the common case) without a call. */
static inline void chan_copy_value(const rt_chan *ch, void *dst, const void *src)
{
    if (rt__likely(ch->value_size == sizeof(void *)))
        memcpy(dst, src, sizeof(void *));
    else
        memcpy(dst, src, ch->value_size);
}

/* Releases the lock; frees the channel when its last side is gone and no
 * thread is inside a wake window (chan_wake_all_rx_locked), which would
 * take the lock again. */
static void chan_unlock(rt_chan *ch)
{
    bool gone = ch->senders == 0 && ch->rx_gone && ch->busy == 0;
    rt__waitq_unlock(&ch->lock);
    if (gone)
        free(ch);
}

static inline void chan_push_locked(rt_chan *ch, const void *src)
{
    size_t slot = ch->first + ch->len;
    if (slot >= ch->capacity)
        slot -= ch->capacity;
    chan_copy_value(ch, ch->buf + slot * ch->value_size, src);
    ch->len++;
}

/* The bytes a send carries: its src, or its own `value` field. */
static inline const void *send_source(const rt_chan_send *op)
{
    return op->src != NULL ? op->src : (const void *)&op->value;
}

/* rt_waitnode.want of a waiting receive whose waker is the channel's
 * rx_cache rather than its own clone (a receive needs no `want` otherwise).
 *
 * The cache spares the common case, one receiver task waiting on every
 * round trip, a clone and a drop of its waker per wait: the channel keeps a
 * clone of the last waiting receive's waker, and a receive whose waker will
 * wake the same borrows it, while no other queued receive does. The cache
 * is replaced only when a different waker waits with it free, and released
 * with the last receiver reference. */
#define RX_USES_CACHE 1

/* Stores cx's waker for a receive about to be queued, or updates that of a
 * queued one (was_queued): borrowed from the cache when it can be, else a
 * clone of its own. A waker the node or the cache gives up goes to *old. */
static void chan_rx_store_waker_locked(rt_chan *ch, rt_waitnode *n, const rt_waker *cxw,
                                       bool was_queued, rt_waker *old)
{
    if (was_queued && n->want == RX_USES_CACHE) {
        if (rt__waker_will_wake(&ch->rx_cache, cxw))
            return;
        /* Another waker now: the node gets a clone of its own. */
        n->want = 0;
        ch->rx_cache_used = false;
        n->waker = rt_waker_clone(cxw);
        return;
    }
    if (was_queued) {
        *old = rt__waker_store(&n->waker, cxw);
        return;
    }
    if (!ch->rx_cache_used) {
        if (!rt__waker_will_wake(&ch->rx_cache, cxw)) {
            *old = ch->rx_cache;
            ch->rx_cache = rt_waker_clone(cxw);
        }
        ch->rx_cache_used = true;
        n->want = RX_USES_CACHE;
        n->waker = rt__waker_noop();
        return;
    }
    n->waker = rt_waker_clone(cxw);
}

/* Wakes the oldest waiting receive when a buffered value is not yet
 * promised to another woken one (len > reserved): it becomes GRANTED, a
 * claim on one value, which its next poll takes or its drop passes on. The
 * waker goes to *wake, to be woken once the lock is released. */
static inline void chan_wake_rx_locked(rt_chan *ch, rt_waker *wake)
{
    if (ch->rx_head == NULL || ch->len <= ch->reserved)
        return;
    rt_waitnode *n = rt__waitq_pop(&ch->rx_head, &ch->rx_tail);
    n->state = RT__WAIT_GRANTED;
    ch->reserved++;
    rt_waker *w = &n->waker;
    if (n->want == RX_USES_CACHE) {
        w = &ch->rx_cache;
        n->want = 0;
        ch->rx_cache_used = false;
    }
    /* A runtime task's waker is woken by reference right here, under the
     * lock, and stays where it is (the node, until the receive's next poll
     * or drop; or the cache): a task wake only touches the task's word and
     * a run queue (never a channel lock), so it cannot deadlock. Any other
     * waker may run user code: it goes to *wake (a clone, for the cache),
     * to be woken once the lock is released. */
    if (w->vtable == &rt__task_waker_vtable) {
        rt_waker_wake_by_ref(w);
    } else if (w == &ch->rx_cache) {
        *wake = rt_waker_clone(w);
    } else {
        *wake = *w;
        *w = rt__waker_noop();
    }
}

/* The end of the stream (every sender gone, or closed), or the last value
 * taken after it: every waiting receive is woken (CLOSED, holding no claim)
 * to look again, so that each sees the end once the buffer is drained.
 * Called with the lock held, which it may release and retake to wake. */
static void chan_wake_all_rx_locked(rt_chan *ch)
{
    rt__wake_list wakes = {0};
    /* The wakes run with the lock released, and a woken receiver may then
     * give back the last receiver reference: `busy` keeps the channel
     * alive until this thread has taken the lock again. */
    while (ch->rx_head != NULL) {
        if (wakes.n == RT__WAKE_LIST_MAX) {
            ch->busy++;
            rt__waitq_unlock(&ch->lock);
            rt__wake_list_wake(&wakes);
            rt__waitq_lock(&ch->lock);
            ch->busy--;
            continue;
        }
        rt_waitnode *n = rt__waitq_pop(&ch->rx_head, &ch->rx_tail);
        n->state = RT__WAIT_CLOSED; /* no claim: woken to look again */
        if (n->want == RX_USES_CACHE) {
            n->want = 0;
            ch->rx_cache_used = false;
            n->waker = rt_waker_clone(&ch->rx_cache);
        }
        rt__wake_list_take(&wakes, n);
    }
    if (wakes.n > 0) {
        ch->busy++;
        rt__waitq_unlock(&ch->lock);
        rt__wake_list_wake(&wakes);
        rt__waitq_lock(&ch->lock);
        ch->busy--;
    }
}

/* Whether the stream has ended for receivers: nothing buffered, and
 * nothing can come (every sender gone, or closed). */
static inline bool chan_ended_locked(const rt_chan *ch)
{
    return ch->len == 0 && (ch->senders == 0 || ch->closed);
}

RT_EXPORT int rt_chan_sender_clone(rt_chan *ch)
{
    if (ch == NULL)
        return -EINVAL;
    rt__waitq_lock(&ch->lock);
    bool held = ch->senders > 0;
    if (held)
        ch->senders++;
    rt__waitq_unlock(&ch->lock);
    if (!held) {
        rt__report_misuse("rt_chan_sender_clone", ch, NO_SENDER_TO_CLONE);
        return -EINVAL;
    }
    return 0;
}

RT_EXPORT void rt_chan_sender_drop(rt_chan *ch)
{
    if (ch == NULL)
        return;
    rt__waitq_lock(&ch->lock);
    if (ch->senders == 0) {
        /* Still allocated (a receiver holds it): the count stays, and the
         * end of the stream the receivers saw stands. */
        rt__waitq_unlock(&ch->lock);
        rt__report_misuse("rt_chan_sender_drop", ch, NO_SENDER_LEFT);
        return;
    }
    if (--ch->senders == 0)
        chan_wake_all_rx_locked(ch); /* the receivers may now see the end */
    chan_unlock(ch);
}

/* Marks the channel closed and fails every waiting send. Takes the lock
 * and returns with it held. */
static void chan_close_locked(rt_chan *ch)
{
    rt__wake_list wakes = {0};
    rt__waitq_lock(&ch->lock);
    ch->closed = true;
    while (ch->tx_head != NULL) {
        if (wakes.n == RT__WAKE_LIST_MAX) {
            rt__waitq_unlock(&ch->lock);
            rt__wake_list_wake(&wakes);
            rt__waitq_lock(&ch->lock);
            continue;
        }
        rt_waitnode *n = rt__waitq_pop(&ch->tx_head, &ch->tx_tail);
        n->state = RT__WAIT_CLOSED;
        rt__wake_list_take(&wakes, n);
    }
    if (wakes.n > 0) {
        rt__waitq_unlock(&ch->lock);
        rt__wake_list_wake(&wakes);
        rt__waitq_lock(&ch->lock);
    }
    /* Receivers waiting on an empty closed channel see the end. */
    chan_wake_all_rx_locked(ch);
}

RT_EXPORT void rt_chan_close(rt_chan *ch)
{
    if (ch == NULL)
        return;
    chan_close_locked(ch);
    rt__waitq_unlock(&ch->lock);
}

RT_EXPORT int rt_chan_receiver_clone(rt_chan *ch)
{
    if (ch == NULL)
        return -EINVAL;
    rt__waitq_lock(&ch->lock);
    bool held = ch->receivers > 0;
    if (held)
        ch->receivers++;
    rt__waitq_unlock(&ch->lock);
    if (!held) {
        rt__report_misuse("rt_chan_receiver_clone", ch, NO_RECEIVER_TO_CLONE);
        return -EINVAL;
    }
    return 0;
}

RT_EXPORT void rt_chan_receiver_drop(rt_chan *ch, void (*dispose)(void *value, void *arg),
                                     void *arg)
{
    if (ch == NULL)
        return;
    rt__waitq_lock(&ch->lock);
    if (ch->receivers == 0) {
        rt__waitq_unlock(&ch->lock);
        rt__report_misuse("rt_chan_receiver_drop", ch, NO_RECEIVER_LEFT);
        return;
    }
    if (--ch->receivers > 0) {
        rt__waitq_unlock(&ch->lock);
        return;
    }
    rt__waitq_unlock(&ch->lock);
    chan_close_locked(ch);
    /* Closed: nothing more comes in, so the buffer only shrinks. The values
     * go to dispose one at a time, outside the lock. */
    _Alignas(max_align_t) unsigned char v[RT_CHAN_VALUE_MAX]; /* the value being disposed of */
    while (ch->len > 0) {
        if (dispose != NULL)
            chan_copy_value(ch, v, ch->buf + ch->first * ch->value_size);
        ch->first = ch->first + 1 == ch->capacity ? 0 : ch->first + 1;
        ch->len--;
        rt__waitq_unlock(&ch->lock);
        if (dispose != NULL) {
            void *pointer = v;
            if (chan_holds_pointers(ch))
                memcpy(&pointer, v, sizeof pointer); /* a `void *` value: itself */
            dispose(pointer, arg);
        }
        rt__waitq_lock(&ch->lock);
    }
    ch->rx_gone = true;
    rt_waker cache = ch->rx_cache;
    ch->rx_cache = rt__waker_noop();
    chan_unlock(ch);
    rt__waker_drop(&cache);
}

RT_EXPORT size_t rt_chan_len(rt_chan *ch)
{
    if (ch == NULL)
        return 0;
    rt__waitq_lock(&ch->lock);
    size_t n = ch->len;
    rt__waitq_unlock(&ch->lock);
    return n;
}

RT_EXPORT size_t rt_chan_capacity(const rt_chan *ch)
{
    return ch != NULL ? ch->capacity : 0;
}

RT_EXPORT int rt_chan_try_send(rt_chan *ch, void *value)
{
    if (ch == NULL || !chan_holds_pointers(ch))
        return -EINVAL;
    return rt_chan_try_send_copy(ch, &value);
}

RT_EXPORT int rt_chan_try_send_copy(rt_chan *ch, const void *src)
{
    if (ch == NULL || src == NULL)
        return -EINVAL;
    rt__waitq_lock(&ch->lock);
    if (ch->closed) {
        rt__waitq_unlock(&ch->lock);
        return -EPIPE;
    }
    if (ch->len == ch->capacity) {
        /* Full (always the case while senders wait: see the top). */
        rt__waitq_unlock(&ch->lock);
        return -EAGAIN;
    }
    chan_push_locked(ch, src);
    rt_waker wake = rt__waker_noop();
    chan_wake_rx_locked(ch, &wake);
    rt__waitq_unlock(&ch->lock);
    rt__waker_wake(&wake);
    return 0;
}

/* Takes the oldest value (the caller made sure one is free: len >
 * reserved) and moves the oldest waiting sender's value into the freed slot,
 * putting that sender's waker in *wake and, when a receive waits for that
 * value, the receive's in *wake_rx. Taking the last value after the end
 * wakes every waiting receive to see the end. Under the lock, which it may
 * release and retake (chan_wake_all_rx_locked). */
static void chan_take_locked(rt_chan *ch, void *dst, rt_waker *wake, rt_waker *wake_rx)
{
    if (dst != NULL)
        chan_copy_value(ch, dst, ch->buf + ch->first * ch->value_size);
    ch->first = ch->first + 1 == ch->capacity ? 0 : ch->first + 1;
    ch->len--;
    rt_waitnode *n = rt__waitq_pop(&ch->tx_head, &ch->tx_tail);
    if (n != NULL) {
        chan_push_locked(ch, send_source(send_of_node(n)));
        n->state = RT__WAIT_GRANTED;
        *wake = n->waker;
        n->waker = rt__waker_noop();
        /* The value moved in is a new one to promise: a woken receive that
         * just spent its claim leaves len > reserved while others wait. */
        chan_wake_rx_locked(ch, wake_rx);
    } else if (chan_ended_locked(ch) && ch->rx_head != NULL) {
        chan_wake_all_rx_locked(ch);
    }
}

RT_EXPORT int rt_chan_try_recv(rt_chan *ch, void **value)
{
    if (value != NULL)
        *value = NULL;
    if (ch == NULL || !chan_holds_pointers(ch))
        return -EINVAL;
    return rt_chan_try_recv_into(ch, value);
}

RT_EXPORT int rt_chan_try_recv_into(rt_chan *ch, void *dst)
{
    if (ch == NULL)
        return -EINVAL;
    int err = 0;
    rt_waker wake = rt__waker_noop();
    rt_waker wake_rx = rt__waker_noop();
    rt__waitq_lock(&ch->lock);
    /* Values promised to woken receives are theirs: no barging. */
    if (ch->len > ch->reserved)
        chan_take_locked(ch, dst, &wake, &wake_rx);
    else
        err = chan_ended_locked(ch) ? -EPIPE : -EAGAIN;
    rt__waitq_unlock(&ch->lock);
    rt__waker_wake(&wake);
    rt__waker_wake(&wake_rx);
    return err;
}

static rt_poll chan_recv_vpoll(rt_future *f, rt_context *cx);
static void chan_recv_vdrop(rt_future *f);
static void chan_recv_vdescribe(const rt_future *f, rt_wait_info *info);
static const rt_future_vtable chan_recv_vtable = {chan_recv_vpoll, chan_recv_vdrop,
                                                  chan_recv_vdescribe};

/* Field by field: a receive is prepared on every round trip. */
static int chan_recv_prepare(rt_chan_recv *op, rt_chan *ch, void *dst, bool valid)
{
    op->future.vtable = &chan_recv_vtable;
    op->result = 0;
    op->value = NULL;
    op->dst = dst;
    op->ch = ch;
    op->node.prev = op->node.next = NULL;
    op->node.waker = rt__waker_noop();
    op->node.want = 0;
    op->node.state = RT__WAIT_IDLE;
    if (!valid) {
        op->ch = NULL;
        rt__future_finish(&op->future, -EINVAL);
        return -EINVAL;
    }
    return 0;
}

RT_EXPORT int rt_chan_recv_init(rt_chan_recv *op, rt_chan *ch)
{
    if (op == NULL)
        return -EINVAL;
    return chan_recv_prepare(op, ch, NULL, ch != NULL && chan_holds_pointers(ch));
}

RT_EXPORT int rt_chan_recv_into_init(rt_chan_recv *op, rt_chan *ch, void *dst)
{
    if (op == NULL)
        return -EINVAL;
    return chan_recv_prepare(op, ch, dst, ch != NULL && dst != NULL);
}

/* A receive leaving the queue gives the cache back if it borrowed it. */
static inline void chan_rx_unborrow_locked(rt_chan *ch, rt_waitnode *n)
{
    if (n->want == RX_USES_CACHE) {
        n->want = 0;
        ch->rx_cache_used = false;
    }
}

/* Releases a woken receive's claim (GRANTED) without using it: the value
 * it was promised is free again, for the next waiting receive. Under the
 * lock; the next one's waker goes to *wake. */
static void chan_release_claim_locked(rt_chan *ch, rt_waitnode *n, rt_waker *wake)
{
    ch->reserved--;
    n->state = RT__WAIT_IDLE;
    chan_wake_rx_locked(ch, wake);
}

static rt_poll chan_recv_vpoll(rt_future *f, rt_context *cx)
{
    rt_chan_recv *op = (rt_chan_recv *)f;
    rt_chan *ch = op->ch;
    if (!rt__coop_proceed(cx))
        return RT_PENDING;
    int err;
    rt_waker wake = rt__waker_noop();
    rt_waker wake_rx = rt__waker_noop();
    rt_waker old = rt__waker_noop();
    rt_waker old_stored = rt__waker_noop();
    rt__waitq_lock(&ch->lock);
    if (op->node.state == RT__WAIT_GRANTED || op->node.state == RT__WAIT_CLOSED) {
        /* Woken: a claim on one value (GRANTED), spent on this attempt, or
         * a call to look again at the end of the stream (CLOSED). */
        if (op->node.state == RT__WAIT_GRANTED)
            ch->reserved--;
        op->node.state = RT__WAIT_IDLE;
        old = op->node.waker;
        op->node.waker = rt__waker_noop();
    }
    bool can_take = ch->len > ch->reserved;
    if (can_take || chan_ended_locked(ch)) {
        if (op->node.state == RT__WAIT_QUEUED) {
            /* A value free for anyone came while it was queued behind
             * others, or the end did: it leaves the queue. */
            rt__waitq_remove(&ch->rx_head, &ch->rx_tail, &op->node);
            chan_rx_unborrow_locked(ch, &op->node);
            old = op->node.waker;
            op->node.waker = rt__waker_noop();
        }
        op->node.state = RT__WAIT_DONE;
        err = -EPIPE;
        if (can_take) {
            chan_take_locked(ch, op->dst != NULL ? op->dst : (void *)&op->value, &wake, &wake_rx);
            err = 0;
        }
    } else {
        err = -EAGAIN;
        bool was_queued = op->node.state == RT__WAIT_QUEUED;
        chan_rx_store_waker_locked(ch, &op->node, rt_context_waker(cx), was_queued, &old_stored);
        if (!was_queued) {
            op->node.state = RT__WAIT_QUEUED;
            rt__waitq_push(&ch->rx_head, &ch->rx_tail, &op->node);
        }
    }
    rt__waitq_unlock(&ch->lock);
    rt__waker_drop(&old);
    rt__waker_drop(&old_stored);
    rt__waker_wake(&wake);
    rt__waker_wake(&wake_rx);
    if (err == -EAGAIN) {
        rt__coop_refund(); /* only completed operations spend budget */
        return RT_PENDING;
    }
    op->ch = NULL;
    return rt__future_finish(f, err);
}

static void chan_recv_vdrop(rt_future *f)
{
    rt_chan_recv *op = (rt_chan_recv *)f;
    rt_chan *ch = op->ch;
    op->ch = NULL;
    rt_waker wake = rt__waker_noop();
    rt__waitq_lock(&ch->lock);
    if (op->node.state == RT__WAIT_QUEUED) {
        rt__waitq_remove(&ch->rx_head, &ch->rx_tail, &op->node);
        chan_rx_unborrow_locked(ch, &op->node);
    } else if (op->node.state == RT__WAIT_GRANTED) {
        chan_release_claim_locked(ch, &op->node, &wake); /* passes the wake on */
    }
    op->node.state = RT__WAIT_DONE;
    rt_waker old = op->node.waker;
    op->node.waker = rt__waker_noop();
    rt__waitq_unlock(&ch->lock);
    rt__waker_drop(&old);
    rt__waker_wake(&wake);
}

static void chan_recv_vdescribe(const rt_future *f, rt_wait_info *info)
{
    chan_describe(info, RT_WAIT_RECV, ((const rt_chan_recv *)f)->ch);
}

RT_EXPORT int rt_chan_recv_wait(rt_chan *ch, int64_t timeout_ns, void **value)
{
    if (value != NULL)
        *value = NULL;
    rt_chan_recv op;
    int err = rt_chan_recv_init(&op, ch);
    return err < 0 ? err : recv_blocking(&op.future, &op.value, timeout_ns, value);
}

RT_EXPORT int rt_chan_recv_into_wait(rt_chan *ch, int64_t timeout_ns, void *dst)
{
    unsigned char unwanted[RT_CHAN_VALUE_MAX]; /* where a value not handed back goes */
    rt_chan_recv op;
    int err = rt_chan_recv_into_init(&op, ch, dst != NULL ? dst : unwanted);
    return err < 0 ? err : recv_blocking(&op.future, NULL, timeout_ns, NULL);
}

static rt_poll chan_send_vpoll(rt_future *f, rt_context *cx);
static void chan_send_vdrop(rt_future *f);
static void chan_send_vdescribe(const rt_future *f, rt_wait_info *info);
static const rt_future_vtable chan_send_vtable = {chan_send_vpoll, chan_send_vdrop,
                                                  chan_send_vdescribe};

static int chan_send_prepare(rt_chan_send *op, rt_chan *ch, void *value, const void *src,
                             bool valid)
{
    /* Field by field, as a receive: a send is prepared on every round trip. */
    op->future.vtable = &chan_send_vtable;
    op->result = 0;
    op->ch = valid ? ch : NULL;
    op->value = value;
    op->src = src;
    op->node.prev = op->node.next = NULL;
    op->node.waker = rt__waker_noop();
    op->node.want = 0;
    op->node.state = RT__WAIT_IDLE;
    if (!valid) {
        rt__future_finish(&op->future, -EINVAL);
        return -EINVAL;
    }
    return 0;
}

RT_EXPORT int rt_chan_send_init(rt_chan_send *op, rt_chan *ch, void *value)
{
    if (op == NULL)
        return -EINVAL;
    return chan_send_prepare(op, ch, value, NULL, ch != NULL && chan_holds_pointers(ch));
}

RT_EXPORT int rt_chan_send_copy_init(rt_chan_send *op, rt_chan *ch, const void *src)
{
    if (op == NULL)
        return -EINVAL;
    return chan_send_prepare(op, ch, NULL, src, ch != NULL && src != NULL);
}

static rt_poll chan_send_vpoll(rt_future *f, rt_context *cx)
{
    rt_chan_send *op = (rt_chan_send *)f;
    rt_chan *ch = op->ch;
    if (!rt__coop_proceed(cx))
        return RT_PENDING;
    rt_waker wake = rt__waker_noop();
    rt_waker old = rt__waker_noop();
    int err = 1; /* pending */
    rt__waitq_lock(&ch->lock);
    switch (op->node.state) {
    case RT__WAIT_GRANTED:
        old = op->node.waker;
        op->node.waker = rt__waker_noop();
        err = 0;
        break;
    case RT__WAIT_CLOSED:
        old = op->node.waker;
        op->node.waker = rt__waker_noop();
        err = -EPIPE;
        break;
    case RT__WAIT_QUEUED:
        old = rt__waker_store(&op->node.waker, rt_context_waker(cx));
        break;
    default:
        if (ch->closed) {
            err = -EPIPE;
        } else if (ch->len < ch->capacity) {
            chan_push_locked(ch, send_source(op));
            chan_wake_rx_locked(ch, &wake);
            err = 0;
        } else {
            op->node.waker = rt_waker_clone(rt_context_waker(cx));
            op->node.state = RT__WAIT_QUEUED;
            rt__waitq_push(&ch->tx_head, &ch->tx_tail, &op->node);
        }
        break;
    }
    if (err <= 0)
        op->node.state = RT__WAIT_DONE;
    rt__waitq_unlock(&ch->lock);
    rt__waker_drop(&old);
    rt__waker_wake(&wake);
    if (err > 0) {
        rt__coop_refund();
        return RT_PENDING;
    }
    op->ch = NULL;
    return rt__future_finish(f, err);
}

/* Abandons a send; returns true when its value had been accepted into the
 * channel meanwhile (GRANTED but not yet reported by a poll). */
static bool chan_send_abandon(rt_chan_send *op)
{
    rt_chan *ch = op->ch;
    if (ch == NULL)
        return false;
    op->ch = NULL;
    rt__waitq_lock(&ch->lock);
    bool sent = op->node.state == RT__WAIT_GRANTED;
    if (op->node.state == RT__WAIT_QUEUED)
        rt__waitq_remove(&ch->tx_head, &ch->tx_tail, &op->node);
    op->node.state = RT__WAIT_DONE;
    rt_waker old = op->node.waker;
    op->node.waker = rt__waker_noop();
    rt__waitq_unlock(&ch->lock);
    rt__waker_drop(&old);
    return sent;
}

static void chan_send_vdrop(rt_future *f)
{
    /* A send accepted but not reported stays sent: its value is in the
     * buffer, owned by the receiver side, exactly as after it finished. */
    if (chan_send_abandon((rt_chan_send *)f))
        f->result = 0;
}

static void chan_send_vdescribe(const rt_future *f, rt_wait_info *info)
{
    chan_describe(info, RT_WAIT_SEND, ((const rt_chan_send *)f)->ch);
}

/* Parks the calling thread on a send prepared by the caller (err: what its
 * init returned). */
static int send_blocking(rt_chan_send *op, int err, int64_t timeout_ns)
{
    if (err < 0)
        return err;
    err = rt__block_on_future(&op->future, timeout_ns);
    if (err == 0)
        return (int)op->result;
    /* Timed out (or no memory): unless the value got in at the last moment,
     * it was not sent and is still the caller's. */
    RT_DROP(op);
    return op->result == 0 ? 0 : err;
}

RT_EXPORT int rt_chan_send_wait(rt_chan *ch, void *value, int64_t timeout_ns)
{
    rt_chan_send op;
    return send_blocking(&op, rt_chan_send_init(&op, ch, value), timeout_ns);
}

RT_EXPORT int rt_chan_send_copy_wait(rt_chan *ch, const void *src, int64_t timeout_ns)
{
    rt_chan_send op;
    return send_blocking(&op, rt_chan_send_copy_init(&op, ch, src), timeout_ns);
}
