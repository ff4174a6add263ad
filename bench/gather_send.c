/*
 * What the root's copy into its send batch costs against letting the kernel
 * gather each datagram from three pieces (header, payload in the message,
 * tag): one sender multicasts a 16 MiB message, over and over, in batches of
 * UDP segmentation offload (as ipmc's root does, up to 64 KiB per send), each
 * datagram HEADER + payload + TAG bytes long, and prints the CPU time of the
 * process per byte of payload for both layouts, taking turns:
 *
 *   copy    the datagrams copied one after another into one buffer, sent as
 *           one iovec (ipmc's way);
 *   gather  three iovecs per datagram, the payload's pointing into the message.
 *
 * No tag is computed: both layouts would compute the same one. Run it only
 * inside a network namespace of its own (scripts/path-bench does):
 *
 *   gather_send GROUP IFADDR DATAGRAM_BYTES SECONDS ROUNDS
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif

enum { HEADER = 36, TAG = 16, MESSAGE = 16 << 20, MAX_SEND = 65000 };

static double now(clockid_t clock)
{
    struct timespec t;
    clock_gettime(clock, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Sends the message again and again for `seconds`; CPU ns per payload byte. */
static double run(int fd, int gather, const char *msg, int datagram, double seconds)
{
    int payload = datagram - HEADER - TAG, n = MAX_SEND / datagram;
    static char batch[MAX_SEND], heads[MAX_SEND / 64 * HEADER], tags[MAX_SEND / 64 * TAG];
    static struct iovec iov[3 * (MAX_SEND / 64)];
    double start = now(CLOCK_MONOTONIC), cpu = now(CLOCK_PROCESS_CPUTIME_ID);
    double bytes = 0;
    while (now(CLOCK_MONOTONIC) - start < seconds) {
        for (long off = 0; off + (long)n * payload <= MESSAGE; off += (long)n * payload) {
            struct msghdr h = {.msg_iov = iov};
            for (int i = 0; i < n; i++) {
                const char *p = msg + off + (long)i * payload;
                if (gather) {
                    iov[3 * i] = (struct iovec){heads + i * HEADER, HEADER};
                    iov[3 * i + 1] = (struct iovec){(void *)p, payload};
                    iov[3 * i + 2] = (struct iovec){tags + i * TAG, TAG};
                } else {
                    char *d = batch + i * datagram;
                    memcpy(d, heads + i * HEADER, HEADER);
                    memcpy(d + HEADER, p, payload);
                    memcpy(d + HEADER + payload, tags + i * TAG, TAG);
                }
            }
            if (gather) {
                h.msg_iovlen = 3 * n;
            } else {
                iov[0] = (struct iovec){batch, (size_t)n * datagram};
                h.msg_iovlen = 1;
            }
            if (sendmsg(fd, &h, 0) < 0) {
                perror("gather_send: sendmsg");
                exit(1);
            }
            bytes += (double)n * payload;
        }
    }
    return (now(CLOCK_PROCESS_CPUTIME_ID) - cpu) * 1e9 / bytes;
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: gather_send GROUP IFADDR DATAGRAM_BYTES SECONDS ROUNDS\n");
        return 2;
    }
    int datagram = atoi(argv[3]), rounds = atoi(argv[5]);
    double seconds = atof(argv[4]);
    if (datagram <= HEADER + TAG || datagram > MAX_SEND / 2) {
        fprintf(stderr, "gather_send: DATAGRAM_BYTES out of range\n");
        return 2;
    }
    struct sockaddr_in group = {.sin_family = AF_INET, .sin_port = htons(7009)};
    struct in_addr ifaddr;
    if (inet_pton(AF_INET, argv[1], &group.sin_addr) != 1
        || inet_pton(AF_INET, argv[2], &ifaddr) != 1) {
        fprintf(stderr, "gather_send: GROUP and IFADDR are IPv4 addresses\n");
        return 2;
    }
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    if (fd < 0 || setsockopt(fd, IPPROTO_IP, IP_MULTICAST_IF, &ifaddr, sizeof ifaddr) < 0
        || setsockopt(fd, IPPROTO_UDP, UDP_SEGMENT, &datagram, sizeof datagram) < 0
        || connect(fd, (struct sockaddr *)&group, sizeof group) < 0) {
        perror("gather_send: socket");
        return 1;
    }
    char *msg = malloc(MESSAGE);
    if (!msg) {
        return 1;
    }
    memset(msg, 0x5a, MESSAGE);
    for (int r = 0; r < rounds; r++) {
        for (int gather = 0; gather < 2; gather++) {
            printf("role=gather_send layout=%s datagram=%d cpu_ns_per_byte=%.3f\n",
                   gather ? "gather" : "copy", datagram, run(fd, gather, msg, datagram, seconds));
            fflush(stdout);
        }
    }
    return 0;
}
