/* The readable task dump (rt_runtime_dump): rt_runtime_tasks' tasks,
 * grouped by what they are doing, laid out like Go's goroutine dump. It
 * needs nothing but what rt_runtime_tasks gives (a user could write the
 * same), except that the reactor's dump on a signal must not wait for a
 * shutdown (rt__runtime_tasks). */
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <asyncrt/diag.h>
#include <asyncrt/task.h>

#include "common.h"
#include "dump_signal.h"
#include "fault.h"
#include "diagnostics.h"
#include "runtime_services.h"

/* Ids listed per group before "and N more". */
#define DUMP_IDS 8

/* Tasks that share a state, an await point, what they wait for (its kind)
 * and a spawn point: one block of the dump. The strings compared by address
 * are static (file names, function names, spawn sites). */
typedef struct dump_group {
    rt_task_state state;
    const char *await_file;
    int await_line;
    const char *await_function;
    rt_wait_kind kind;
    const char *spawned_at;
    bool lost;
    int worker; /* for running tasks only: one group per worker */
    size_t count;
    uint64_t ids[DUMP_IDS];
    /* The first task's particulars. */
    char name[RT_TASK_NAME_MAX + 1];
    char text[sizeof(((rt_wait_info *)0)->text)];
    uint64_t polls;
    int64_t busy_ns, idle_ns, running_ns;
    /* Fibers: tasks with different backtraces are different groups. */
    size_t stack_size, stack_depth, stack_touched;
    unsigned backtrace_len;
    const void *backtrace[RT_TASK_BACKTRACE_MAX];
} dump_group;

typedef struct dump_state {
    dump_group *groups;
    size_t len, cap;
    size_t by_state[4];
    size_t lost;
    bool failed; /* out of memory */
} dump_state;

static bool same_group(const dump_group *g, const rt_task_info *t)
{
    return g->state == t->state && g->await_file == t->await_file &&
           g->await_line == t->await_line && g->await_function == t->await_function &&
           g->kind == t->wait.kind && g->spawned_at == t->spawned_at && g->lost == t->lost_wakeup &&
           (t->state != RT_TASK_RUNNING || g->worker == t->worker) &&
           g->backtrace_len == t->backtrace_len &&
           memcmp(g->backtrace, t->backtrace, t->backtrace_len * sizeof(t->backtrace[0])) == 0;
}

static int collect(const rt_task_info *t, void *arg)
{
    dump_state *d = arg;
    if ((unsigned)t->state < 4)
        d->by_state[t->state]++;
    if (t->lost_wakeup)
        d->lost++;
    /* Groups are few (one per place in the code), so a linear search. */
    for (size_t i = 0; i < d->len; i++) {
        dump_group *g = &d->groups[i];
        if (same_group(g, t)) {
            if (g->count < DUMP_IDS)
                g->ids[g->count] = t->id;
            g->count++;
            return 0;
        }
    }
    if (d->len == d->cap) {
        size_t cap = d->cap != 0 ? 2 * d->cap : 16;
        dump_group *grown = rt__realloc(d->groups, cap * sizeof(*grown));
        if (grown == NULL) {
            d->failed = true;
            return -ENOMEM;
        }
        d->groups = grown;
        d->cap = cap;
    }
    dump_group *g = &d->groups[d->len++];
    memset(g, 0, sizeof(*g));
    g->state = t->state;
    g->await_file = t->await_file;
    g->await_line = t->await_line;
    g->await_function = t->await_function;
    g->kind = t->wait.kind;
    g->spawned_at = t->spawned_at;
    g->lost = t->lost_wakeup;
    g->worker = t->worker;
    g->count = 1;
    g->ids[0] = t->id;
    if (t->name != NULL)
        snprintf(g->name, sizeof g->name, "%s", t->name);
    snprintf(g->text, sizeof g->text, "%s", t->wait.text);
    g->polls = t->polls;
    g->busy_ns = t->busy_ns;
    g->idle_ns = t->idle_ns;
    g->running_ns = t->running_ns;
    g->stack_size = t->stack_size;
    g->stack_depth = t->stack_depth;
    g->stack_touched = t->stack_touched;
    g->backtrace_len = t->backtrace_len;
    memcpy(g->backtrace, t->backtrace, sizeof g->backtrace);
    return 0;
}

static int by_count_desc(const void *a, const void *b)
{
    const dump_group *x = a, *y = b;
    if (x->count != y->count)
        return x->count < y->count ? 1 : -1;
    return (int)x->state - (int)y->state;
}

/* Where the dump goes: a stream or a descriptor, through one formatter. */
typedef struct dump_out {
    FILE *stream;
    int fd;
    int err;
} dump_out;

static void emit(dump_out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void emit(dump_out *o, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0 || o->err != 0)
        return;
    size_t len = (size_t)n < sizeof line ? (size_t)n : sizeof line - 1;
    if (o->stream != NULL) {
        if (fwrite(line, 1, len, o->stream) != len)
            o->err = -EIO;
        return;
    }
    for (size_t done = 0; done < len;) {
        ssize_t w = write(o->fd, line + done, len - done);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            o->err = -errno;
            return;
        }
        done += (size_t)w;
    }
}

static const char *state_word(rt_task_state s)
{
    switch (s) {
    case RT_TASK_WAITING:
        return "waiting";
    case RT_TASK_SCHEDULED:
        return "scheduled";
    case RT_TASK_RUNNING:
        return "running";
    case RT_TASK_FINISHED:
        return "finished, not joined";
    }
    return "?";
}

static void emit_ms(char *buf, size_t len, int64_t ns)
{
    snprintf(buf, len, "%lld.%03lld ms", (long long)(ns / 1000000), (long long)(ns / 1000 % 1000));
}

/* Bytes as KiB with one decimal. */
static void emit_kib(char *buf, size_t len, size_t bytes)
{
    snprintf(buf, len, "%zu.%zu KiB", bytes / 1024, bytes % 1024 * 10 / 1024);
}

/* A return address as the dynamic symbol table names it ("fn+0x1c"), with
 * the object and the offset in it, which `addr2line -f -e OBJECT OFFSET`
 * turns into file:line; the address alone when no object holds it. A
 * symbol is trusted only when its size covers the address: dladdr gives
 * the nearest exported one, which for a static function is another. */
static void emit_frame(dump_out *o, unsigned i, const void *pc)
{
    /* pc - 1: inside the call, not after it (a call that ends a function
     * returns into the next). */
    const char *inside = (const char *)pc - 1;
    Dl_info info;
    const ElfW(Sym) *sym = NULL;
    if (dladdr1(inside, &info, (void **)&sym, RTLD_DL_SYMENT) == 0 || info.dli_fname == NULL) {
        emit(o, "      #%u %p\n", i, pc);
        return;
    }
    const char *object = strrchr(info.dli_fname, '/');
    object = object != NULL ? object + 1 : info.dli_fname;
    if (object[0] == '\0')
        object = "the executable";
    size_t offset = (size_t)((const char *)pc - (const char *)info.dli_fbase);
    if (sym != NULL && info.dli_sname != NULL && info.dli_saddr != NULL &&
        inside < (const char *)info.dli_saddr + sym->st_size)
        emit(o, "      #%u %s+0x%zx (%s+0x%zx)\n", i, info.dli_sname,
             (size_t)((const char *)pc - (const char *)info.dli_saddr), object, offset);
    else
        emit(o, "      #%u %s+0x%zx\n", i, object, offset);
}

static void emit_fiber(dump_out *o, const dump_group *g)
{
    const char *first = g->count > 1 ? "the first: " : "";
    char size[32], depth[32], touched[48] = "";
    emit_kib(size, sizeof size, g->stack_size);
    emit_kib(depth, sizeof depth, g->stack_depth);
    if (g->stack_touched > 0) {
        char t[32];
        emit_kib(t, sizeof t, g->stack_touched);
        snprintf(touched, sizeof touched, ", pages touched %s", t);
    }
    emit(o, "    %sfiber stack %s, %s in use at its deepest switch%s\n", first, size, depth,
         touched);
    if (g->backtrace_len == 0)
        return;
    emit(o, "    backtrace from the await up:\n");
    for (unsigned i = 0; i < g->backtrace_len; i++)
        emit_frame(o, i, g->backtrace[i]);
}

static void emit_group(dump_out *o, const dump_group *g)
{
    emit(o, "%zu task%s %s", g->count, g->count == 1 ? "" : "s", state_word(g->state));
    if (g->state == RT_TASK_RUNNING && g->worker >= 0)
        emit(o, " on worker %d", g->worker);
    if (g->await_file != NULL)
        emit(o, " at %s:%d in %s", g->await_file, g->await_line,
             g->await_function != NULL ? g->await_function : "?");
    emit(o, "%s\n", g->lost ? "  [LOST WAKE-UP: no waker exists]" : "");
    if (g->state == RT_TASK_WAITING || g->state == RT_TASK_FINISHED)
        emit(o, "    %s%s\n", g->count > 1 ? "the first: " : "", g->text);
    emit(o, "    id%s", g->count == 1 ? "" : "s");
    size_t shown = g->count < DUMP_IDS ? g->count : DUMP_IDS;
    for (size_t i = 0; i < shown; i++)
        emit(o, "%s %llu", i == 0 ? "" : ",", (unsigned long long)g->ids[i]);
    if (g->count > shown)
        emit(o, " and %zu more", g->count - shown);
    if (g->name[0] != '\0')
        emit(o, " (%s\"%s\")", g->count > 1 ? "the first: " : "", g->name);
    emit(o, "\n");
    if (g->spawned_at != NULL)
        emit(o, "    spawned at %s\n", g->spawned_at);
    if (g->polls > 0 || g->busy_ns > 0) {
        char busy[32], idle[32] = "-", running[64] = "";
        emit_ms(busy, sizeof busy, g->busy_ns);
        if (g->idle_ns >= 0)
            emit_ms(idle, sizeof idle, g->idle_ns);
        if (g->running_ns >= 0) {
            char r[32];
            emit_ms(r, sizeof r, g->running_ns);
            snprintf(running, sizeof running, ", this poll %s", r);
        }
        emit(o, "    %spolls %llu, busy %s, idle %s%s\n", g->count > 1 ? "the first: " : "",
             (unsigned long long)g->polls, busy, idle, running);
    }
    if (g->stack_size > 0)
        emit_fiber(o, g);
    emit(o, "\n");
}

static int dump_to(rt_runtime *rt, dump_out *o, bool wait)
{
    dump_state d;
    memset(&d, 0, sizeof d);
    int n = rt__runtime_tasks(rt, collect, &d, wait);
    if (n < 0) {
        free(d.groups);
        return d.failed ? -ENOMEM : n;
    }
    if (d.len > 1) /* qsort must not be given NULL, which an empty runtime leaves */
        qsort(d.groups, d.len, sizeof(*d.groups), by_count_desc);
    emit(o,
         "asyncrt task dump: %d tasks: %zu waiting, %zu scheduled, %zu running, %zu finished "
         "but not joined; %u workers\n",
         n, d.by_state[RT_TASK_WAITING], d.by_state[RT_TASK_SCHEDULED], d.by_state[RT_TASK_RUNNING],
         d.by_state[RT_TASK_FINISHED], rt_runtime_workers(rt));
    if (d.lost > 0)
        emit(o, "%zu lost wake-up%s: waiting, and no waker for them exists\n", d.lost,
             d.lost == 1 ? "" : "s");
    emit(o, "\n");
    for (size_t i = 0; i < d.len; i++)
        emit_group(o, &d.groups[i]);
    free(d.groups);
    return o->err;
}

RT_EXPORT int rt_runtime_dump(rt_runtime *rt, FILE *out)
{
    if (rt == NULL || out == NULL)
        return -EINVAL;
    dump_out o = {out, -1, 0};
    int err = dump_to(rt, &o, true);
    if (err == 0 && (fflush(out) != 0 || ferror(out)))
        err = -EIO;
    return err;
}

RT_EXPORT int rt_runtime_dump_fd(rt_runtime *rt, int fd)
{
    if (rt == NULL)
        return -EINVAL;
    if (fd < 0)
        return -EBADF;
    dump_out o = {NULL, fd, 0};
    return dump_to(rt, &o, true);
}

int rt__runtime_dump_fd_nowait(rt_runtime *rt, int fd)
{
    dump_out o = {NULL, fd, 0};
    return dump_to(rt, &o, false);
}
