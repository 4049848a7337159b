/* The hook of RT__DEBUG_WINDOW (atomic.h): a debug-yield build's white-box
 * tests set it to stretch a named race window. Other builds have neither the
 * hook nor the windows. */
#include "atomic.h"

#ifdef RT_DEBUG_YIELD
void (*volatile rt__debug_window_hook)(const char *window);
#else
/* ISO C wants a translation unit to declare something. */
typedef int rt__no_debug_window;
#endif
