/* Definitions every source file of the library shares. Internal, not installed. */
#ifndef RT_SRC_COMMON_H
#define RT_SRC_COMMON_H

/* Marks a public function: the library is built with hidden visibility so that
 * only the rt_ API, never an rt__ internal, is exported from the shared object. */
#define RT_EXPORT __attribute__((visibility("default")))

#define RT_CACHELINE 64
#define RT_ALIGNED_CACHELINE __attribute__((aligned(RT_CACHELINE)))

#define rt__unlikely(x) __builtin_expect(!!(x), 0)
#define rt__likely(x) __builtin_expect(!!(x), 1)

#endif
