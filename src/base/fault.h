/* Fault injection: every resource the library asks the system for goes
 * through one of the wrappers below, so that a test can make the Nth such
 * request fail (or every request from the Nth on) and check that the failure
 * reaches the caller as a negative errno with nothing left half-done.
 *
 * Without -Dfault_injection=true (RT_FAULT_INJECTION undefined) every wrapper
 * is the plain call it wraps, inlined: no counter, no branch, no cost.
 *
 * With it, each wrapper first asks rt__fault_check(), which counts the request
 * and says whether to fail it and with which errno. The counter is one
 * process-wide atomic, so the Nth request is the Nth in whatever order the
 * runtime's threads happened to make them; tests treat N as a position in a
 * run, not as a fixed call site, and report the site that failed.
 *
 * The library makes these requests only through the wrappers
 * (tests/fault_sites_test.sh keeps it so); free, close, munmap and madvise,
 * whose failure nobody could act on, are called directly. Internal, not
 * installed. */
#ifndef RT_SRC_FAULT_H
#define RT_SRC_FAULT_H

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>

/* What a request asks for; each has the errno the system gives when it runs
 * out of it, used unless the test chose another. */
typedef enum rt__fault_kind {
    RT__FAULT_ALLOC,  /* malloc, calloc, realloc, aligned_alloc, a pool block: ENOMEM */
    RT__FAULT_MMAP,   /* mmap: ENOMEM */
    RT__FAULT_THREAD, /* pthread_create: EAGAIN */
    RT__FAULT_SYNC,   /* pthread_mutex_init, pthread_cond_init: ENOMEM */
    RT__FAULT_FD,     /* a call that creates a descriptor: EMFILE */
    RT__FAULT_EPOLL,  /* epoll_ctl ADD: ENOMEM (the kernel's watch memory) */
    RT__FAULT_KINDS
} rt__fault_kind;

#ifdef RT_FAULT_INJECTION

/* Counts one request of `kind` made at `site` ("file:line") and returns the
 * errno to fail it with, or 0 to let it through. Any thread. */
int rt__fault_check(rt__fault_kind kind, const char *site);

/* For tests. Makes request number `nth` (counting from 1 after this call)
 * fail, and every later one too when `persistent`; nth 0 fails none. Only
 * requests of the kinds whose bit (1u << kind) is set in `kinds` are counted
 * (0: all kinds). `err` is the errno to fail with, 0 for each kind's own.
 * Call it while no thread of the library runs. */
void rt__fault_arm(uint64_t nth, bool persistent, uint32_t kinds, int err);
/* Requests counted and failed since the last arm, and the "file:line" of the
 * first one failed (NULL when none). Any thread; the site is stored after
 * the failure is counted, so it is exact once the threads that make requests
 * have stopped (after rt_runtime_free), and a hint before. */
uint64_t rt__fault_calls(void);
uint64_t rt__fault_failed(void);
const char *rt__fault_first_site(void);

#define RT__FAULT_STR2(x) #x
#define RT__FAULT_STR(x) RT__FAULT_STR2(x)
#define RT__FAULT_SITE __FILE__ ":" RT__FAULT_STR(__LINE__)
#define RT__FAULT(kind) rt__fault_check((kind), RT__FAULT_SITE)

#else

#define RT__FAULT(kind) 0

#endif

/* The wrappers are macros so that each reports its caller's file and line;
 * the statement expressions fail the call the way the real one fails. */

#define rt__malloc(size)                                                                           \
    ({                                                                                             \
        int rt__e_ = RT__FAULT(RT__FAULT_ALLOC);                                                   \
        rt__e_ != 0 ? (errno = rt__e_, (void *)NULL) : malloc(size);                               \
    })

#define rt__calloc(n, size)                                                                        \
    ({                                                                                             \
        int rt__e_ = RT__FAULT(RT__FAULT_ALLOC);                                                   \
        rt__e_ != 0 ? (errno = rt__e_, (void *)NULL) : calloc((n), (size));                        \
    })

#define rt__realloc(ptr, size)                                                                     \
    ({                                                                                             \
        int rt__e_ = RT__FAULT(RT__FAULT_ALLOC);                                                   \
        rt__e_ != 0 ? (errno = rt__e_, (void *)NULL) : realloc((ptr), (size));                     \
    })

#define rt__aligned_alloc(align, size)                                                             \
    ({                                                                                             \
        int rt__e_ = RT__FAULT(RT__FAULT_ALLOC);                                                   \
        rt__e_ != 0 ? (errno = rt__e_, (void *)NULL) : aligned_alloc((align), (size));             \
    })

#define rt__mmap(addr, len, prot, flags, fd, off)                                                  \
    ({                                                                                             \
        int rt__e_ = RT__FAULT(RT__FAULT_MMAP);                                                    \
        rt__e_ != 0 ? (errno = rt__e_, MAP_FAILED)                                                 \
                    : mmap((addr), (len), (prot), (flags), (fd), (off));                           \
    })

/* pthread functions return the error instead of setting errno. */
#define rt__pthread_create(thread, attr, start, arg)                                               \
    ({                                                                                             \
        int rt__e_ = RT__FAULT(RT__FAULT_THREAD);                                                  \
        rt__e_ != 0 ? rt__e_ : pthread_create((thread), (attr), (start), (arg));                   \
    })

#define rt__pthread_mutex_init(mutex, attr)                                                        \
    ({                                                                                             \
        int rt__e_ = RT__FAULT(RT__FAULT_SYNC);                                                    \
        rt__e_ != 0 ? rt__e_ : pthread_mutex_init((mutex), (attr));                                \
    })

#define rt__pthread_cond_init(cond, attr)                                                          \
    ({                                                                                             \
        int rt__e_ = RT__FAULT(RT__FAULT_SYNC);                                                    \
        rt__e_ != 0 ? rt__e_ : pthread_cond_init((cond), (attr));                                  \
    })

/* Descriptor-creating system calls: -1 with errno set, as the real ones. */
#define RT__FAULT_FD_CALL(kind, call)                                                              \
    ({                                                                                             \
        int rt__e_ = RT__FAULT(kind);                                                              \
        rt__e_ != 0 ? (errno = rt__e_, -1) : (call);                                               \
    })

#define rt__epoll_create1(flags) RT__FAULT_FD_CALL(RT__FAULT_FD, epoll_create1(flags))
#define rt__eventfd(initval, flags) RT__FAULT_FD_CALL(RT__FAULT_FD, eventfd((initval), (flags)))
#define rt__socket(domain, type, protocol)                                                         \
    RT__FAULT_FD_CALL(RT__FAULT_FD, socket((domain), (type), (protocol)))
#define rt__accept4(fd, addr, len, flags)                                                          \
    RT__FAULT_FD_CALL(RT__FAULT_FD, accept4((fd), (addr), (len), (flags)))
#define rt__open(path, flags) RT__FAULT_FD_CALL(RT__FAULT_FD, open((path), (flags)))
#define rt__signalfd(fd, mask, flags)                                                              \
    RT__FAULT_FD_CALL(RT__FAULT_FD, signalfd((fd), (mask), (flags)))
#define rt__dup_cloexec(fd) RT__FAULT_FD_CALL(RT__FAULT_FD, fcntl((fd), F_DUPFD_CLOEXEC, 0))
#define rt__pipe2(fds, flags) RT__FAULT_FD_CALL(RT__FAULT_FD, pipe2((fds), (flags)))
#define rt__pidfd_open(pid) RT__FAULT_FD_CALL(RT__FAULT_FD, (int)syscall(SYS_pidfd_open, (pid), 0))
#define rt__epoll_ctl(epfd, op, fd, event)                                                         \
    RT__FAULT_FD_CALL(RT__FAULT_EPOLL, epoll_ctl((epfd), (op), (fd), (event)))

/* Unix sockets (src/toolkit/unix.c): a connected pair, and a receive that
 * may create descriptors (SCM_RIGHTS). */
#ifndef rt__socketpair
#define rt__socketpair(domain, type, protocol, fds)                                                \
    RT__FAULT_FD_CALL(RT__FAULT_FD, socketpair((domain), (type), (protocol), (fds)))
#endif
#define rt__recvmsg_fds(fd, msg, flags)                                                            \
    ({                                                                                             \
        int rt__e_ = RT__FAULT(RT__FAULT_FD);                                                      \
        rt__e_ != 0 ? (errno = rt__e_, (ssize_t)-1) : recvmsg((fd), (msg), (flags));               \
    })

/* open(2) with the permission bits for O_CREAT (rt__open passes none). */
#define rt__open_mode(path, flags, mode)                                                           \
    RT__FAULT_FD_CALL(RT__FAULT_FD, open((path), (flags), (mode)))

#endif
