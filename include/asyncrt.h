/* asyncrt: Rust-style futures on a work-stealing pool of threads, for C11 on
 * Linux. Include this one header; each concept has its own under asyncrt/. */
#ifndef ASYNCRT_H
#define ASYNCRT_H

#include "asyncrt/version.h"
#include "asyncrt/error.h"
#include "asyncrt/future.h"
#include "asyncrt/coro.h"
#include "asyncrt/combine.h"
#include "asyncrt/runtime.h"
#include "asyncrt/task.h"
#include "asyncrt/metrics.h"
#include "asyncrt/diag.h"
#include "asyncrt/timer.h"
#include "asyncrt/io.h"
#include "asyncrt/net.h"
#include "asyncrt/bufio.h"
#include "asyncrt/signal.h"
#include "asyncrt/unix.h"
#include "asyncrt/resolve.h"
#include "asyncrt/fs.h"
#include "asyncrt/process.h"
#include "asyncrt/sync.h"
#include "asyncrt/channel.h"
#include "asyncrt/group.h"
#include "asyncrt/fiber.h"
#include "asyncrt/trace.h"

#endif
