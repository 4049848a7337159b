/* asyncrt: channels between tasks and threads.
 * Two kinds:
 * - rt_oneshot: exactly one `void *` value, sent once, from one sender to one
 *   receiver;
 * - rt_chan: a bounded multi-producer, multi-consumer queue of values of one
 *   size chosen at creation: `void *` values (rt_chan_new), or structs or
 *   other plain bytes copied in and out (rt_chan_new_sized), so a struct is
 *   sent without a malloc.
 * The runtime never looks at, frees or follows a value (the memory a pointer
 * value points to is the business of whoever holds it). A send waits
 *   while the buffer is full (backpressure); waiting senders are served in
 *   FIFO order, and the values arrive in the order the sends completed.
 *   Several receivers (tasks or threads, each with a receiver reference)
 *   may receive at once: each value goes to exactly one of them, waiting
 *   receivers are served in FIFO order, and the end of the stream reaches
 *   all of them.
 *
 * Both are heap objects shared by their two sides and freed when both sides
 * have let go. A side released more times than it was taken (a second
 * rt_chan_sender_drop of the one sender, say) is reported as misuse (diag.h,
 * RT_REPORT_MISUSE) and changes nothing, as long as the other side keeps the
 * object allocated: the receivers still see the end of the stream. Once both
 * sides are gone the memory is freed, and a further release is a use after
 * free (AddressSanitizer reports it). Sends and receives that wait are
 * operations (see future.h). Every function may be called from any thread:
 * the operations from tasks (or from threads polling by hand), the try forms
 * from anywhere, the *_wait forms from threads that are not workers
 * (-EDEADLK there).
 *
 * End of stream and closing (errno values):
 * - -EPIPE to a sender: the receiver is gone or closed the channel; the value
 *   was not sent and is still the caller's.
 * - -EPIPE to a receiver: every sender is gone and nothing is left buffered.
 *
 * Abort safety: a receive takes a value only in the poll that finishes it,
 * so a dropped receive loses no message; a receive woken for a value and
 * dropped before its next poll passes the wake to the next waiting receiver,
 * so the value is not left behind while others wait. A send dropped while it
 * waits leaves the queue and its value stays the caller's (it was not sent,
 * and its result is -ECANCELED); once it finished the value belongs to the
 * channel. A send that a receiver took just before the drop reports result 0
 * after the drop: it was sent.
 * Never polled: a send or receive joins a queue or stores a waker only
 * from its first poll, so one initialised and never polled holds nothing
 * (a send's value is still the caller's) and needs no drop; dropping it or
 * initialising it again is safe. A drop locks the channel, so it comes
 * before the caller releases its side.
 * A successful send or receive spends one unit of the cooperative budget
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
 * NULL; or the sending side was released already: reported as misuse, the
 * value stays the caller's). Never waits. */
int rt_oneshot_send(rt_oneshot *o, void *value);

/* Releases the sending side without sending: the receiver gets -EPIPE. A
 * side released already is misuse: reported, nothing changes. NULL is a
 * no-op. */
void rt_oneshot_sender_drop(rt_oneshot *o);

/* The receive: an operation (see future.h) that finishes with result 0 and
 * the value in `value`, or -EPIPE when the sender was dropped without
 * sending. The value is handed out once: a receive after it was taken
 * finishes with -EALREADY. One receive waits at a time: while one does,
 * another finishes with -EBUSY. Dropped while waiting, it gives its waker
 * back (the value, if one comes, stays in the oneshot). `value` is NULL
 * unless result is 0. */
typedef struct rt_oneshot_recv {
    RT_FUTURE_HEADER;
    rt_oneshot *o; /* NULL once finished or dropped */
    void *value;   /* the value received */
} rt_oneshot_recv;

/* Prepares to receive from o (the caller holds the receiving side for as
 * long as the operation lives). Errors: -EINVAL (op or o NULL). */
int rt_oneshot_recv_init(rt_oneshot_recv *op, rt_oneshot *o);

/* The non-waiting form: 0 (value taken), -EAGAIN (nothing yet), -EPIPE (the
 * sender is gone without sending), -EALREADY (already received), -EINVAL (o
 * NULL). value may be NULL (a value taken is then not handed back). */
int rt_oneshot_try_recv(rt_oneshot *o, void **value);

/* Blocks the calling thread until a value or -EPIPE comes, or timeout_ns
 * passes (< 0: no limit; -ETIMEDOUT). Also -EDEADLK (a worker thread, a
 * fiber too: await rt_oneshot_recv_init's operation there),
 * -EALREADY, -EBUSY (another receive waits), -ENOMEM, -EINVAL (o NULL).
 * value may be NULL, as for rt_oneshot_try_recv. */
int rt_oneshot_recv_wait(rt_oneshot *o, int64_t timeout_ns, void **value);

/* Releases the receiving side (after dropping its receive operation). If a
 * value was sent but never received, it is written to *unreceived (may be
 * NULL: then it is simply not handed back) and 1 is returned; else
 * *unreceived gets NULL and 0 is returned. A sender sending afterwards gets
 * -EPIPE. A receiving side released already is misuse: reported, 0 is
 * returned and nothing changes. o NULL: a no-op returning 0. */
int rt_oneshot_receiver_drop(rt_oneshot *o, void **unreceived);

/* ---- Bounded multi-producer channel ---------------------------------------*/

typedef struct rt_chan rt_chan;

/* Creates a channel buffering up to `capacity` `void *` values (>= 1). The
 * plain forms below (rt_chan_send_init, rt_chan_try_send,
 * rt_chan_send_wait, rt_chan_recv_init and its `value`, rt_chan_try_recv,
 * rt_chan_recv_wait) carry `void *` values, on a channel made here ("a
 * channel of `void *`" below); on one made by rt_chan_new_sized they fail
 * with -EINVAL (whatever its value size), and the _copy / _into forms work on
 * both. The caller holds one sender reference and one receiver reference.
 * Both sides are counted: rt_chan_sender_clone and rt_chan_receiver_clone add
 * one, rt_chan_sender_drop and rt_chan_receiver_drop give one back. The
 * channel is freed when all are gone. Errors: -EINVAL (out NULL, capacity 0
 * or above 2^31), -ENOMEM. */
int rt_chan_new(size_t capacity, rt_chan **out);

/* Largest value size of a channel. */
#define RT_CHAN_VALUE_MAX 4096

/* Creates a channel buffering up to `capacity` values of `value_size` bytes
 * each (1 <= value_size <= RT_CHAN_VALUE_MAX), copied in by the *_copy forms
 * and out by the *_into forms. References and errors as rt_chan_new (also
 * -EINVAL for value_size out of range). */
int rt_chan_new_sized(size_t capacity, size_t value_size, rt_chan **out);

/* The size of the channel's values (0 for NULL). */
size_t rt_chan_value_size(const rt_chan *ch);

/* One more sender reference (to hand to another task or thread). Errors:
 * -EINVAL (ch NULL; or no sender reference is left, since the last one was
 * released: reported as misuse, nothing changes). The caller must hold a
 * sender reference already. */
int rt_chan_sender_clone(rt_chan *ch);

/* Gives back one sender reference. After the last one, the receiver sees
 * -EPIPE once the buffer is drained. With none left, it is misuse: reported,
 * and nothing changes. NULL is a no-op. */
void rt_chan_sender_drop(rt_chan *ch);

/* One more receiver reference (to hand to another task or thread that
 * receives too). Errors: -EINVAL (ch NULL; or none is left: reported as
 * misuse). The caller must hold a receiver reference already. */
int rt_chan_receiver_clone(rt_chan *ch);

/* Receiver side (any holder of a receiver reference): refuses further sends
 * (waiting and later senders get -EPIPE, keeping their values); values
 * already buffered can still be received, after which receives return
 * -EPIPE. Idempotent; NULL is a no-op. */
void rt_chan_close(rt_chan *ch);

/* Gives back one receiver reference (after dropping the caller's receive
 * operations on ch); with none left, it is misuse: reported, nothing
 * changes. The last one closes the channel, then passes every
 * value still buffered to dispose(value, arg) on the calling thread, oldest
 * first (dispose NULL: they are just forgotten, which leaks them if they own
 * memory); the others ignore dispose. dispose gets the value itself from a
 * channel of `void *`, and a pointer to the value's bytes (valid
 * during the call) from any other. ch NULL is a no-op. */
void rt_chan_receiver_drop(rt_chan *ch, void (*dispose)(void *value, void *arg), void *arg);

/* Values buffered right now (a snapshot), and the capacity (0 for NULL). */
size_t rt_chan_len(rt_chan *ch);
size_t rt_chan_capacity(const rt_chan *ch);

/* Sends without waiting: 0 (buffered), -EAGAIN (full, or senders already
 * wait: a try never overtakes them), -EPIPE (closed), -EINVAL (ch NULL, or
 * not a channel of `void *`). */
int rt_chan_try_send(rt_chan *ch, void *value);

/* rt_chan_try_send of the value_size bytes at src, copied in (any channel).
 * Errors as rt_chan_try_send; -EINVAL also for src NULL. */
int rt_chan_try_send_copy(rt_chan *ch, const void *src);

/* Receives without waiting: 0 (*value written), -EAGAIN (empty, or every
 * buffered value is promised to a waiting receive that was woken for it: a
 * try never overtakes them), -EPIPE (empty and every sender is gone, or
 * closed and drained), -EINVAL (ch NULL). value may be NULL (a value taken
 * is then not handed back). -EINVAL also for a channel that is not
 * a channel of `void *`. */
int rt_chan_try_recv(rt_chan *ch, void **value);

/* rt_chan_try_recv that copies the value's value_size bytes to dst (any
 * channel; dst NULL: the value is not handed back). Errors as
 * rt_chan_try_recv. */
int rt_chan_try_recv_into(rt_chan *ch, void *dst);

/* One receive: an operation (see future.h) that finishes with result 0 and
 * the oldest value free for this receiver in `value`, or with -EPIPE (end
 * of stream: `value` NULL). While it waits it is queued behind the
 * receivers already waiting. Dropped while waiting, it leaves the queue;
 * one that had been woken for a value passes the wake to the next waiting
 * receiver (the value stays in the channel). */
typedef struct rt_chan_recv {
    RT_FUTURE_HEADER;
    rt_chan *ch;      /* NULL once finished or dropped */
    void *value;      /* the value received (a channel of `void *`) */
    void *dst;        /* where the value's bytes go; NULL: `value` */
    rt_waitnode node; /* place among the waiting receivers, and the state */
} rt_chan_recv;

/* Prepares to receive a `void *` value from ch into `value` (the caller
 * holds a receiver reference for as long as the operation lives). Errors:
 * -EINVAL (op or ch NULL, or not a channel of `void *`). */
int rt_chan_recv_init(rt_chan_recv *op, rt_chan *ch);

/* Prepares to receive a value of any channel, its value_size bytes copied to
 * dst when the receive finishes (dst stays the caller's and must stay valid
 * until then; nothing is written to it otherwise). Errors: -EINVAL (op, ch
 * or dst NULL). */
int rt_chan_recv_into_init(rt_chan_recv *op, rt_chan *ch, void *dst);

/* Blocks the calling thread to receive (it holds a receiver reference).
 * Errors: -EPIPE, -ETIMEDOUT (timeout_ns passed; < 0: no limit), -EDEADLK (a
 * worker thread, a fiber too: rt_chan_recv_await there), -ENOMEM, -EINVAL (ch
 * NULL, or not a channel of `void *`).
 * value may be NULL, as for rt_chan_try_recv. */
int rt_chan_recv_wait(rt_chan *ch, int64_t timeout_ns, void **value);

/* rt_chan_recv_wait that copies the value's bytes to dst (any channel;
 * dst NULL: not handed back). Errors as rt_chan_recv_wait. */
int rt_chan_recv_into_wait(rt_chan *ch, int64_t timeout_ns, void *dst);

/* One send that may wait for room: an operation (see future.h) that
 * finishes with result 0 once the value is in the channel (it then belongs
 * to the receiver side), or with -EPIPE when the channel is closed (the
 * value is still the caller's). Dropped while waiting, it leaves the queue
 * and its result is -ECANCELED (the value is still the caller's), or 0 when
 * a receive had already moved the value into the channel before the drop
 * (it was sent, as if it had finished). */
typedef struct rt_chan_send {
    RT_FUTURE_HEADER;
    rt_chan *ch;      /* NULL once finished or dropped */
    void *value;      /* what is sent (a channel of `void *`) */
    const void *src;  /* the bytes sent; NULL: `value` */
    rt_waitnode node; /* place among the waiting senders, and the state */
} rt_chan_send;

/* Prepares to send the `void *` value on ch (the caller holds a sender
 * reference for as long as the operation lives). Errors: -EINVAL (op or ch
 * NULL, or not a channel of `void *`). */
int rt_chan_send_init(rt_chan_send *op, rt_chan *ch, void *value);

/* Prepares to send the value_size bytes at src on any channel, copied in
 * when the send finishes (src stays the caller's and must stay valid and
 * unchanged until the operation finishes or is dropped). Errors: -EINVAL
 * (op, ch or src NULL). */
int rt_chan_send_copy_init(rt_chan_send *op, rt_chan *ch, const void *src);

/* Blocks the calling thread until the value is buffered. Errors: -EPIPE,
 * -ETIMEDOUT (the value was not sent), -EDEADLK (a worker thread, a fiber
 * too: rt_chan_send_await there), -ENOMEM,
 * -EINVAL (ch NULL, or not a channel of `void *`). */
int rt_chan_send_wait(rt_chan *ch, void *value, int64_t timeout_ns);

/* rt_chan_send_wait of the value_size bytes at src (any channel).
 * Errors as rt_chan_send_wait; -EINVAL also for src NULL. */
int rt_chan_send_copy_wait(rt_chan *ch, const void *src, int64_t timeout_ns);

#ifdef __cplusplus
}
#endif
#endif
