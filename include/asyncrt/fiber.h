/* asyncrt: fibers, tasks that run sequential C on a stack of their own.
 *
 * A fiber is a task whose body is an ordinary function: it keeps its locals
 * across waits, and waits with one call, rt_fiber_await, on any operation of the
 * library (anything that begins with RT_FUTURE_HEADER). Awaiting an
 * operation that is not ready switches the fiber out; its task's poll
 * returns RT_PENDING, and the next poll, on whichever worker runs it,
 * switches it back in where it left off. To the scheduler, the reactor,
 * groups and the task dump a fiber is a task like any other: it is
 * spawned, woken, stolen, joined, waited for and cancelled through the
 * same rt_task handle (task.h), and it joins stackless tasks and is
 * joined by them, on both sides of one channel or one mutex.
 *
 *     static void *echo(void *arg)
 *     {
 *         rt_io *conn = arg;
 *         char buf[4096];
 *         for (;;) {
 *             int64_t n = rt_io_read_await(conn, buf, sizeof buf);
 *             if (n <= 0 || rt_io_write_all_await(conn, buf, (size_t)n) < 0)
 *                 break;
 *         }
 *         rt_io_close(conn);
 *         return NULL;
 *     }
 *     ...
 *     rt_fiber_spawn(rt, echo, conn, NULL);
 *
 * Stacks. Each fiber runs on a stack of rt_fiber_options.stack_size bytes
 * (0: rt_config.fiber_stack_size, 256 KiB by default), mapped when it
 * first runs, committed page by page as it is touched, and pooled after the
 * fiber returns. A stack never grows and never moves, so operations and
 * buffers may live in the fiber's locals. An overflow into the guard page
 * below a stack ends the process (SIGSEGV) with a message naming the fiber
 * and its spawn site (for that the library installs a SIGSEGV handler the
 * first time a thread runs a fiber, passing every other fault on to the
 * handler installed before it, and gives that thread an alternate signal
 * stack unless it has one; sanitizer builds leave overflows to the
 * sanitizer's own report);
 * beyond 16,384 guarded stacks alive at once (each costs two of the
 * process's vm.max_map_count mappings) stacks come without a guard page and
 * a canary at their bottom is checked at every switch, which catches an
 * overflow later and not always, and then ends the process (abort) with
 * the same message. Build fiber code with
 * -fstack-clash-protection when a frame can be larger than a page.
 *
 * Migration. A fiber may resume on another worker thread after any await.
 * Nothing tied to the thread may be kept across an await: errno (glibc
 * declares __errno_location const, so the compiler may reuse the first
 * thread's errno address after the switch), thread-local variables,
 * pthread_self(), a pthread mutex or spinlock held across the await (it
 * would be unlocked by another thread), a changed signal mask, and on
 * x86-64 a changed SSE rounding or flush-to-zero mode (MXCSR, fesetround
 * and friends: the switch keeps it per thread, so restore it before an
 * await; the x87 control word and AArch64's FPCR are kept per fiber). Every
 * function here returns -errno values, so no fiber needs errno. Spawn with
 * rt_fiber_options.worker to keep a fiber on one worker.
 *
 * What blocks a thread. rt_task_wait, rt_block_on, rt_fiber_block_on and
 * every _wait function fail with -EDEADLK inside a fiber, as on any worker
 * (each says so in its header): await the operation instead (an
 * rt_task_join for rt_task_wait, the operation behind the _wait form, or
 * its _await helper below). A plain blocking function (a library call that
 * sleeps, a slow computation) runs on the blocking pool with
 * rt_fiber_run_blocking; rt_fiber_yield lets other tasks run in a long
 * loop; fiber-local storage replaces thread-locals.
 *
 * Where a fiber starts. rt_fiber_spawn from any thread or task (a join
 * handle, or detached); rt_fiber_options.group spawns it into a group
 * (group.h), whose next, join, close and cancel treat it as any child;
 * rt_fiber_block_on runs one from a plain thread (a program's main) and
 * waits for it.
 *
 * Cancellation. rt_task_cancel, a group's cancel and rt_runtime_shutdown
 * cancel a fiber the same way: the fiber is resumed (on the thread that
 * drops the task: a worker, or shutdown's caller), the await in progress
 * drops its operation, which loses nothing (each header says what a drop
 * undoes) and returns -ECANCELED, and so does every later await, at once.
 * The fiber returns normally (its result is discarded: the joiner sees
 * -ECANCELED and NULL, as for any cancelled task) and its stack is pooled
 * after. A fiber that is cancelled before it first runs still runs, and
 * its first await returns -ECANCELED, so that it always gets to release
 * its argument. A fiber that is running when rt_runtime_shutdown begins
 * finishes that poll first: an operation it starts meanwhile may refuse
 * with -ESHUTDOWN (a sleep, a time limit) before the cancel reaches it, so
 * treat -ESHUTDOWN as -ECANCELED. Cleanup that must still do I/O (a goodbye line, a flush)
 * runs between rt_fiber_shield and rt_fiber_unshield: until the shield's
 * deadline awaits work again, blocking the thread that runs the cleanup
 * (a worker, or shutdown's caller) while they wait. At shutdown every
 * fiber gets until rt_config.fiber_shutdown_ns after the shutdown began;
 * a fiber that awaits after that is abandoned there: it never runs again,
 * its stack stays mapped (so that nothing pointing into it dangles) and
 * whatever its locals hold is leaked; rt_metrics.fibers_abandoned counts
 * them. A fiber that never awaits never gives its worker back: the stall
 * watchdog (rt_config.stall_ns) reports it.
 *
 * Seeing fibers. A task dump (rt_runtime_dump, diag.h) shows every waiting
 * fiber as a coroutine is shown, at the file:line and function of its
 * await (each call below that may wait is a macro that passes them), with
 * what it waits for, its stack (size; how deep it was at its deepest
 * switch, a lower bound; how far down its pages were ever touched, an upper
 * bound) and a backtrace from the await up, fibers with identical stacks
 * grouped into one block as in Go's goroutine dump. The backtrace follows
 * frame pointers, so build fiber code with -fno-omit-frame-pointer (the
 * walk stays inside the fiber's stack: code without them only cuts the
 * list short or makes it wrong); frames are named from the dynamic symbol
 * table (link programs with -rdynamic to name their own functions), and
 * each also shows object+offset for `addr2line -f -e OBJECT OFFSET`.
 * rt_metrics.fiber_stack_deepest keeps the deepest stack a finished fiber
 * used. In gdb, scripts/gdb/asyncrt.py adds `asyncrt fibers RUNTIME`, which
 * lists every fiber with its backtrace from its saved registers, in a
 * running program or a core file (docs/debugging.md). */
#ifndef ASYNCRT_FIBER_H
#define ASYNCRT_FIBER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "bufio.h"
#include "channel.h"
#include "future.h"
#include "group.h"
#include "io.h"
#include "sync.h"
#include "task.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A fiber's body: returns its result (what a join reports as its value). */
typedef void *(*rt_fiber_fn)(void *arg);

/* How rt_fiber_spawn_ex spawns. Fill with rt_fiber_options_init, then
 * change fields; fields are only ever added at the end. */
typedef struct rt_fiber_options {
    /* A name for diagnostics, copied at spawn (as rt_spawn_options.name). */
    const char *name;
    /* RT_WORKER_ANY (the default), RT_WORKER_CURRENT or a worker index: a
     * fiber given a worker never migrates (rt_spawn_options.worker). */
    int worker;
    /* Usable stack bytes, rounded up to pages; 0: rt_config.fiber_stack_size. */
    size_t stack_size;
    /* Called with arg when the fiber will never run because its stack
     * cannot be mapped (it then finishes with -ENOMEM), so that an argument
     * the fiber would have owned is not leaked (a connection, a channel
     * side); on the worker that found it out, or shutdown's caller. NULL:
     * nothing is called. */
    void (*release)(void *arg);
    /* NULL, or a group (group.h) to spawn the fiber into, as rt_group_spawn
     * does: the group holds its handle (pass handle NULL) and its result
     * comes out of rt_group_next; a group cancel cancels it. It runs on the
     * group's runtime (pass rt NULL or that runtime). */
    rt_group *group;
} rt_fiber_options;

/* The defaults: no name, any worker, the runtime's stack size, no release
 * function, no group. */
void rt_fiber_options_init(rt_fiber_options *opts);

/* Spawns a fiber running fn(arg) on runtime rt (NULL: the current one,
 * valid only inside a task; in a fiber, the fiber's own), with the options (NULL: the defaults).
 * handle as for rt_spawn (task.h): a join handle the caller owns, or NULL for a detached fiber. arg
 * is the caller's business: the fiber always runs (see "Cancellation" above), so it may own arg and
 * release it. Errors: those of rt_spawn_ex (-EINVAL, -ENOMEM, -ESHUTDOWN), -EINVAL for a group
 * with a handle or another runtime, -EPIPE (the group is closing); the stack is mapped when
 * the fiber first runs, and a fiber whose stack cannot be mapped finishes at once with status
 * -ENOMEM without running (arg then goes to opts->release, if given). Any thread. */
#define rt_fiber_spawn(rt, fn, arg, handle)                                                        \
    rt_fiber_spawn_with_site(RT__HERE, (rt), NULL, (fn), (arg), (handle))
#define rt_fiber_spawn_ex(rt, opts, fn, arg, handle)                                               \
    rt_fiber_spawn_with_site(RT__HERE, (rt), (opts), (fn), (arg), (handle))
int rt_fiber_spawn_with_site(const char *site, rt_runtime *rt, const rt_fiber_options *opts,
                             rt_fiber_fn fn, void *arg, rt_task **handle);

/* Runs fn(arg) as a fiber on rt and blocks the calling thread until it
 * returns: what rt_block_on (runtime.h) is for a future, for a fiber, so
 * that a program's main can be sequential code from the first line.
 * Returns 0 once the fiber ran: *value (may be NULL) holds what it
 * returned and *status (may be NULL) its status (0, what it set with
 * rt_fiber_set_status, -ECANCELED when shutdown cancelled it, or -ENOMEM
 * when its stack could not be mapped and it never ran). Errors, and then
 * no fiber was spawned: -EINVAL (rt or fn NULL, opts with a group),
 * -ENOMEM, -ESHUTDOWN, -EDEADLK (called from a worker thread or a fiber,
 * where blocking could deadlock the runtime, or from a drop function run
 * by rt_runtime_shutdown). Any thread that is not a worker. */
#define rt_fiber_block_on(rt, opts, fn, arg, value, status)                                        \
    rt_fiber_block_on_with_site(RT__HERE, (rt), (opts), (fn), (arg), (value), (status))
int rt_fiber_block_on_with_site(const char *site, rt_runtime *rt, const rt_fiber_options *opts,
                                rt_fiber_fn fn, void *arg, void **value, int *status);

/* ---- Fiber-local storage -----------------------------------------------------
 *
 * What a thread-local variable is to a thread, for a fiber: a value per
 * fiber and key that follows the fiber from worker to worker (a __thread
 * variable does not: after an await it is another thread's). Keys are
 * process-wide, at most RT_FIBER_KEYS_MAX of them, and are never freed
 * (make them once, as statics). */

#define RT_FIBER_KEYS_MAX 64

typedef struct rt_fiber_key {
    unsigned index; /* 0 until rt_fiber_key_init; the library's business */
} rt_fiber_key;

/* Makes a new key into *key. destructor (may be NULL) is called with a
 * fiber's value when the fiber returns with a value other than NULL set
 * for the key, in the fiber, after its function returned (also after a
 * cancel; not for a fiber that shutdown abandons, whose values are
 * leaked); a destructor that sets values again is called again, up to four
 * rounds. Errors: -EINVAL (key NULL), -EAGAIN (RT_FIBER_KEYS_MAX keys exist
 * already). Any thread. */
int rt_fiber_key_init(rt_fiber_key *key, void (*destructor)(void *value));

/* Sets the calling fiber's value for key (NULL clears it). The fiber owns
 * what value points to as far as the library is concerned: it is only
 * handed to the destructor. Errors: -EPERM (not in a fiber), -EINVAL (key
 * NULL or not made by rt_fiber_key_init), -ENOMEM (the fiber's first value,
 * or the first for a key beyond its table, needs memory). */
int rt_fiber_local_set(const rt_fiber_key *key, void *value);

/* The calling fiber's value for key: NULL when none was set, outside a
 * fiber, or for a key not made by rt_fiber_key_init. */
void *rt_fiber_local_get(const rt_fiber_key *key);

/* ---- Await sites -----------------------------------------------------------
 *
 * Every call below that may suspend the fiber is a macro that passes where
 * it is expanded (file, line, function) to a function named *_with_site,
 * so that a task dump (diag.h) says, for every waiting fiber, where it
 * waits, as it does for a coroutine's RT_AWAIT. The strings must have
 * static storage; code that cannot expand C macros calls the _with_site
 * function with a site of its own, or NULL and 0. */
#define RT__AWAIT_HERE __FILE__, __LINE__, __func__

/* Awaits an operation from inside a fiber: polls it, suspending the fiber
 * while it is pending, and returns its result once it finishes (the
 * operation's own fields hold its value, as after RT_AWAIT). After a
 * cancel, the operation is dropped and -ECANCELED returned (see above).
 * op must stay where it is until this returns (a local of the fiber is
 * the usual place). Errors: -EPERM (not called from a fiber: nothing is
 * done to op), -EINVAL (op NULL), -ECANCELED. From a fiber only. */
#define rt_fiber_await(op) rt_fiber_await_with_site(RT__AWAIT_HERE, (op))
int64_t rt_fiber_await_with_site(const char *file, int line, const char *function, rt_future *op);

/* rt_fiber_await with a time limit (Go's deadlines): op is wrapped in an
 * rt_timeout (combine.h) ending timeout_ns from now, or at deadline_ns on
 * rt_now_ns()'s clock, and awaited. Returns op's result when it finished
 * first, or -ETIMEDOUT (op was dropped: losing what its header says a
 * drop loses, usually nothing), or the timer's -ENOMEM / -ESHUTDOWN, or
 * -ECANCELED. One deadline across several awaits is
 * rt_fiber_await_until with the same deadline_ns. Errors also -EPERM (not
 * in a fiber) and -EINVAL (op NULL; with no runtime, op is dropped). */
#define rt_fiber_await_timeout(op, timeout_ns)                                                     \
    rt_fiber_await_timeout_with_site(RT__AWAIT_HERE, (op), (timeout_ns))
#define rt_fiber_await_until(op, deadline_ns)                                                      \
    rt_fiber_await_until_with_site(RT__AWAIT_HERE, (op), (deadline_ns))
int64_t rt_fiber_await_timeout_with_site(const char *file, int line, const char *function,
                                         rt_future *op, int64_t timeout_ns);
int64_t rt_fiber_await_until_with_site(const char *file, int line, const char *function,
                                       rt_future *op, int64_t deadline_ns);

/* True when the calling code runs in a fiber. Any thread. */
bool rt_in_fiber(void);

/* True once the calling fiber has been cancelled (false outside a fiber). */
bool rt_fiber_cancelled(void);

/* Sets the status the calling fiber finishes with (0 or a negative errno;
 * "Results and status" in task.h); the last call before it returns wins.
 * Errors: -EPERM (not in a fiber), -EINVAL (status > 0). */
int rt_fiber_set_status(int status);

/* Lets the other runnable tasks of this worker run first (rt_yield).
 * Returns 0, -ECANCELED after a cancel, -EPERM outside a fiber. */
#define rt_fiber_yield() rt_fiber_yield_with_site(RT__AWAIT_HERE)
int rt_fiber_yield_with_site(const char *file, int line, const char *function);

/* Begins a shield: until timeout_ns from now (or rt_fiber_unshield) awaits
 * work even after a cancel (see "Cancellation" above). Shields do not nest:
 * a second call moves the deadline. Errors: -EPERM (not in a fiber),
 * -EINVAL (timeout_ns < 0). */
int rt_fiber_shield(int64_t timeout_ns);

/* Ends the shield; after a cancel, awaits fail with -ECANCELED again. */
void rt_fiber_unshield(void);

/* Runs fn(arg) on the runtime's blocking pool (rt_spawn_blocking) and
 * awaits it; its result goes to *result (may be NULL). arg may point into
 * the fiber's locals: a cancel does not end the wait early. A cancelled
 * fiber waits for the job (blocking the thread that runs the cancel, as a
 * shield does) and then gets -ECANCELED, the job's result discarded; if
 * shutdown's deadline (rt_config.fiber_shutdown_ns) comes first, the fiber
 * is abandoned there, its stack left mapped for the job. Returns 0, or the
 * errors of rt_spawn_blocking and rt_fiber_await. From a fiber only. */
#define rt_fiber_run_blocking(fn, arg, result)                                                     \
    rt_fiber_run_blocking_with_site(RT__AWAIT_HERE, (fn), (arg), (result))
int rt_fiber_run_blocking_with_site(const char *file, int line, const char *function,
                                    void *(*fn)(void *arg), void *arg, void **result);

/* ---- Blocking-style helpers -------------------------------------------------
 *
 * Each is its operation's init and rt_fiber_await, for fibers only; the results
 * are the operation's (a negative errno on failure, -ECANCELED after a
 * cancel, -EPERM outside a fiber). Each is an await-site macro (above). */

/* Sleeps for duration_ns (rt_sleep_init). */
#define rt_sleep_await(duration_ns) rt_sleep_await_with_site(RT__AWAIT_HERE, (duration_ns))
int rt_sleep_await_with_site(const char *file, int line, const char *function, int64_t duration_ns);

/* Sends value on a channel of `void *` (rt_chan_send_init): 0, -EPIPE. */
#define rt_chan_send_await(ch, value) rt_chan_send_await_with_site(RT__AWAIT_HERE, (ch), (value))
int rt_chan_send_await_with_site(const char *file, int line, const char *function, rt_chan *ch,
                                 void *value);

/* Receives from a channel of `void *` into *value (rt_chan_recv_init): 0,
 * or -EPIPE at the end of the stream (*value NULL). */
#define rt_chan_recv_await(ch, value) rt_chan_recv_await_with_site(RT__AWAIT_HERE, (ch), (value))
int rt_chan_recv_await_with_site(const char *file, int line, const char *function, rt_chan *ch,
                                 void **value);

/* Locks m (rt_mutex_lock_init); unlock with rt_mutex_unlock. */
#define rt_mutex_lock_await(m) rt_mutex_lock_await_with_site(RT__AWAIT_HERE, (m))
int rt_mutex_lock_await_with_site(const char *file, int line, const char *function, rt_mutex *m);

/* Reads up to len bytes (rt_io_read_init): the count, 0 at the end. */
#define rt_io_read_await(io, buf, len)                                                             \
    rt_io_read_await_with_site(RT__AWAIT_HERE, (io), (buf), (len))
int64_t rt_io_read_await_with_site(const char *file, int line, const char *function, rt_io *io,
                                   void *buf, size_t len);

/* Writes all len bytes (rt_io_write_all_init): len, or an error. */
#define rt_io_write_all_await(io, buf, len)                                                        \
    rt_io_write_all_await_with_site(RT__AWAIT_HERE, (io), (buf), (len))
int64_t rt_io_write_all_await_with_site(const char *file, int line, const char *function, rt_io *io,
                                        const void *buf, size_t len);

/* Accepts a connection on listener into *conn (rt_tcp_accept_init): 0, or
 * the accept's error (*conn NULL). The caller owns the connection (closed
 * at once when conn is NULL). */
#define rt_tcp_accept_await(listener, conn)                                                        \
    rt_tcp_accept_await_with_site(RT__AWAIT_HERE, (listener), (conn))
int rt_tcp_accept_await_with_site(const char *file, int line, const char *function, rt_io *listener,
                                  rt_io **conn);

/* Connects to addr into *conn (rt_tcp_connect_init, on the fiber's own
 * runtime): 0, or the connect's error (*conn NULL). The caller owns the
 * connection (closed at once when conn is NULL). */
#define rt_tcp_connect_await(addr, addr_len, conn)                                                 \
    rt_tcp_connect_await_with_site(RT__AWAIT_HERE, (addr), (addr_len), (conn))
int rt_tcp_connect_await_with_site(const char *file, int line, const char *function,
                                   const struct sockaddr *addr, socklen_t addr_len, rt_io **conn);

/* Copies from `from` to `to` through buf[0..len) until the end of from's
 * stream (rt_io_copy_init; Go's io.Copy): the bytes copied, or an error.
 * from and to may be the same rt_io (an echo). */
#define rt_io_copy_await(from, to, buf, len)                                                       \
    rt_io_copy_await_with_site(RT__AWAIT_HERE, (from), (to), (buf), (len))
int64_t rt_io_copy_await_with_site(const char *file, int line, const char *function, rt_io *from,
                                   rt_io *to, void *buf, size_t len);

/* A server's accept loop: accepts connections on listener until the
 * calling fiber is cancelled, and runs handler(conn) in a fiber of its own
 * for each one, spawned with opts (NULL: the defaults) on the caller's
 * runtime. The handler's fiber owns conn and closes it; a connection whose
 * fiber cannot be spawned, or never runs (no stack: opts->release, when
 * NULL, closes it), is closed. Out of descriptors or memory (-EMFILE,
 * -ENFILE, -ENOMEM) it tries again every 10 ms, the connection left
 * queued; an accept error that ends one connection (-ECONNABORTED...) is
 * passed over. Returns -ECANCELED once cancelled, or the error that ends
 * accepting for good (-EINVAL, -EBADF, -ENOTSOCK, -EOPNOTSUPP,
 * -ESHUTDOWN); the listener is not closed. The dump shows the handlers as
 * spawned where rt_fiber_serve is called. From a fiber only (-EPERM). */
#define rt_fiber_serve(listener, opts, handler)                                                    \
    rt_fiber_serve_with_site(RT__AWAIT_HERE, RT__HERE, (listener), (opts), (handler))
int rt_fiber_serve_with_site(const char *file, int line, const char *function, const char *site,
                             rt_io *listener, const rt_fiber_options *opts, rt_fiber_fn handler);

/* Reads one line from r (rt_read_line_init): the bytes taken, the line
 * ending included, 0 at the end of the stream, or an error (-EMSGSIZE: a
 * line longer than the reader's buffer). *text (may be NULL) points to the
 * line in the reader's buffer, valid until the next operation on r, and
 * *len (may be NULL) is its length without "\n" or "\r\n"; both are
 * NULL and 0 unless the result is > 0. */
#define rt_read_line_await(r, text, len)                                                           \
    rt_read_line_await_with_site(RT__AWAIT_HERE, (r), (text), (len))
int64_t rt_read_line_await_with_site(const char *file, int line, const char *function, rt_reader *r,
                                     char **text, size_t *len);

/* Writes len bytes through w's buffer (rt_writer_write_init): len, or an
 * error. They reach the descriptor at a flush, or when the buffer fills. */
#define rt_writer_write_await(w, buf, len)                                                         \
    rt_writer_write_await_with_site(RT__AWAIT_HERE, (w), (buf), (len))
int64_t rt_writer_write_await_with_site(const char *file, int line, const char *function,
                                        rt_writer *w, const void *buf, size_t len);

/* Sends everything w buffered (rt_writer_flush_init): the bytes sent (0:
 * none were buffered), or an error (what was not sent stays buffered). */
#define rt_writer_flush_await(w) rt_writer_flush_await_with_site(RT__AWAIT_HERE, (w))
int64_t rt_writer_flush_await_with_site(const char *file, int line, const char *function,
                                        rt_writer *w);

#ifdef __cplusplus
}
#endif

#endif
