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
 * Errors from system calls are passed through unchanged. */
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
