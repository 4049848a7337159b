/* The diagnostics' hook table (diag_hooks.h): what the scheduler and the
 * reactor call of this layer. */
#include "diag_hooks.h"
#include "diagnostics.h"
#include "trace_buf.h"

static const rt__diag_hooks table = {
    .trace_record = rt__trace_record,
    .report_lost = rt__report_lost,
};

void rt__diag_install(void)
{
    rt__diag_hooks_install(&table);
}
