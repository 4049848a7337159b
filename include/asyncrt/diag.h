/* asyncrt: seeing inside a running runtime.
 *
 * - A task dump: every live task with its state, where it was spawned, where
 *   it waits and on what (rt_runtime_dump, or rt_runtime_tasks for a
 *   callback per task). To dump on a signal, wait for it in a thread of the
 *   program's own (sigwait) and call rt_runtime_dump_fd there:
 *   examples/stuck.c does that for SIGQUIT.
 * - Reports of polls that run too long (rt_config.stall_ns, or the
 *   environment variable ASYNCRT_STALL_MS) and of tasks that wait while no
 *   waker for them exists anywhere (lost wake-ups), through one callback
 *   (rt_config.report).
 *
 * Where a task waits is known for coroutines (coro.h): RT_CORO_BEGIN records
 * the function and file, every RT_AWAIT its line and the operation in
 * flight, which says what it waits for through its vtable's `describe`.
 * Where a task was spawned is recorded by the spawn functions, which are
 * macros passing the caller's file and line (task.h). Neither costs more
 * than a store at run time. Poll counts and times need
 * rt_config.poll_timing.
 *
 * A library built without diagnostics (meson option diagnostics=false) has
 * none of this: rt_runtime_tasks, rt_runtime_dump and rt_runtime_dump_fd
 * return -ENOSYS (after their argument checks), rt_runtime_new refuses
 * stall_ns, poll_timing and dump_signal with -ENOSYS, ASYNCRT_STALL_MS is
 * ignored and no lost wake-up is reported. Misuse reports (RT_REPORT_MISUSE)
 * come in every build. */
#ifndef ASYNCRT_DIAG_H
#define ASYNCRT_DIAG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "future.h"
#include "runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- What an operation waits for ------------------------------------------*/

/* The kind of thing an operation waits for. */
typedef enum rt_wait_kind {
    RT_WAIT_NONE = 0, /* nothing: a zeroed or finished operation */
    RT_WAIT_OTHER,    /* an operation without a describe function */
    RT_WAIT_SLEEP,    /* a sleep or interval tick: deadline_ns */
    RT_WAIT_READ,     /* a read or receive on a descriptor: fd */
    RT_WAIT_WRITE,    /* a write or send on a descriptor: fd */
    RT_WAIT_READY,    /* readiness of a descriptor: fd */
    RT_WAIT_ACCEPT,   /* an accept on a listening socket: fd */
    RT_WAIT_CONNECT,  /* a connect: fd (or -1 while resolving) */
    RT_WAIT_RECV,     /* a receive on a channel or oneshot: object */
    RT_WAIT_SEND,     /* a send on a channel: object */
    RT_WAIT_LOCK,     /* a mutex lock: object */
    RT_WAIT_ACQUIRE,  /* semaphore permits: object */
    RT_WAIT_NOTIFIED, /* a notification: object */
    RT_WAIT_JOIN,     /* a task: task_id */
    RT_WAIT_GROUP,    /* a task group's next result or end: object */
    RT_WAIT_TIMEOUT,  /* an operation with a deadline: deadline_ns, inner */
    RT_WAIT_SELECT,   /* the first of several operations */
    RT_WAIT_JOIN_ALL, /* all of several operations */
    RT_WAIT_BLOCKING, /* a job on the blocking pool (files, names) */
    RT_WAIT_SIGNAL,   /* a signal: signo */
    RT_WAIT_PROCESS,  /* a child process: pid */
} rt_wait_kind;

/* What one operation waits for, in fields and in words. */
typedef struct rt_wait_info {
    rt_wait_kind kind;
    int fd;              /* the descriptor, or -1 */
    int64_t deadline_ns; /* CLOCK_MONOTONIC deadline, or 0 */
    const void *object;  /* the channel, mutex, semaphore, notify or group; or NULL */
    uint64_t task_id;    /* the task joined, or 0 */
    int64_t number;      /* the signal number or process id, or 0 */
    /* In words, with the inner operations of a combinator, for example
     * "receive on channel 0x5581c0 (capacity 16)" or "first of 2: read on
     * fd 7 | sleep until +1.500 s". Cut at the buffer's size, always
     * terminated. */
    char text[160];
} rt_wait_info;

/* Fills *info with what operation f waits for: the vtable's describe, or
 * RT_WAIT_NONE ("finished" or "not started") for a finished or zeroed
 * operation, or RT_WAIT_OTHER for an operation without a describe. The
 * operation must not be polled or dropped meanwhile (the task that owns it,
 * or a task dump holding that task). Errors: -EINVAL (f or info NULL). */
int rt_future_describe(const rt_future *f, rt_wait_info *info);

/* For describe functions: appends to info->text what `inner` waits for,
 * after `sep` (for combinators: "first of 2: " ...). */
void rt_wait_info_append(rt_wait_info *info, const char *sep, const rt_future *inner);

/* ---- Live tasks ------------------------------------------------------------*/

/* Where a task stands. */
typedef enum rt_task_state {
    RT_TASK_WAITING = 0, /* idle: waiting to be woken */
    RT_TASK_SCHEDULED,   /* in a run queue */
    RT_TASK_RUNNING,     /* being polled (or dropped) by a worker now */
    RT_TASK_FINISHED,    /* finished, its handle not yet joined or detached */
} rt_task_state;

/* The most return addresses rt_task_info.backtrace holds. */
#define RT_TASK_BACKTRACE_MAX 16

/* One live task, as rt_runtime_tasks reports it. Fields are only ever
 * appended; `size` says how many bytes the library filled. Strings are
 * valid only during the callback. */
typedef struct rt_task_info {
    size_t size;            /* sizeof(rt_task_info) in the library */
    uint64_t id;            /* rt_task_id */
    const char *name;       /* the name given at spawn, or NULL */
    rt_task_state state;    /* see above */
    int worker;             /* the worker running it, else the one whose poll last
                               left it waiting, else -1 (never polled yet) */
    const char *spawned_at; /* "file.c:123" of the spawn call, or NULL */
    /* Where a coroutine waits (the last RT_AWAIT or RT_CORO_YIELD reached), or
     * NULL/0 for a task that is no coroutine or has not started: */
    const char *await_file;
    int await_line;
    const char *await_function;
    /* What it waits for: the operation in flight, described when the task
     * was WAITING and could be held for the look (otherwise kind is
     * RT_WAIT_NONE and text says why). */
    rt_wait_info wait;
    /* Waiting while no waker for it exists anywhere: nothing can ever wake it
     * (an abort or shutdown still ends it). */
    bool lost_wakeup;
    /* With rt_config.poll_timing (else 0 or -1): */
    uint64_t polls;     /* polls so far */
    int64_t busy_ns;    /* time spent in its polls */
    int64_t idle_ns;    /* since its last poll ended; -1 unknown */
    int64_t running_ns; /* RUNNING: how long the poll in progress has run; -1 unknown */
    /* Fibers (fiber.h); 0 for a stackless task and for a fiber that has not
     * run yet. The depth and the backtrace are read while the fiber is
     * WAITING (held for the look), else 0. */
    size_t stack_size;    /* usable bytes of its stack */
    size_t stack_depth;   /* the deepest its stack pointer was at a switch out: bytes in use
                             from the top, a lower bound on how deep it has been */
    size_t stack_touched; /* bytes from the top down to the lowest page of its stack that
                             has ever been touched, by it or, for a pooled stack, by the
                             fibers that had it before: an upper bound; 0 unknown */
    /* The return addresses from the await up (innermost first), found by
     * following frame pointers: complete only where the fiber's code keeps
     * them (-fno-omit-frame-pointer, fiber.h "Seeing fibers"). */
    unsigned backtrace_len;
    const void *backtrace[RT_TASK_BACKTRACE_MAX];
} rt_task_info;

/* Called once per live task; return 0 to go on, anything else to stop. */
typedef int (*rt_task_visit_fn)(const rt_task_info *info, void *arg);

/* Calls fn(info, arg) for every task of rt that has not finished, and for
 * every finished one whose handle is still held (RT_TASK_FINISHED), in no
 * particular order. Blocking-pool jobs are not included.
 * Safe from any thread while the runtime runs at full load: the registry of
 * each worker is copied under a lock that its owner takes only to sweep or
 * grow it (the owner skips a sweep rather than wait), and each waiting task
 * is held for a moment (as a worker holds it for a poll) while its
 * coroutine record and operation are read; a task woken meanwhile is
 * queued as soon as the look ends. So the figures are a moment apart, never
 * torn. A call concurrent with rt_runtime_shutdown either finishes
 * before the shutdown goes on or returns -ESHUTDOWN (from a task of rt it
 * does not wait for the shutdown); not from a drop function run by
 * shutdown (-EDEADLK), and not concurrently with rt_runtime_free. fn runs
 * with the runtime's lifecycle lock held: it may call anything but
 * rt_runtime_tasks and rt_runtime_dump (-EDEADLK) and rt_runtime_shutdown
 * or rt_runtime_free (which would wait for it). While fn runs, closed
 * rt_io registrations are kept, not freed.
 * Returns the number of tasks visited (>= 0), or -EINVAL (rt or fn NULL),
 * -ENOMEM, -ESHUTDOWN, -EDEADLK, or fn's nonzero value when it stopped
 * early (as given; make it negative to tell it from a count). */
int rt_runtime_tasks(rt_runtime *rt, rt_task_visit_fn fn, void *arg);

/* Writes a readable dump of every live task to `out`, like Go's goroutine
 * dump: a header with the totals, then one block per group of tasks that
 * share their state, await point, what they wait for (its kind) and spawn
 * point (10,000 connections waiting in the same read make one block, with
 * the count and the first few ids), the largest groups first, each with its
 * await point as file:line in function, what the first of them waits for
 * in words, and where they were spawned. Lost wake-ups are marked. Returns
 * 0 once the whole dump was written and flushed (not the number of tasks,
 * as rt_runtime_tasks does). Threads and errors as rt_runtime_tasks
 * (-EINVAL also for out NULL), plus -EIO when the stream reports an error,
 * in a write or in the final fflush. Nothing is written when the tasks
 * could not be looked at (-ENOMEM, -ESHUTDOWN, -EDEADLK). */
int rt_runtime_dump(rt_runtime *rt, FILE *out);

/* rt_runtime_dump to a descriptor (written with write(2), no stdio).
 * Returns 0 once the whole dump was written. Errors as rt_runtime_dump,
 * except that -EBADF comes for fd < 0 and a failed write(2) gives its own
 * negative errno (-EBADF for a descriptor not open, -ENOSPC...) instead
 * of -EIO; nothing more is written after it. */
int rt_runtime_dump_fd(rt_runtime *rt, int fd);

/* ---- Reports: stalls, lost wake-ups, misuse --------------------------------*/

/* What a report is about. */
typedef enum rt_report_kind {
    RT_REPORT_STALL = 1,   /* a poll has run longer than rt_config.stall_ns */
    RT_REPORT_LOST_WAKEUP, /* a waiting task no waker can ever wake */
    /* A counted reference released more times than it was taken, or used
     * after its release (a channel side, a oneshot side, a group, a join
     * handle): the call changed nothing. Made in every build, whatever the
     * diagnostics settings, since it means a bug in the caller. */
    RT_REPORT_MISUSE,
} rt_report_kind;

/* One report. Strings are valid only during the callback. */
typedef struct rt_report {
    size_t size; /* sizeof(rt_report) in the library */
    rt_report_kind kind;
    uint64_t task_id;
    const char *task_name;      /* or NULL */
    int worker;                 /* the worker polling it (a stall), else -1 */
    int64_t duration_ns;        /* how long the poll has run so far (a stall) */
    const char *await_file;     /* the coroutine's last await point: where the */
    int await_line;             /* stalled poll started from, or where the */
    const char *await_function; /* lost task waits; NULL/0 when unknown */
    const char *spawned_at;     /* "file.c:123", or NULL */
    /* RT_REPORT_MISUSE: the public function that was misused, the object
     * it was given, and what was wrong, in words. The task fields above
     * name the task that made the call (0 / NULL outside a task). */
    const char *function;
    const void *object;
    const char *what;
} rt_report;

/* The report callback (rt_config.report). Called on the runtime's watchdog
 * thread (stalls), on a worker (lost wake-ups, found when the worker
 * sweeps its registry), or on the thread that misused a reference (misuse:
 * the rt_config.report of the runtime whose worker made the call; from any
 * other thread, which no runtime owns, rt_report_print), never from a
 * signal handler, never with a lock of the runtime held. It must return promptly and must not call
 * rt_runtime_shutdown or rt_runtime_free. */
typedef void (*rt_report_fn)(const rt_report *report, void *arg);

/* The default report callback: one line on standard error, for example
 *   asyncrt: stall: task 42 "parser" on worker 1 polled for 212 ms, since
 *   server.c:88 in handle_client (spawned at server.c:40)
 *   asyncrt: misuse: rt_chan_sender_drop(0x5581c0): no sender reference is
 *   left to release (ignored), in task 7
 * arg is ignored. */
void rt_report_print(const rt_report *report, void *arg);

#ifdef __cplusplus
}
#endif
#endif
