/* A UDP echo server in C as DNS servers write theirs: a non-blocking
 * socket in an epoll set (waited on with epoll_pwait2 where the C library
 * has it, else epoll_wait), read with recvmmsg in batches, answered with
 * sendmmsg. Answers every datagram until one reads "quit" (answered
 * "bye"), then exits 0. With "pselect" it waits in pselect with a signal
 * mask instead, as event loops that block signals outside the wait do;
 * with "epoll-busy" it gives its epoll set busy-poll parameters
 * (EPIOCSPARAMS: 50 us, budget 16), as servers that suspend interrupts do.
 *
 *     mmsg_echo PORT [pselect|epoll-busy]
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BATCH 16

#ifndef EPIOCSPARAMS
struct epoll_params {
    uint32_t busy_poll_usecs;
    uint16_t busy_poll_budget;
    uint8_t prefer_busy_poll;
    uint8_t __pad;
};
#define EPIOCSPARAMS _IOW(0x8A, 0x01, struct epoll_params)
#endif

static int wait_pselect(int s) {
    fd_set r;
    FD_ZERO(&r);
    FD_SET(s, &r);
    struct timespec t = {5, 0};
    sigset_t none;
    sigemptyset(&none);
    return pselect(s + 1, &r, NULL, NULL, &t, &none);
}

static int wait_readable(int ep) {
    struct epoll_event ev;
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35))
    struct timespec t = {5, 0};
    return epoll_pwait2(ep, &ev, 1, &t, NULL);
#else
    return epoll_wait(ep, &ev, 1, 5000);
#endif
}

int main(int argc, char **argv) {
    const char *mode = argc == 3 ? argv[2] : "";
    if (argc != 2 && !(argc == 3 && (strcmp(mode, "pselect") == 0 ||
                                     strcmp(mode, "epoll-busy") == 0))) {
        fprintf(stderr, "usage: mmsg_echo PORT [pselect|epoll-busy]\n");
        return 2;
    }
    int use_pselect = strcmp(mode, "pselect") == 0;
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[1]))};
    if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) < 0) {
        perror("socket/bind");
        return 1;
    }
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = s};
    if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev) < 0) {
        perror("epoll");
        return 1;
    }
    struct epoll_params bp = {.busy_poll_usecs = 50, .busy_poll_budget = 16};
    if (strcmp(mode, "epoll-busy") == 0 && ioctl(ep, EPIOCSPARAMS, &bp) < 0) {
        perror("EPIOCSPARAMS");
        return 1;
    }
    printf("ready\n");
    fflush(stdout);
    static char bufs[BATCH][2048];
    struct mmsghdr m[BATCH];
    struct iovec io[BATCH];
    struct sockaddr_in from[BATCH];
    for (;;) {
        int r = use_pselect ? wait_pselect(s) : wait_readable(ep);
        if (r < 0 && errno != EINTR) {
            perror("epoll wait");
            return 1;
        }
        for (;;) {
            memset(m, 0, sizeof m);
            for (int i = 0; i < BATCH; i++) {
                io[i].iov_base = bufs[i];
                io[i].iov_len = sizeof bufs[i];
                m[i].msg_hdr.msg_iov = &io[i];
                m[i].msg_hdr.msg_iovlen = 1;
                m[i].msg_hdr.msg_name = &from[i];
                m[i].msg_hdr.msg_namelen = sizeof from[i];
            }
            int n = recvmmsg(s, m, BATCH, 0, NULL);
            if (n < 0) {
                if (errno == EAGAIN)
                    break;
                perror("recvmmsg");
                return 1;
            }
            int quit = 0;
            for (int i = 0; i < n; i++) {
                io[i].iov_len = m[i].msg_len;
                if (m[i].msg_len == 4 && memcmp(bufs[i], "quit", 4) == 0) {
                    memcpy(bufs[i], "bye", 3);
                    io[i].iov_len = 3;
                    quit = 1;
                }
            }
            if (sendmmsg(s, m, n, 0) != n) {
                perror("sendmmsg");
                return 1;
            }
            if (quit)
                return 0;
        }
    }
}
