/* The program the install and subproject tests build the way a user of an
 * installed or vendored asyncrt would: it runs one future and checks that the
 * library it runs with is the version its headers announce. */
#include <asyncrt.h>
#include <stdint.h>
#include <stdio.h>

static rt_poll answer(void *state, rt_context *cx, void **out)
{
    (void)state;
    (void)cx;
    *out = (void *)(uintptr_t)42;
    return RT_READY;
}

int main(void)
{
    rt_runtime *rt;
    if (rt_runtime_new(NULL, &rt) < 0)
        return 1;
    void *value = NULL;
    int err = rt_block_on(rt, answer, NULL, NULL, 0, &value, NULL);
    rt_runtime_free(rt);
    printf("answer %d from asyncrt %s\n", (int)(uintptr_t)value, rt_version_string());
    return err == 0 && (uintptr_t)value == 42 && rt_version() == ASYNCRT_VERSION_HEX ? 0 : 1;
}
