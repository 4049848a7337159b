/* What an operation on a descriptor waits for (rt_future_describe,
 * diag.h): every kind of library operation built for real (a runtime,
 * pipes, buffered readers and writers, sockets on 127.0.0.1 and Unix
 * sockets, files and lookups queued on the blocking pool, signals, a child
 * process), polled once by hand so that it waits, described, and dropped.
 * test_describe.c has the operations that wait on no descriptor of their
 * own. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "support_describe.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

TestSuite(describe_io, .fini = fail_on_leaks);

/* ---- fixtures ------------------------------------------------------------------ */

/* A pipe whose write end, full, is registered with rt (*writer), its read
 * end a plain descriptor of the test (*reader). */
static void full_pipe_to_write(rt_runtime *rt, rt_io **writer, int *reader)
{
    int fds[2];
    make_pipe(fds);
    static char chunk[4096];
    while (write(fds[1], chunk, sizeof chunk) > 0)
        ;
    cr_assert_eq(errno, EAGAIN);
    cr_assert_eq(rt_io_open(rt, fds[1], writer), 0);
    *reader = fds[0];
}

/* What the pipe tests stand on: a one-worker runtime, a pipe to read (in,
 * nothing written to it) and a full pipe to write (out), and the count of
 * open descriptors from before the pipes, which closing them restores. */
struct pipes {
    rt_runtime *rt;
    int fds;
    rt_io *in, *out;
    int in_writer, out_reader;
    int rfd, wfd; /* the registered ends */
};

static void pipes_open(struct pipes *p)
{
    p->rt = new_runtime(1);
    p->fds = count_fds();
    pipe_to_read(p->rt, &p->in, &p->in_writer);
    full_pipe_to_write(p->rt, &p->out, &p->out_reader);
    p->rfd = rt_io_fd(p->in);
    p->wfd = rt_io_fd(p->out);
}

/* Closes both pipes, checks that no descriptor is left open, and finishes
 * the runtime. */
static void pipes_close(struct pipes *p)
{
    cr_assert_eq(rt_io_close(p->in), 0);
    cr_assert_eq(rt_io_close(p->out), 0);
    close(p->in_writer);
    close(p->out_reader);
    cr_assert_eq(count_fds(), p->fds);
    finish_runtime(p->rt, 0);
}

/* Fills the send buffer of a non-blocking socket until it refuses more. */
static void fill_socket(int fd)
{
    static char chunk[4096];
    while (send(fd, chunk, sizeof chunk, MSG_DONTWAIT | MSG_NOSIGNAL) > 0)
        ;
    cr_assert(errno == EAGAIN || errno == EWOULDBLOCK, "send: %s", strerror(errno));
}

/* A listener on 127.0.0.1 whose accept queue is full: the SYN of a new
 * connection is dropped, so a connect to it waits. */
struct full_listener {
    int fd;
    int fillers[4];
    struct sockaddr_in addr;
};

static void full_listener_open(struct full_listener *f)
{
    f->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(f->fd, 0);
    memset(&f->addr, 0, sizeof f->addr);
    f->addr.sin_family = AF_INET;
    f->addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof f->addr;
    cr_assert_eq(bind(f->fd, (struct sockaddr *)&f->addr, len), 0);
    cr_assert_eq(listen(f->fd, 0), 0);
    cr_assert_eq(getsockname(f->fd, (struct sockaddr *)&f->addr, &len), 0);
    for (int i = 0; i < 4; i++) {
        f->fillers[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        cr_assert_geq(f->fillers[i], 0);
        int rc = connect(f->fillers[i], (struct sockaddr *)&f->addr, sizeof f->addr);
        cr_assert(rc == 0 || errno == EINPROGRESS, "filler connect: %s", strerror(errno));
    }
}

static void full_listener_close(struct full_listener *f)
{
    for (int i = 0; i < 4; i++)
        close(f->fillers[i]);
    close(f->fd);
}

/* "127.0.0.1:port" of the listener. */
static void full_listener_words(const struct full_listener *f, char *out, size_t size)
{
    snprintf(out, size, "127.0.0.1:%u", (unsigned)ntohs(f->addr.sin_port));
}

/* A job that holds the blocking pool's only thread until the test lets it
 * go, so that the jobs of operations polled meanwhile stay queued. */
struct pool_gate {
    struct event entered;
    struct event open;
    rt_task *task;
};

static void *pool_gate_job(void *arg)
{
    struct pool_gate *g = arg;
    event_signal(&g->entered);
    cr_assert(event_wait_for(&g->open, 1));
    return NULL;
}

/* A runtime with one blocking-pool thread, held by gate. */
static rt_runtime *runtime_with_held_pool(struct pool_gate *g)
{
    rt_config cfg;
    rt_config_init(&cfg);
    cfg.workers = 1;
    cfg.blocking_threads = 1;
    rt_runtime *rt = new_runtime_config(&cfg);
    cr_assert_eq(rt_spawn_blocking(rt, pool_gate_job, g, &g->task), 0);
    cr_assert(event_wait_for(&g->entered, 1));
    return rt;
}

static void pool_gate_release(struct pool_gate *g)
{
    event_signal(&g->open);
    cr_assert_eq(task_wait_status(g->task, WAIT_DEADLINE_NS, NULL), 0);
}

/* ---- descriptors ------------------------------------------------------------------ */

Test(describe_io, reads_writes_and_readiness_name_their_descriptor)
{
    struct pipes p;
    pipes_open(&p);
    struct hand h;
    hand_init(&h);

    char buf[16];
    rt_io_read rd;
    rt_io_read_init(&rd, p.in, buf, sizeof buf);
    EXPECT_WAIT(&rd, &h, RT_WAIT_READ, p.rfd, NULL, "read on ");

    rt_io_ready ready;
    rt_io_readable_init(&ready, p.in);
    EXPECT_WAIT(&ready, &h, RT_WAIT_READY, p.rfd, NULL, "readable");

    rt_io_writable_init(&ready, p.out);
    EXPECT_WAIT(&ready, &h, RT_WAIT_READY, p.wfd, NULL, "writable");

    static const char bytes[100];
    rt_io_write wr;
    rt_io_write_init(&wr, p.out, bytes, sizeof bytes);
    EXPECT_WAIT(&wr, &h, RT_WAIT_WRITE, p.wfd, NULL, "write on ");

    rt_io_write_all wa;
    rt_io_write_all_init(&wa, p.out, bytes, sizeof bytes);
    EXPECT_WAIT(&wa, &h, RT_WAIT_WRITE, p.wfd, NULL, "0 of 100 bytes");

    pipes_close(&p);
}

Test(describe_io, buffered_reads_and_writes_name_their_descriptor)
{
    struct pipes p;
    pipes_open(&p);
    struct hand h;
    hand_init(&h);
    rt_reader *r;
    rt_writer *w;
    cr_assert_eq(rt_reader_new(p.in, 64, &r), 0);
    cr_assert_eq(rt_writer_new(p.out, 16, &w), 0);

    rt_read_until line;
    rt_read_line_init(&line, r);
    EXPECT_WAIT(&line, &h, RT_WAIT_READ, p.rfd, NULL, "line");
    rt_read_until_init(&line, r, ';');
    EXPECT_WAIT(&line, &h, RT_WAIT_READ, p.rfd, NULL, "until ';'");

    char dst[32];
    rt_read_exact exact;
    rt_read_exact_init(&exact, r, dst, sizeof dst);
    EXPECT_WAIT(&exact, &h, RT_WAIT_READ, p.rfd, NULL, "32 bytes");

    /* More than the buffer holds: sent straight to the full pipe. */
    static const char bytes[100];
    rt_writer_write ww;
    rt_writer_write_init(&ww, w, bytes, sizeof bytes);
    EXPECT_WAIT(&ww, &h, RT_WAIT_WRITE, p.wfd, NULL, "buffered write of 100 bytes");

    /* A few bytes fit in the buffer; their flush waits. */
    rt_writer_write_init(&ww, w, bytes, 10);
    cr_assert_eq(rt_future_poll(&ww.future, &h.cx), RT_READY);
    cr_assert_eq(ww.result, 10);
    rt_writer_flush fl;
    rt_writer_flush_init(&fl, w);
    EXPECT_WAIT(&fl, &h, RT_WAIT_WRITE, p.wfd, NULL, "flush of 10 bytes");

    rt_reader_free(r);
    rt_writer_free(w);
    pipes_close(&p);
}

Test(describe_io, tcp_and_udp_operations_name_their_descriptor_and_address)
{
    rt_runtime *rt = new_runtime(1);
    int fds = count_fds();
    struct hand h;
    hand_init(&h);
    struct sockaddr_in any = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    rt_io *l;
    cr_assert_eq(rt_tcp_listen(rt, (struct sockaddr *)&any, sizeof any, 16, 0, &l), 0);
    int lfd = rt_io_fd(l);

    rt_tcp_accept acc;
    rt_tcp_accept_init(&acc, l);
    EXPECT_WAIT(&acc, &h, RT_WAIT_ACCEPT, lfd, NULL, "accept on ");

    static struct full_listener full;
    full_listener_open(&full);
    char where[64];
    full_listener_words(&full, where, sizeof where);
    rt_tcp_connect conn;
    rt_tcp_connect_init(&conn, rt, (struct sockaddr *)&full.addr, sizeof full.addr);
    rt_wait_info info = describe(&conn.future);
    expect_fields(&info, RT_WAIT_CONNECT, -1, 0, NULL, 0); /* no socket before the first poll */
    expect_words(&info, "connect to ");
    expect_words(&info, where);
    if (rt_future_poll(&conn.future, &h.cx) == RT_PENDING) {
        info = describe(&conn.future);
        cr_assert_geq(info.fd, 0);
        expect_fields(&info, RT_WAIT_CONNECT, info.fd, 0, NULL, 0);
        expect_words(&info, where);
        expect_fd_words(&info, info.fd);
        RT_DROP(&conn);
    } else {
        cr_log_info("the connect to a full backlog finished at once (%lld)",
                    (long long)conn.result);
        rt_io_close(conn.conn);
    }
    full_listener_close(&full);

    rt_io *u;
    cr_assert_eq(rt_udp_bind(rt, (struct sockaddr *)&any, sizeof any, 0, &u), 0);
    int ufd = rt_io_fd(u);
    char buf[16];
    rt_udp_recv_from rf;
    rt_udp_recv_from_init(&rf, u, buf, sizeof buf);
    EXPECT_WAIT(&rf, &h, RT_WAIT_READ, ufd, NULL, "receive");

    /* A datagram send hardly ever waits: described before its poll. */
    struct sockaddr_in to = any;
    to.sin_port = htons(9);
    rt_udp_send_to st;
    rt_udp_send_to_init(&st, u, "hello", 5, (struct sockaddr *)&to, sizeof to);
    EXPECT_WAIT(&st, NULL, RT_WAIT_WRITE, ufd, NULL, "5-byte datagram", "to 127.0.0.1:9");

    cr_assert_eq(rt_io_close(u), 0);
    cr_assert_eq(rt_io_close(l), 0);
    cr_assert_eq(count_fds(), fds);
    finish_runtime(rt, 0);
}

Test(describe_io, unix_socket_operations_name_their_descriptor_and_socket)
{
    rt_runtime *rt = new_runtime(1);
    int fds = count_fds();
    struct hand h;
    hand_init(&h);
    char name[100];
    snprintf(name, sizeof name, "@asyncrt-test-%ld-describe", (long)getpid());
    rt_io *l;
    cr_assert_eq(rt_unix_listen(rt, name, 0, 0, &l), 0);
    int lfd = rt_io_fd(l);

    rt_unix_accept acc;
    rt_unix_accept_init(&acc, l);
    EXPECT_WAIT(&acc, &h, RT_WAIT_ACCEPT, lfd, NULL, "accept on ");

    /* A full backlog makes a connect pause before its next try. */
    struct sockaddr_un addr;
    socklen_t len;
    cr_assert_eq(rt_unix_addr(name, &addr, &len), 0);
    int queued[64];
    int nqueued = 0;
    for (;;) {
        cr_assert_lt(nqueued, 64, "the backlog never filled");
        int s = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        cr_assert_geq(s, 0);
        if (connect(s, (struct sockaddr *)&addr, len) < 0) {
            cr_assert_eq(errno, EAGAIN, "connect: %s", strerror(errno));
            close(s);
            break;
        }
        queued[nqueued++] = s;
    }
    rt_unix_connect c;
    rt_unix_connect_init(&c, rt, name);
    rt_wait_info info = describe_pending(&c.future, &h);
    cr_assert_geq(info.fd, 0);
    expect_fields(&info, RT_WAIT_CONNECT, c.fd, c.pause.deadline_ns, NULL, 0);
    expect_words(&info, "connect to unix socket ");
    expect_words(&info, name);
    expect_fd_words(&info, c.fd);
    expect_words(&info, "backlog full");
    RT_DROP(&c);
    for (int i = 0; i < nqueued; i++)
        close(queued[i]);

    rt_io *a, *b;
    cr_assert_eq(rt_unix_pair(rt, SOCK_STREAM, &a, &b), 0);
    int afd = rt_io_fd(a), bfd = rt_io_fd(b);
    char buf[16];
    rt_unix_recv_fds rfds;
    rt_unix_recv_fds_init(&rfds, b, buf, sizeof buf, 2);
    EXPECT_WAIT(&rfds, &h, RT_WAIT_READ, bfd, NULL, "receive of descriptors");

    fill_socket(afd);
    int passed[2] = {0, 1};
    rt_unix_send_fds sfds;
    rt_unix_send_fds_init(&sfds, a, "x", 1, passed, 2);
    EXPECT_WAIT(&sfds, &h, RT_WAIT_WRITE, afd, NULL, "send of 2 descriptors");

    rt_io *d;
    char dname[100];
    snprintf(dname, sizeof dname, "@asyncrt-test-%ld-describe-dgram", (long)getpid());
    cr_assert_eq(rt_unix_dgram_bind(rt, dname, 0, &d), 0);
    int dfd = rt_io_fd(d);
    rt_unix_recv_from rf;
    rt_unix_recv_from_init(&rf, d, buf, sizeof buf);
    EXPECT_WAIT(&rf, &h, RT_WAIT_READ, dfd, NULL, "receive of a datagram");

    /* A datagram send hardly ever waits: described before its poll. */
    rt_unix_send_to st;
    rt_unix_send_to_init(&st, d, "x", 1, &addr, len);
    EXPECT_WAIT(&st, NULL, RT_WAIT_WRITE, dfd, NULL, "send of a datagram", name);

    cr_assert_eq(rt_io_close(d), 0);
    cr_assert_eq(rt_io_close(a), 0);
    cr_assert_eq(rt_io_close(b), 0);
    cr_assert_eq(rt_io_close(l), 0);
    cr_assert_eq(count_fds(), fds);
    finish_runtime(rt, 0);
}

/* ---- the blocking pool: files and names ------------------------------------------- */

Test(describe_io, file_operations_name_their_path_or_descriptor)
{
    char dir[] = "/tmp/asyncrt-describe-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char path[64], renamed[64];
    snprintf(path, sizeof path, "%s/data", dir);
    snprintf(renamed, sizeof renamed, "%s/moved", dir);
    int created = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    cr_assert_geq(created, 0);
    close(created);
    int fds = count_fds();

    static struct pool_gate pool = {EVENT_INIT, EVENT_INIT, NULL};
    rt_runtime *rt = runtime_with_held_pool(&pool);
    struct hand h;
    hand_init(&h);

    /* Queued behind the gate: each waits for its turn on the pool. */
    static rt_file_open op;
    rt_file_open_init(&op, rt, path, O_RDONLY, 0);
    EXPECT_WAIT(&op, &h, RT_WAIT_BLOCKING, -1, NULL, "open of ", path, "on the blocking pool");

    static rt_fs_op mv;
    rt_fs_rename_init(&mv, rt, path, renamed);
    EXPECT_WAIT(&mv, &h, RT_WAIT_BLOCKING, -1, NULL, "rename of ", path, renamed);

    static rt_fs_read_file whole;
    rt_fs_read_file_init(&whole, rt, path, 1024);
    EXPECT_WAIT(&whole, &h, RT_WAIT_BLOCKING, -1, NULL, path);

    pool_gate_release(&pool);
    rt_file_open_init(&op, rt, path, O_RDONLY, 0);
    poll_to_end(&op.future);
    cr_assert_eq(op.result, 0, "open: %s", rt_strerror((int)op.result));
    rt_file *f = op.file;
    int ffd = rt_file_fd(f);

    /* The pool is free now: a read may finish before its first poll ends,
     * so it is described before that poll, and again if it waits. */
    char buf[16];
    static rt_file_read rd;
    rt_file_read_init(&rd, f, buf, sizeof buf);
    rt_wait_info info = describe(&rd.future);
    expect_fields(&info, RT_WAIT_BLOCKING, ffd, 0, NULL, 0);
    expect_words(&info, "read of ");
    expect_fd_words(&info, ffd);
    if (rt_future_poll(&rd.future, &h.cx) == RT_PENDING) {
        info = describe(&rd.future);
        expect_fields(&info, RT_WAIT_BLOCKING, ffd, 0, NULL, 0);
    }
    RT_DROP(&rd);

    cr_assert_eq(rt_file_close(f), 0);
    finish_runtime(rt, 0);
    cr_assert_eq(count_fds(), fds);
    cr_assert_eq(unlink(path), 0);
    cr_assert_eq(rmdir(dir), 0);
}

Test(describe_io, lookups_and_connects_by_name_say_what_they_wait_for)
{
    int fds = count_fds();
    static struct pool_gate pool = {EVENT_INIT, EVENT_INIT, NULL};
    rt_runtime *rt = runtime_with_held_pool(&pool);
    struct hand h;
    hand_init(&h);

    /* Dropped while queued behind the gate: the lookups never run. */
    static rt_resolve look;
    cr_assert_eq(rt_resolve_init(&look, rt, "example.org", "443", AF_UNSPEC, 0), 0);
    EXPECT_WAIT(&look, &h, RT_WAIT_BLOCKING, -1, NULL, "name lookup of example.org:443");

    static rt_resolve_connect byname;
    cr_assert_eq(rt_resolve_connect_init(&byname, rt, "example.org", "443", AF_UNSPEC, 0), 0);
    EXPECT_WAIT(&byname, &h, RT_WAIT_CONNECT, -1, NULL, "connect to example.org:443",
                "name lookup");
    pool_gate_release(&pool);

    /* Addresses given: an attempt waits on a full backlog. */
    static struct full_listener full;
    full_listener_open(&full);
    char where[64];
    full_listener_words(&full, where, sizeof where);
    static rt_resolve_addr entry;
    memcpy(&entry.addr, &full.addr, sizeof full.addr);
    entry.len = sizeof full.addr;
    entry.family = AF_INET;
    static rt_resolve_addrs list = {1, &entry};
    static rt_resolve_connect byaddr;
    cr_assert_eq(rt_resolve_connect_addrs_init(&byaddr, rt, &list), 0);
    if (rt_future_poll(&byaddr.future, &h.cx) == RT_PENDING) {
        rt_wait_info info = describe(&byaddr.future);
        cr_assert_geq(info.fd, 0);
        expect_fields(&info, RT_WAIT_CONNECT, info.fd, 0, NULL, 0);
        expect_words(&info, "connect to one of 1 addresses, attempt 1 of 1: connect to ");
        expect_words(&info, where);
        expect_fd_words(&info, info.fd);
        RT_DROP(&byaddr);
    } else {
        cr_log_info("the connect to a full backlog finished at once (%lld)",
                    (long long)byaddr.result);
        rt_io_close(byaddr.conn);
    }
    full_listener_close(&full);

    finish_runtime(rt, 0);
    cr_assert_eq(count_fds(), fds);
}

/* ---- signals and processes ------------------------------------------------------------ */

Test(describe_io, a_signal_receive_names_its_signal)
{
    rt_runtime *rt = new_runtime(1);
    int fds = count_fds();
    struct hand h;
    hand_init(&h);
    rt_signal *s;
    cr_assert_eq(rt_signal_new(rt, SIGUSR2, &s), 0);
    rt_signal_recv rx;
    rt_signal_recv_init(&rx, s);
    rt_wait_info info = describe_pending(&rx.future, &h);
    expect_fields(&info, RT_WAIT_SIGNAL, -1, 0, NULL, SIGUSR2);
    expect_words(&info, "signal SIGUSR2");
    RT_DROP(&rx);
    rt_signal_free(s);
    cr_assert_eq(count_fds(), fds);
    finish_runtime(rt, 0);
}

Test(describe_io, a_process_wait_names_its_child)
{
    rt_runtime *rt = new_runtime(1);
    int fds = count_fds();
    struct hand h;
    hand_init(&h);
    /* cat waits for the end of its input, which comes when the pipe is
     * closed. */
    static const char *const argv[] = {"cat", NULL};
    rt_process_options o;
    rt_process_options_init(&o);
    o.argv = argv;
    o.stdin_mode = RT_STDIO_PIPE;
    rt_process *p;
    cr_assert_eq(rt_process_spawn(rt, &o, &p), 0);
    pid_t pid = rt_process_pid(p);
    rt_process_exited w;
    rt_process_exited_init(&w, p);
    rt_wait_info info = describe_pending(&w.future, &h);
    expect_fields(&info, RT_WAIT_PROCESS, -1, 0, NULL, pid);
    char words[64];
    snprintf(words, sizeof words, "exit of process %ld", (long)pid);
    expect_words(&info, words);
    RT_DROP(&w);

    cr_assert_eq(rt_process_close_stdio(p, 0), 0);
    rt_process_exited_init(&w, p);
    poll_to_end(&w.future);
    cr_assert_eq(w.result, 0);
    cr_assert_eq(w.code, 0);
    rt_process_free(p);
    cr_assert_eq(count_fds(), fds);
    finish_runtime(rt, 0);
}
