/* A TCP echo server that reads and writes in batches: usage
 * tcp_mmsg_echo ADDR PORT. Accepts one connection; recvmmsg into four
 * 1000-byte buffers (MSG_WAITFORONE: the first waits, the rest take what
 * is there), sendmmsg of what came back; a batch of nothing is the
 * stream's end. Prints "batches N bytes M" and exits. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define VLEN 4
#define SIZE 1000

int main(int argc, char **argv)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[2]))};
	int one = 1, l = socket(AF_INET, SOCK_STREAM, 0);

	inet_pton(AF_INET, argv[1], &a.sin_addr);
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(l, (struct sockaddr *)&a, sizeof(a)) || listen(l, 8)) {
		perror("bind/listen");
		return 1;
	}
	printf("ready\n");
	fflush(stdout);
	int c = accept(l, NULL, NULL);
	if (c < 0) {
		perror("accept");
		return 1;
	}
	static char buf[VLEN][SIZE];
	struct iovec iov[VLEN];
	struct mmsghdr m[VLEN];
	long batches = 0, bytes = 0;
	for (;;) {
		memset(m, 0, sizeof(m));
		for (int i = 0; i < VLEN; i++) {
			iov[i] = (struct iovec){buf[i], SIZE};
			m[i].msg_hdr.msg_iov = &iov[i];
			m[i].msg_hdr.msg_iovlen = 1;
		}
		int n = recvmmsg(c, m, VLEN, MSG_WAITFORONE, NULL);
		if (n < 0) {
			perror("recvmmsg");
			return 1;
		}
		int got = 0;
		for (int i = 0; i < n; i++) {
			iov[i].iov_len = m[i].msg_len;
			got += m[i].msg_len;
		}
		if (got == 0)
			break;
		batches++;
		bytes += got;
		int k = 0;
		while (k < n) {
			int s = sendmmsg(c, m + k, n - k, 0);
			if (s < 0) {
				perror("sendmmsg");
				return 1;
			}
			for (int i = k; i < k + s; i++) {
				if (m[i].msg_len != iov[i].iov_len) {
					fprintf(stderr, "a part sent\n");
					return 1;
				}
			}
			k += s;
		}
	}
	close(c);
	printf("batches %s bytes %ld\n", batches > 0 ? "some" : "none", bytes);
	return 0;
}
