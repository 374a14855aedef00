"""Two UDP sockets in one wait, as servers with several listeners wait:
--port P (rxpath's under exec) and --other Q (left to the kernel by the
test's --kernel-ports), both answered with their own bytes until one reads
"quit" (answered "bye").

    two_sockets.py --port P --other Q --mux poll|select|epoll [--blocking]

--blocking: blocking sockets, one recvfrom per socket the wait reported
(as C servers read after poll), instead of draining non-blocking ones.
"""

import argparse
import select
import socket


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--other", type=int, required=True)
    ap.add_argument("--mux", default="poll")
    ap.add_argument("--blocking", action="store_true")
    a = ap.parse_args()
    socks = []
    for port in (a.port, a.other):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("0.0.0.0", port))
        s.setblocking(a.blocking)
        socks.append(s)
    by_fd = {s.fileno(): s for s in socks}
    if a.mux == "poll":
        p = select.poll()
        for s in socks:
            p.register(s, select.POLLIN)
        wait = lambda: [by_fd[fd] for fd, _ in p.poll(10000)]
    elif a.mux == "select":
        wait = lambda: select.select(socks, [], [], 10.0)[0]
    else:
        ep = select.epoll()
        for s in socks:
            ep.register(s.fileno(), select.EPOLLIN)
        wait = lambda: [by_fd[fd] for fd, _ in ep.poll(10.0)]
    print("ready", flush=True)
    while True:
        ready = wait()
        if not ready:
            print("timed out with nothing readable", flush=True)
            return
        for s in ready:
            while True:
                try:
                    d, addr = s.recvfrom(65535)
                except BlockingIOError:
                    break
                if d == b"quit":
                    s.sendto(b"bye", addr)
                    return
                s.sendto(d, addr)
                if a.blocking:
                    break


if __name__ == "__main__":
    main()
