/* Resolves the name given as its argument with rt_resolve and prints each
 * IPv4 address found, one per line: the hosts-file test runs it where
 * /etc/hosts is a temporary file (tests/resolve_hosts_test.sh). Exit
 * status 0 when the lookup succeeded, 1 when it failed (the error on
 * standard error), 2 when a call failed. */
#include <asyncrt.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>

struct lookup {
    rt_coro co;
    const char *name;
    rt_resolve op;
};

static void lookup_drop(void *state)
{
    struct lookup *l = state;
    rt_coro_cleanup(&l->co);
    rt_resolve_addrs_free(l->op.addrs);
}

static rt_poll lookup_poll(void *state, rt_context *cx, void **out)
{
    struct lookup *l = state;
    RT_CORO_BEGIN(&l->co);
    rt_resolve_init(&l->op, NULL, l->name, NULL, AF_INET, 0);
    RT_AWAIT(&l->co, cx, &l->op);
    if (l->op.result < 0) {
        fprintf(stderr, "%s: %s\n", l->name, rt_resolve_strerror((int)l->op.result, l->op.eai));
        RT_RETURN(&l->co, out, (intptr_t)1);
    }
    for (size_t i = 0; i < l->op.addrs->count; i++) {
        char text[INET_ADDRSTRLEN];
        const struct sockaddr_in *in = (const struct sockaddr_in *)&l->op.addrs->addr[i].addr;
        printf("%s\n", inet_ntop(AF_INET, &in->sin_addr, text, sizeof text));
    }
    RT_RETURN(&l->co, out, (intptr_t)0);
    RT_CORO_END(&l->co, out);
}

int main(int argc, char **argv)
{
    if (argc != 2)
        return 2;
    rt_runtime *rt;
    if (rt_runtime_new(NULL, &rt) < 0)
        return 2;
    struct lookup l = {.name = argv[1]};
    void *status = NULL;
    int err = rt_block_on(rt, lookup_poll, lookup_drop, &l, sizeof l, &status, NULL);
    rt_runtime_free(rt);
    return err < 0 ? 2 : (int)(intptr_t)status;
}
