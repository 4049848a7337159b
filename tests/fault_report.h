/* What one fault-injection case (fault_case.c) reports to its driver
 * (test_fault.c), through descriptor FAULT_REPORT_FD. */
#ifndef RT_TESTS_FAULT_REPORT_H
#define RT_TESTS_FAULT_REPORT_H

#include <stdint.h>

#define FAULT_REPORT_FD 3

struct fault_report {
    uint64_t calls;    /* resource requests counted */
    uint64_t failed;   /* requests failed */
    char site[96];     /* "file:line" of the first request failed, or "-" */
    char problem[256]; /* what went wrong; empty when the case passed */
};

#endif
