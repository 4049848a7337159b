/* Misuse of a counted reference the library handed out (a channel side, a
 * oneshot side, a group, a join handle): a release beyond its count, or a
 * use after its release, found while the object is still allocated. The
 * call that finds it changes nothing and reports it (report.c). Internal,
 * not installed. */
#ifndef RT_SRC_MISUSE_H
#define RT_SRC_MISUSE_H

/* Reports the misuse through the rt_config.report of the runtime whose
 * worker is calling (rt_current_runtime), or rt_report_print on any other thread:
 * `function` is the public function misused, `object` what it was given,
 * `what` says what was wrong (a static string). Never blocks on a lock of
 * the object: call it after unlocking. */
void rt__report_misuse(const char *function, const void *object, const char *what);

#endif
