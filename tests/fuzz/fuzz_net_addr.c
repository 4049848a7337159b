/* Fuzzes rt_net_addr with the input as a NUL-terminated IP string; the port
 * is derived from the input so that it varies too. An accepted address must
 * be a well-formed sockaddr that prints back to the same address. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>

#include <asyncrt/net.h>

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *ip = fuzz_string(data, size);
    uint16_t port = 0;
    for (size_t i = 0; i < size; i++)
        port = (uint16_t)(port * 31u + data[i]);
    struct sockaddr_storage addr;
    socklen_t len = 0;
    int r = rt_net_addr(ip, port, &addr, &len);
    FUZZ_CHECK(r == 0 || r == -EINVAL);
    if (r == 0) {
        char text[INET6_ADDRSTRLEN];
        if (addr.ss_family == AF_INET) {
            struct sockaddr_in *v4 = (struct sockaddr_in *)&addr;
            struct in_addr back;
            FUZZ_CHECK(len == sizeof(*v4) && ntohs(v4->sin_port) == port);
            FUZZ_CHECK(inet_ntop(AF_INET, &v4->sin_addr, text, sizeof(text)) != NULL);
            FUZZ_CHECK(inet_pton(AF_INET, text, &back) == 1);
            FUZZ_CHECK(memcmp(&back, &v4->sin_addr, sizeof(back)) == 0);
        } else {
            struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&addr;
            struct in6_addr back;
            FUZZ_CHECK(addr.ss_family == AF_INET6);
            FUZZ_CHECK(len == sizeof(*v6) && ntohs(v6->sin6_port) == port);
            FUZZ_CHECK(inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof(text)) != NULL);
            FUZZ_CHECK(inet_pton(AF_INET6, text, &back) == 1);
            FUZZ_CHECK(memcmp(&back, &v6->sin6_addr, sizeof(back)) == 0);
        }
    }
    /* Bad arguments are refused, not dereferenced. */
    FUZZ_CHECK(rt_net_addr(ip, port, NULL, &len) == -EINVAL);
    FUZZ_CHECK(rt_net_addr(ip, port, &addr, NULL) == -EINVAL);
    free(ip);
    return 0;
}
