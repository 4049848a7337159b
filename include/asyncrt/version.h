/* asyncrt: the version of the headers, and of the library actually loaded.
 *
 * The macros say which version a program was compiled against; rt_version()
 * and rt_version_string() say which library it runs with, which differ when
 * a shared library was upgraded underneath it. Within 0.x any minor version
 * may change the API; from 1.0 on, a change of the major version alone
 * breaks it. */
#ifndef ASYNCRT_VERSION_H
#define ASYNCRT_VERSION_H

#ifdef __cplusplus
extern "C" {
#endif

#define ASYNCRT_VERSION_MAJOR 0
#define ASYNCRT_VERSION_MINOR 1
#define ASYNCRT_VERSION_PATCH 0
#define ASYNCRT_VERSION_STRING "0.1.0"
/* One number that orders versions: 0x00MMmmpp. */
#define ASYNCRT_VERSION_HEX                                                                        \
    ((ASYNCRT_VERSION_MAJOR << 16) | (ASYNCRT_VERSION_MINOR << 8) | ASYNCRT_VERSION_PATCH)

/* The loaded library's version as ASYNCRT_VERSION_HEX would give it. Any
 * thread. */
unsigned rt_version(void);

/* The loaded library's version as "MAJOR.MINOR.PATCH"; a static string, never
 * NULL. Any thread. */
const char *rt_version_string(void);

#ifdef __cplusplus
}
#endif
#endif
