/* The common operation header: polling, finishing, dropping and describing
 * any operation through its vtable, and the vtable every finished operation
 * shares. */
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <asyncrt/diag.h>
#include <asyncrt/future.h>

#include "common.h"
#include "operation.h"
#include "park.h"

/* A finished (or dropped) operation reports its stored result forever and
 * has nothing left to release. Swapping the vtable is what makes a second
 * drop, or a drop after completion, a no-op without a flag in every struct. */
static rt_poll finished_poll(rt_future *f, rt_context *cx)
{
    (void)f;
    (void)cx;
    return RT_READY;
}

/* No describe: rt_future_describe recognises the finished vtable itself. */
const rt_future_vtable rt__finished_vtable = {finished_poll, NULL, NULL};

RT_EXPORT rt_poll rt_future_poll(rt_future *f, rt_context *cx)
{
    if (rt__unlikely(f == NULL))
        return RT_READY;
    if (rt__unlikely(f->vtable == NULL || cx == NULL)) {
        if (f->vtable != &rt__finished_vtable) /* a finished one keeps its result */
            f->result = -EINVAL;
        return RT_READY;
    }
    return f->vtable->poll(f, cx);
}

RT_EXPORT void rt_future_drop(rt_future *f)
{
    if (f == NULL || f->vtable == NULL || f->vtable == &rt__finished_vtable)
        return;
    const rt_future_vtable *vtable = f->vtable;
    /* Finished before the drop runs, so a drop that reaches this operation
     * again (a combinator dropping a child that the user drops too) stops
     * above. */
    f->vtable = &rt__finished_vtable;
    f->result = -ECANCELED;
    if (vtable->drop != NULL)
        vtable->drop(f);
}

RT_EXPORT bool rt_future_is_done(const rt_future *f)
{
    return f != NULL && f->vtable == &rt__finished_vtable;
}

RT_EXPORT rt_poll rt_future_finish(rt_future *f, int64_t result)
{
    return rt__future_finish(f, result);
}

/* ---- Describing what an operation waits for ------------------------------ */

/* How deep combinators may nest in one description. A deeper nesting (or
 * a combinator that contains itself) is shown as "..." instead of growing
 * the stack of the thread that takes a task dump. */
#define DESCRIBE_DEPTH_MAX 8

/* The nesting of rt_wait_info_append calls on this thread. */
static _Thread_local int describe_depth;

static void wait_text_vappend(rt_wait_info *info, const char *fmt, va_list ap)
{
    size_t size = sizeof info->text;
    size_t used = strnlen(info->text, size);
    if (used >= size - 1) {
        info->text[size - 1] = '\0';
        return;
    }
    int n = vsnprintf(info->text + used, size - used, fmt, ap);
    /* A cut text ends in "..." so that the reader knows there was more. */
    if (n >= 0 && (size_t)n >= size - used)
        memcpy(info->text + size - 4, "...", 4);
}

void rt__wait_printf(rt_wait_info *info, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    wait_text_vappend(info, fmt, ap);
    va_end(ap);
}

void rt__wait_seconds(rt_wait_info *info, int64_t ns, bool sign)
{
    /* To the nearest millisecond: a 1.5 s sleep polled a moment ago still
     * reads "1.500 s". */
    uint64_t a = ns < 0 ? (uint64_t)0 - (uint64_t)ns : (uint64_t)ns;
    uint64_t ms = a / 1000000u + (a % 1000000u >= 500000u);
    const char *s = ns < 0 ? "-" : sign ? "+" : "";
    rt__wait_printf(info, "%s%llu.%03llu s", s, (unsigned long long)(ms / 1000u),
                    (unsigned long long)(ms % 1000u));
}

void rt__wait_from_now(rt_wait_info *info, int64_t deadline_ns)
{
    int64_t left;
    /* A deadline far in the past or the future saturates rather than
     * wrapping into the opposite sign. */
    if (__builtin_sub_overflow(deadline_ns, rt__now_ns(), &left))
        left = deadline_ns < 0 ? INT64_MIN : INT64_MAX;
    rt__wait_seconds(info, left, true);
    if (left <= 0)
        rt__wait_printf(info, " (due)");
}

/* Names an operation without a describe function by its poll function: the
 * symbol when the dynamic linker knows one, else the address and, to feed
 * addr2line, the object and offset. */
static void describe_by_poll(const rt_future *f, rt_wait_info *info)
{
    void *addr = (void *)(uintptr_t)f->vtable->poll;
    Dl_info dl;
    memset(&dl, 0, sizeof dl);
    if (dladdr(addr, &dl) != 0 && dl.dli_sname != NULL) {
        rt__wait_printf(info, "operation polled by %s", dl.dli_sname);
        return;
    }
    rt__wait_printf(info, "operation polled by %p", addr);
    if (dl.dli_fname != NULL && dl.dli_fbase != NULL) {
        const char *base = strrchr(dl.dli_fname, '/');
        rt__wait_printf(info, " (%s+0x%lx)", base != NULL ? base + 1 : dl.dli_fname,
                        (unsigned long)((uintptr_t)addr - (uintptr_t)dl.dli_fbase));
    }
}

RT_EXPORT int rt_future_describe(const rt_future *f, rt_wait_info *info)
{
    if (info != NULL) {
        memset(info, 0, sizeof(*info));
        info->fd = -1;
    }
    if (f == NULL || info == NULL)
        return -EINVAL;
    const rt_future_vtable *vtable = f->vtable;
    if (vtable == NULL) {
        rt__wait_printf(info, "not started");
    } else if (vtable == &rt__finished_vtable) {
        rt__wait_printf(info, "finished (result %lld)", (long long)f->result);
    } else if (vtable->describe == NULL) {
        info->kind = RT_WAIT_OTHER;
        describe_by_poll(f, info);
    } else {
        vtable->describe(f, info);
        info->text[sizeof info->text - 1] = '\0';
    }
    return 0;
}

RT_EXPORT void rt_wait_info_append(rt_wait_info *info, const char *sep, const rt_future *inner)
{
    if (info == NULL)
        return;
    rt_wait_info in;
    if (inner == NULL) {
        memset(&in, 0, sizeof in);
        strcpy(in.text, "nothing");
    } else if (describe_depth >= DESCRIBE_DEPTH_MAX) {
        memset(&in, 0, sizeof in);
        strcpy(in.text, "...");
    } else {
        describe_depth++;
        rt_future_describe(inner, &in);
        describe_depth--;
    }
    rt__wait_printf(info, "%s%s", sep != NULL ? sep : "", in.text);
}
