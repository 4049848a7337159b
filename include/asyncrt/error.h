/* asyncrt: errors.
 *
 * Every fallible public function returns 0 (or a count) on success and a
 * negative errno value on failure. The values asyncrt itself produces, each
 * with one meaning everywhere (docs/guide.md, "Errors", has the table of
 * every errno by kind of call):
 *   -EINVAL     a bad argument, or a reference used after its release;
 *   -ENOMEM     an allocation failed; nothing was done, the runtime stays
 *               usable, and trying again later may succeed;
 *   -EAGAIN     not now: a try form that would have to wait (an empty or
 *               full channel, no permit), or no thread could be created;
 *               nothing was done;
 *   -EBUSY      in use: a mutex held (rt_mutex_try_lock), or a second
 *               operation where one at a time is allowed;
 *   -ESHUTDOWN  the runtime is shutting down or shut down;
 *   -ECANCELED  cancelled: a task aborted or cancelled by shutdown, or an
 *               operation dropped (by its owner, a select that another arm
 *               won, or a timeout);
 *   -ETIMEDOUT  a time limit passed;
 *   -EDEADLK    a blocking call was made from a worker thread, where it
 *               would deadlock.
 * Errors from system calls are passed through unchanged. Where a call
 * could end in two ways a caller must tell apart, they have two errnos
 * (an accept's -ENOMEM leaves the connection queued; its -ENOBUFS means
 * the connection was taken and closed again).
 *
 * NULL arguments. Pointers a comment calls optional ("may be NULL", "NULL
 * means ...") are never an error. For any other pointer argument of a public
 * function, one rule applies, and each function's comment says its case:
 * - A function that releases, drops, closes, cancels, wakes or
 *   notifies the object it is given does nothing with NULL (and returns 0
 *   when it returns a value, as rt_io_close and rt_runtime_free do).
 * - Any other function that reports errors returns -EINVAL. An operation's
 *   init function that refuses an argument also leaves the operation (when
 *   it is not NULL) finished with -EINVAL as its result, so awaiting it
 *   reports the error. rt_future_poll of a NULL operation returns RT_READY;
 *   of a zeroed one, or with a NULL context, RT_READY with result -EINVAL
 *   and nothing else done (see future.h).
 * - Any other function gives a fixed, documented answer for NULL (0, false,
 *   NULL, -EBADF, the no-op waker, RT_READY...), or its comment says that
 *   the argument must not be NULL. */
#ifndef ASYNCRT_ERROR_H
#define ASYNCRT_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

/* A static, human-readable description of `err` (negative or positive errno;
 * 0 is "success"): plain words true of every call that returns it, the
 * system's own for the errnos asyncrt passes through. Never NULL; any
 * thread. */
const char *rt_strerror(int err);

#ifdef __cplusplus
}
#endif
#endif
