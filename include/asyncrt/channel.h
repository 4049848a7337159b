/* asyncrt: channels between tasks and threads.
 *
 * Two kinds, both carrying `void *` values that the runtime never looks at,
 * frees or copies (a value's memory is the business of whoever holds it):
 * - rt_oneshot: exactly one value, sent once, from one sender to one receiver;
 * - rt_chan: a bounded multi-producer, multi-consumer queue. A send waits
 *   while the buffer is full (backpressure); waiting senders are served in
 *   FIFO order, and the values arrive in the order the sends completed.
 *   Several receivers (tasks or threads, each with a receiver reference)
 *   may receive at once: each value goes to exactly one of them, waiting
 *   receivers are served in FIFO order, and the end of the stream reaches
 *   all of them.
 *
 * Both are heap objects shared by their two sides and freed when both sides
 * have let go. Every function may be called from any thread: the poll forms
 * from tasks (or from threads polling by hand), the try forms from anywhere,
 * the *_blocking forms from threads that are not workers (-EDEADLK there).
 *
 * End of stream and closing (errno values):
 * - -EPIPE to a sender: the receiver is gone or closed the channel; the value
 *   was not sent and is still the caller's.
 * - -EPIPE to a receiver: every sender is gone and nothing is left buffered.
 *
 * Abort safety: a receive takes a value only in a poll that returns RT_READY,
 * so an aborted receive loses no message; a receive woken for a value and
 * dropped before its next poll passes the wake to the next waiting
 * receiver, so the value is not left behind while others wait. A send operation dropped while it
 * waits leaves the queue and its value stays the caller's (it was not sent);
 * once its poll returned RT_READY the value belongs to the channel, and
 * rt_chan_send_drop says which of the two happened when a receive accepted
 * the value just before the drop. A
 * successful send or receive spends one unit of the cooperative budget
 * (rt_coop_proceed). */
#ifndef ASYNCRT_CHANNEL_H
#define ASYNCRT_CHANNEL_H

#include <stddef.h>
#include <stdint.h>

#include "future.h"
#include "sync.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Oneshot ---------------------------------------------------------------*/

typedef struct rt_oneshot rt_oneshot;

/* Creates a oneshot channel; the caller holds both the sending and the
 * receiving side of *out and hands them out. Each side is released exactly
 * once: the sender by rt_oneshot_send or rt_oneshot_sender_drop, the receiver
 * by rt_oneshot_receiver_drop. Errors: -EINVAL (out NULL), -ENOMEM. */
int rt_oneshot_new(rt_oneshot **out);

/* Sends `value` and releases the sending side. Returns 0, or -EPIPE when the
 * receiver was already dropped (the value stays the caller's), or -EINVAL (o
 * NULL). Never waits. */
int rt_oneshot_send(rt_oneshot *o, void *value);

/* Releases the sending side without sending: the receiver gets -EPIPE. NULL
 * is a no-op. */
void rt_oneshot_sender_drop(rt_oneshot *o);

/* The receive. Fields are private. */
typedef struct rt_oneshot_recv {
    rt_oneshot *o; /* NULL: not initialised, or finished */
} rt_oneshot_recv;

/* Prepares to receive from o (the caller holds the receiving side for as
 * long as the operation lives). Errors: -EINVAL (op or o NULL). */
int rt_oneshot_recv_init(rt_oneshot_recv *op, rt_oneshot *o);

/* RT_READY with *status 0 and the value in *value, or *status -EPIPE when the
 * sender was dropped without sending; else RT_PENDING (waker stored). The
 * value is handed out once: a receive after it was taken reports -EALREADY,
 * as does a poll after the one that returned RT_READY. One receive waits at
 * a time: while one does, another one's poll reports -EBUSY. *value is NULL
 * unless *status is 0. value and status may be NULL. op or cx NULL: RT_READY
 * with *value NULL and *status -EINVAL; op is left as it was. */
rt_poll rt_oneshot_recv_poll(rt_oneshot_recv *op, rt_context *cx, void **value, int *status);

/* Abandons the receive: a waiting one gives its waker back (the value, if
 * one comes, stays in the oneshot). Nothing to do after RT_READY or a
 * second call, on a zeroed operation, and for NULL. */
void rt_oneshot_recv_drop(rt_oneshot_recv *op);

/* The non-waiting form: 0 (value taken), -EAGAIN (nothing yet), -EPIPE (the
 * sender is gone without sending), -EALREADY (already received), -EINVAL (o
 * NULL). value may be NULL (a value taken is then not handed back). */
int rt_oneshot_try_recv(rt_oneshot *o, void **value);

/* Blocks the calling thread until a value or -EPIPE comes, or timeout_ns
 * passes (< 0: no limit; -ETIMEDOUT). Also -EDEADLK (a worker thread),
 * -EALREADY, -EBUSY (another receive waits), -ENOMEM, -EINVAL (o NULL). value may be NULL, as for
 * rt_oneshot_try_recv. */
int rt_oneshot_recv_blocking(rt_oneshot *o, int64_t timeout_ns, void **value);

/* Releases the receiving side (after dropping its receive operation). If a
 * value was sent but never received, it is written to *unreceived (may be
 * NULL: then it is simply not handed back) and 1 is returned; else
 * *unreceived gets NULL and 0 is returned. A sender sending afterwards gets
 * -EPIPE. o NULL: a no-op returning 0. */
int rt_oneshot_receiver_drop(rt_oneshot *o, void **unreceived);

/* ---- Bounded multi-producer channel ---------------------------------------*/

typedef struct rt_chan rt_chan;

/* Creates a channel buffering up to `capacity` values (>= 1). The caller
 * holds one sender reference and one receiver reference. Both sides are
 * counted: rt_chan_sender_clone and rt_chan_receiver_clone add one,
 * rt_chan_sender_drop and rt_chan_receiver_drop give one back. The channel
 * is freed when all are gone. Errors: -EINVAL (out NULL, capacity 0 or
 * above 2^31), -ENOMEM. */
int rt_chan_new(size_t capacity, rt_chan **out);

/* One more sender reference (to hand to another task or thread). Errors:
 * -EINVAL (ch NULL). The caller must hold a sender reference already. */
int rt_chan_sender_clone(rt_chan *ch);

/* Gives back one sender reference. After the last one, the receiver sees
 * -EPIPE once the buffer is drained. NULL is a no-op. */
void rt_chan_sender_drop(rt_chan *ch);

/* One more receiver reference (to hand to another task or thread that
 * receives too). Errors: -EINVAL (ch NULL). The caller must hold a receiver
 * reference already. */
int rt_chan_receiver_clone(rt_chan *ch);

/* Receiver side (any holder of a receiver reference): refuses further sends
 * (waiting and later senders get -EPIPE, keeping their values); values
 * already buffered can still be received, after which receives return
 * -EPIPE. Idempotent; NULL is a no-op. */
void rt_chan_close(rt_chan *ch);

/* Gives back one receiver reference (after dropping the caller's receive
 * operations on ch). The last one closes the channel, then passes every
 * value still buffered to dispose(value, arg) on the calling thread, oldest
 * first (dispose NULL: they are just forgotten, which leaks them if they own
 * memory); the others ignore dispose. ch NULL is a no-op. */
void rt_chan_receiver_drop(rt_chan *ch, void (*dispose)(void *value, void *arg), void *arg);

/* Values buffered right now (a snapshot), and the capacity (0 for NULL). */
size_t rt_chan_len(rt_chan *ch);
size_t rt_chan_capacity(const rt_chan *ch);

/* Sends without waiting: 0 (buffered), -EAGAIN (full, or senders already
 * wait: a try never overtakes them), -EPIPE (closed), -EINVAL (ch NULL). */
int rt_chan_try_send(rt_chan *ch, void *value);

/* Receives without waiting: 0 (*value written), -EAGAIN (empty, or every
 * buffered value is promised to a waiting receive that was woken for it: a
 * try never overtakes them), -EPIPE (empty and every sender is gone, or
 * closed and drained), -EINVAL (ch NULL). value may be NULL (a value taken
 * is then not handed back). */
int rt_chan_try_recv(rt_chan *ch, void **value);

/* One receive. Fields are private. */
typedef struct rt_chan_recv {
    rt_chan *ch;      /* NULL: not initialised, or finished */
    rt_waitnode node; /* place among the waiting receivers, and the state */
} rt_chan_recv;

/* Prepares to receive from ch (the caller holds a receiver reference for
 * as long as the operation lives). Errors: -EINVAL (op or ch NULL). */
int rt_chan_recv_init(rt_chan_recv *op, rt_chan *ch);

/* RT_READY with *status 0 and the oldest value free for this receiver in
 * *value, or *status -EPIPE (end of stream: *value NULL); else RT_PENDING,
 * queued behind the receivers already waiting (waker stored). A poll after
 * the one that returned RT_READY returns RT_READY with -EALREADY. value and
 * status may be NULL. op or cx NULL: RT_READY with *value NULL and *status
 * -EINVAL; op is left as it was (rt_chan_recv_drop settles it). */
rt_poll rt_chan_recv_poll(rt_chan_recv *op, rt_context *cx, void **value, int *status);

/* Abandons the receive: a waiting one leaves the queue; one that had been
 * woken for a value passes the wake to the next waiting receiver (the value
 * stays in the channel). Nothing to do after RT_READY or a second call, on
 * a zeroed operation, and for NULL. */
void rt_chan_recv_drop(rt_chan_recv *op);

/* Blocks the calling thread to receive (it holds a receiver reference).
 * Errors: -EPIPE, -ETIMEDOUT (timeout_ns passed; < 0: no limit), -EDEADLK (a
 * worker thread), -ENOMEM, -EINVAL (ch NULL). value may be NULL, as for
 * rt_chan_try_recv. */
int rt_chan_recv_blocking(rt_chan *ch, int64_t timeout_ns, void **value);

/* One send that may wait for room. Fields are private. */
typedef struct rt_chan_send {
    rt_chan *ch;      /* NULL: not initialised, or finished */
    void *value;      /* what is sent */
    rt_waitnode node; /* place among the waiting senders, and the state */
} rt_chan_send;

/* Prepares to send `value` on ch (the caller holds a sender reference for
 * as long as the operation lives). Errors: -EINVAL (op or ch NULL). */
int rt_chan_send_init(rt_chan_send *op, rt_chan *ch, void *value);

/* RT_READY with *status 0 once the value is in the channel (it then belongs
 * to the receiver side), or with *status -EPIPE when the channel is closed
 * (the value is still the caller's); else RT_PENDING (waker stored). A poll
 * after the one that returned RT_READY returns RT_READY with -EALREADY.
 * status may be NULL. op or cx NULL: RT_READY with *status -EINVAL; op is
 * left as it was (rt_chan_send_drop settles it). */
rt_poll rt_chan_send_poll(rt_chan_send *op, rt_context *cx, int *status);

/* Abandons the send. Returns 0 when the value was not sent (a waiting send
 * leaves the queue; the value is still the caller's), or 1 when a receive
 * had already moved it into the channel before the drop (it then belongs to
 * the receiver side, as after RT_READY). Nothing to do, and 0, after
 * RT_READY or a second call, and for NULL. */
int rt_chan_send_drop(rt_chan_send *op);

/* Blocks the calling thread until the value is buffered. Errors: -EPIPE,
 * -ETIMEDOUT (the value was not sent), -EDEADLK (a worker thread), -ENOMEM,
 * -EINVAL (ch NULL). */
int rt_chan_send_blocking(rt_chan *ch, void *value, int64_t timeout_ns);

#ifdef __cplusplus
}
#endif
#endif
