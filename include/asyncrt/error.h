/* asyncrt: errors.
 *
 * Every fallible public function returns 0 (or a count) on success and a
 * negative errno value on failure. The values asyncrt itself produces:
 *   -EINVAL     a bad argument;
 *   -ENOMEM     an allocation failed (the runtime stays usable);
 *   -EAGAIN     a thread could not be created;
 *   -ESHUTDOWN  the runtime is shutting down or shut down;
 *   -ECANCELED  the task was aborted or cancelled by shutdown;
 *   -ETIMEDOUT  a deadline passed;
 *   -EDEADLK    a blocking call was made from a worker thread.
 * Errors from system calls are passed through unchanged.
 *
 * NULL arguments. Pointers a comment calls optional ("may be NULL", "NULL
 * means ...") are never an error. For any other pointer argument of a public
 * function, one rule applies, and each function's comment says its case:
 * - A function that releases, drops, closes, cancels, detaches, wakes or
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
 * 0 is "success"). Says what the error means for asyncrt where that differs
 * from the system's wording. Never NULL; any thread. */
const char *rt_strerror(int err);

#ifdef __cplusplus
}
#endif
#endif
