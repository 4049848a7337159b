/* File operations that end early: dropped while their job waits in the
 * pool's queue, dropped while it runs (FIFOs hold the job inside its
 * system call until the test lets it go), dropped after the job ended but
 * before a poll collected its outcome, and pending when the runtime shuts
 * down. Nothing may leak (ASan) and the descriptor count comes back to
 * where it started. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "support_fs.h"

#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

TestSuite(fs_drop, .fini = fs_fini);

/* ---- dropped operations ----------------------------------------------------------- */

Test(fs_drop, a_file_closed_with_operations_unfinished_stays_open_for_them)
{
    make_dir();
    int fds = count_fds();
    rt_runtime *rt = plain_runtime();
    rt_file *f;
    cr_assert_eq(open_file(rt, in_dir("f"), O_RDWR | O_CREAT, 0600, &f), 0);
    int open_fds = count_fds();
    cr_assert_eq(write_at(rt, f, "still here", 10, -1), 10);
    char buf[16] = {0};
    rt_file_read rd;
    cr_assert_eq(rt_file_pread_init(&rd, f, buf, sizeof buf, 0), 0);
    rt_fs_op sync;
    cr_assert_eq(rt_file_sync_init(&sync, f, true), 0);
    cr_assert_eq(rt_file_close(f), 0); /* the operations hold it open */
    cr_assert_eq(count_fds(), open_fds, "closed under the operations");
    cr_assert_eq(run_op(rt, &rd.future), 10);
    cr_assert_str_eq(buf, "still here");
    cr_assert_eq(count_fds(), open_fds, "closed under the sync");
    cr_assert_eq(run_op(rt, &sync.future), 0);
    cr_assert_eq(count_fds(), open_fds - 1, "the last operation did not close it");
    finish_runtime(rt, 0);
    cr_assert_eq(count_fds(), fds);
    remove_dir();
}

Test(fs_drop, operations_dropped_while_their_jobs_wait_in_the_queue_never_run)
{
    make_dir();
    int fds = count_fds();
    rt_runtime *rt = one_thread_pool();
    const char *data = in_dir("data"), *created = in_dir("created"), *sub = in_dir("sub");
    rt_file *f;
    cr_assert_eq(open_file(rt, data, O_RDWR | O_CREAT, 0600, &f), 0);
    cr_assert_eq(write_at(rt, f, "0123456789", 10, -1), 10);

    /* The only pool thread is held: every job below waits in the queue. */
    rt_task *held;
    cr_assert_eq(rt_spawn_blocking(rt, held_job, NULL, &held), 0);
    cr_assert(event_wait_for(&held_started, 1));

    unsigned char *buf = malloc(16);
    cr_assert_not_null(buf);
    memset(buf, '#', 16);
    rt_file_read rd;
    rt_file_write wr;
    rt_file_open op;
    rt_fs_op mk, un;
    rt_fs_read_file rf;
    rt_fs_stat st;
    cr_assert_eq(rt_file_pread_init(&rd, f, buf, 16, 0), 0);
    cr_assert_eq(rt_file_write_init(&wr, f, "XYZ", 3), 0);
    cr_assert_eq(rt_file_open_init(&op, rt, created, O_WRONLY | O_CREAT | O_EXCL, 0600), 0);
    cr_assert_eq(rt_fs_mkdir_init(&mk, rt, sub, 0700), 0);
    cr_assert_eq(rt_fs_unlink_init(&un, rt, data), 0);
    cr_assert_eq(rt_fs_read_file_init(&rf, rt, data, 100), 0);
    cr_assert_eq(rt_file_stat_init(&st, f), 0);
    rt_future *ops[] = {&rd.future, &wr.future, &op.future, &mk.future,
                        &un.future, &rf.future, &st.future};
    const size_t n = sizeof ops / sizeof ops[0];
    rt_task *tasks[sizeof ops / sizeof ops[0]];
    for (size_t i = 0; i < n; i++)
        tasks[i] = start_waiting(rt, ops[i], NULL);
    for (size_t i = 0; i < n; i++)
        abort_waiting(tasks[i], ops[i]);
    free(buf); /* a job that ran after all would write into freed memory */
    cr_assert_null(op.file);
    cr_assert_null(rf.data);

    event_signal(&go);
    cr_assert_eq(task_wait_status(held, WAIT_DEADLINE_NS, NULL), 0);
    pool_barrier(rt); /* anything still queued would have run by now */

    struct stat s;
    cr_assert_eq(stat_path(rt, data, &s), 0, "the unlink ran");
    cr_assert_eq(s.st_size, 10, "the write ran");
    cr_assert_eq(stat_path(rt, created, NULL), -ENOENT, "the open ran");
    cr_assert_eq(stat_path(rt, sub, NULL), -ENOENT, "the mkdir ran");
    cr_assert_eq(rt_file_close(f), 0);
    finish_runtime(rt, 0);
    cr_assert_eq(count_fds(), fds);
    remove_dir();
}

Test(fs_drop, a_whole_file_read_dropped_while_its_job_runs_frees_what_the_job_read)
{
    make_dir();
    int fds = count_fds();
    rt_runtime *rt = one_thread_pool();
    int base = count_fds();
    const char *fifo = in_dir("fifo");
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    rt_fs_read_file rf;
    cr_assert_eq(rt_fs_read_file_init(&rf, rt, fifo, 1 << 20), 0);
    rt_task *t = start_waiting(rt, &rf.future, NULL);
    /* Opening the other end waits for the job's open: the job runs, and
     * then waits in read(2) for the end of the FIFO's data. */
    int wfd = open(fifo, O_WRONLY | O_CLOEXEC);
    cr_assert_geq(wfd, 0, "open: %s", strerror(errno));
    write_fd_all(wfd, "first part;", 11);
    abort_waiting(t, &rf.future);
    cr_assert_null(rf.data);
    /* The job goes on: it reads all this, past its first buffer, to the
     * end, and its record frees the contents when it ends. */
    static char more[100000];
    memset(more, 'm', sizeof more);
    write_fd_all(wfd, more, sizeof more);
    close(wfd);
    pool_barrier(rt);
    cr_assert_eq(count_fds(), base, "the job's descriptor outlived it");
    finish_runtime(rt, 0);
    cr_assert_eq(count_fds(), fds, "the job's descriptor was not closed");
    remove_dir();
}

Test(fs_drop, a_write_dropped_while_its_job_runs_still_writes_all_its_bytes)
{
    make_dir();
    int fds = count_fds();
    rt_runtime *rt = one_thread_pool();
    const char *fifo = in_dir("fifo");
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    int rfd = open(fifo, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    cr_assert_geq(rfd, 0);
    int cap = fcntl(rfd, F_SETPIPE_SZ, 4096); /* one page: the kernel's least */
    cr_assert_gt(cap, 0, "F_SETPIPE_SZ: %s", strerror(errno));
    rt_file *w;
    cr_assert_eq(open_file(rt, fifo, O_WRONLY, 0, &w), 0, "a reader is there: no wait");
    cr_assert_eq(fcntl(rfd, F_SETFL, fcntl(rfd, F_GETFL) & ~O_NONBLOCK), 0);

    const size_t len = 3 * (size_t)cap;
    unsigned char *src = malloc(len);
    cr_assert_not_null(src);
    for (size_t i = 0; i < len; i++)
        src[i] = pattern(i);
    rt_file_write wr;
    cr_assert_eq(rt_file_write_init(&wr, w, src, len), 0);
    cr_assert_eq(wr.len, len);
    /* Copied at the init: the caller's bytes may go at once. */
    unsigned char *expected = malloc(len);
    cr_assert_not_null(expected);
    memcpy(expected, src, len);
    memset(src, 0, len);
    free(src);

    rt_task *t = start_waiting(rt, &wr.future, NULL);
    /* A byte arrives only once the job runs; it then waits in write(2)
     * with two pipes' worth of bytes still to write. */
    unsigned char *got = malloc(len);
    cr_assert_not_null(got);
    read_fd_all(rfd, got, 1);
    abort_waiting(t, &wr.future);
    read_fd_all(rfd, got + 1, len - 1);
    cr_assert_eq(memcmp(got, expected, len), 0, "the dropped write's bytes differ");
    pool_barrier(rt);
    cr_assert_eq(rt_file_close(w), 0);
    /* Nothing else comes: the job wrote its bytes once. */
    cr_assert_eq(read(rfd, got, 1), 0, "end of stream expected");
    close(rfd);
    free(got);
    free(expected);
    finish_runtime(rt, 0);
    cr_assert_eq(count_fds(), fds);
    remove_dir();
}

Test(fs_drop, a_finished_job_whose_operation_is_dropped_uncollected_releases_what_it_made)
{
    make_dir();
    int fds = count_fds();
    rt_runtime *rt = one_thread_pool();
    int base = count_fds();

    /* A read polled by hand: its job reads into the record's buffer, and a
     * drop before the next poll leaves the caller's buffer untouched. */
    const char *fifo = in_dir("fifo");
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    rt_file *r;
    cr_assert_eq(open_file(rt, fifo, O_RDWR, 0, &r), 0);
    int wfd = open(fifo, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    cr_assert_geq(wfd, 0);
    char *buf = malloc(16);
    cr_assert_not_null(buf);
    memset(buf, '#', 16);
    rt_file_read rd;
    cr_assert_eq(rt_file_read_init(&rd, r, buf, 16), 0);
    struct hand h;
    hand_init(&h);
    cr_assert_eq(RT_POLL_OP(&rd, &h.cx), RT_PENDING);
    write_fd_all(wfd, "fresh bytes", 11);
    cr_assert(event_wait_for(&h.w.woken, 1), "the job never ended");
    RT_DROP(&rd);
    cr_assert_eq(rd.result, -ECANCELED);
    for (int i = 0; i < 16; i++)
        cr_assert_eq(buf[i], '#', "byte %d of the caller's buffer was written", i);
    free(buf);
    pool_barrier(rt); /* the job's completion, which may drop the waker, is over */
    cr_assert_eq(counting_outstanding(&h.w), 0, "the join kept a waker");
    /* The dropped read consumed its bytes (the header says so). */
    write_fd_all(wfd, "next", 4);
    char again[16];
    cr_assert_eq(read_at(rt, r, again, sizeof again, -1), 4);
    cr_assert_eq(memcmp(again, "next", 4), 0);
    close(wfd);
    cr_assert_eq(rt_file_close(r), 0);
    cr_assert_eq(count_fds(), base);

    /* An open polled by hand: its job opened a descriptor for it, which a
     * drop before the next poll closes. */
    const char *fifo2 = in_dir("fifo2");
    cr_assert_eq(mkfifo(fifo2, 0600), 0);
    rt_file_open op;
    cr_assert_eq(rt_file_open_init(&op, rt, fifo2, O_RDONLY, 0), 0);
    struct hand h2;
    hand_init(&h2);
    cr_assert_eq(RT_POLL_OP(&op, &h2.cx), RT_PENDING);
    int wfd2 = open(fifo2, O_WRONLY | O_CLOEXEC); /* waits for the job's open */
    cr_assert_geq(wfd2, 0);
    cr_assert(event_wait_for(&h2.w.woken, 1), "the job never ended");
    cr_assert_eq(count_fds(), base + 2, "the job's descriptor and the test's");
    RT_DROP(&op);
    cr_assert_null(op.file);
    cr_assert_eq(count_fds(), base + 1, "the drop did not close the job's descriptor");
    pool_barrier(rt);
    cr_assert_eq(counting_outstanding(&h2.w), 0);
    close(wfd2);
    finish_runtime(rt, 0);
    cr_assert_eq(count_fds(), fds);
    remove_dir();
}

/* ---- shutdown ------------------------------------------------------------------- */

static struct event shutdown_drops = EVENT_INIT;

struct unblocker {
    struct event *cancelled; /* signalled once the pool's queue was cancelled */
    int wfd;                 /* then close this */
};

/* Lets the running jobs go once the shutdown has cancelled the jobs that
 * wait in the queue (released earlier, a pool thread would take one). */
static void *unblock_after_cancel(void *arg)
{
    struct unblocker *u = arg;
    cr_assert(event_wait_for(u->cancelled, 1));
    close(u->wfd);
    event_signal(&go);
    return NULL;
}

Test(fs_drop, a_shutdown_with_file_operations_pending_leaks_nothing)
{
    make_dir();
    int fds = count_fds();
    rt_config cfg;
    rt_config_init(&cfg);
    cfg.workers = 1;
    cfg.blocking_threads = 2;
    rt_runtime *rt = new_runtime_config(&cfg);
    const char *data = in_dir("data"), *fifo = in_dir("fifo");
    const char *created = in_dir("created"), *sub = in_dir("sub");
    rt_file *f;
    cr_assert_eq(open_file(rt, data, O_RDWR | O_CREAT, 0600, &f), 0);
    cr_assert_eq(mkfifo(fifo, 0600), 0);

    /* Both pool threads busy: one holds, one reads a FIFO. */
    rt_task *held;
    cr_assert_eq(rt_spawn_blocking(rt, held_job, NULL, &held), 0);
    cr_assert(event_wait_for(&held_started, 1));
    rt_fs_read_file rf;
    cr_assert_eq(rt_fs_read_file_init(&rf, rt, fifo, 1 << 20), 0);
    rt_task *reading = start_waiting(rt, &rf.future, &shutdown_drops);
    int wfd = open(fifo, O_WRONLY | O_CLOEXEC); /* the job is in its open */
    cr_assert_geq(wfd, 0);
    write_fd_all(wfd, "some", 4);

    /* Queued behind them. */
    char *buf = malloc(8);
    cr_assert_not_null(buf);
    rt_file_open op;
    rt_file_write wr;
    rt_file_read rd;
    rt_fs_op mk;
    rt_fs_stat st;
    cr_assert_eq(rt_file_open_init(&op, rt, created, O_WRONLY | O_CREAT, 0600), 0);
    cr_assert_eq(rt_file_write_init(&wr, f, "lost", 4), 0);
    cr_assert_eq(rt_file_read_init(&rd, f, buf, 8), 0);
    cr_assert_eq(rt_fs_mkdir_init(&mk, rt, sub, 0700), 0);
    cr_assert_eq(rt_fs_stat_init(&st, rt, data), 0);
    rt_future *ops[] = {&op.future, &wr.future, &rd.future, &mk.future, &st.future};
    const size_t n = sizeof ops / sizeof ops[0];
    rt_task *tasks[sizeof ops / sizeof ops[0]];
    for (size_t i = 0; i < n; i++)
        tasks[i] = start_waiting(rt, ops[i], &shutdown_drops);
    /* And one polled by hand, outside any task. */
    rt_fs_op un;
    cr_assert_eq(rt_fs_unlink_init(&un, rt, data), 0);
    struct hand h;
    hand_init(&h);
    cr_assert_eq(RT_POLL_OP(&un, &h.cx), RT_PENDING);

    /* The shutdown drops the tasks, cancels the queued jobs (which wakes
     * the hand-polled operation), then waits for the running ones, which
     * the helper lets go. */
    struct unblocker u = {&h.w.woken, wfd};
    pthread_t helper;
    cr_assert_eq(pthread_create(&helper, NULL, unblock_after_cancel, &u), 0);
    shut_down(rt, (int)n + 1);
    cr_assert_eq(pthread_join(helper, NULL), 0);
    cr_assert_eq(event_count(&shutdown_drops), n + 1);
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(task_wait_status(tasks[i], WAIT_DEADLINE_NS, NULL), -ECANCELED);
        cr_assert_eq(ops[i]->result, -ECANCELED);
    }
    cr_assert_eq(task_wait_status(reading, WAIT_DEADLINE_NS, NULL), -ECANCELED);
    cr_assert_eq(task_wait_status(held, WAIT_DEADLINE_NS, NULL), 0);
    cr_assert_null(op.file);
    cr_assert_null(rf.data);
    free(buf);

    /* The shutdown cancelled the hand-polled operation's job. */
    cr_assert_eq(RT_POLL_OP(&un, &h.cx), RT_READY);
    cr_assert_eq(un.result, -ESHUTDOWN);
    cr_assert_eq(counting_outstanding(&h.w), 0);
    /* One initialised now has no pool to run on. */
    rt_fs_stat late;
    cr_assert_eq(rt_fs_stat_init(&late, rt, data), 0);
    rt_context cx = noop_context();
    cr_assert_eq(RT_POLL_OP(&late, &cx), RT_READY);
    cr_assert_eq(late.result, -ESHUTDOWN);

    cr_assert_eq(rt_file_close(f), 0);
    finish_runtime(rt, 0);
    cr_assert_eq(count_fds(), fds, "a descriptor outlived the shutdown");
    struct stat s;
    cr_assert_eq(stat(data, &s), 0, "the unlink ran");
    cr_assert_eq(s.st_size, 0, "the write ran");
    cr_assert_eq(stat(created, &s), -1, "the open ran");
    cr_assert_eq(stat(sub, &s), -1, "the mkdir ran");
    remove_dir();
}
