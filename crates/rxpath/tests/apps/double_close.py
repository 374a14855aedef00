"""A program that closes a number twice, as real servers do by mistake
(iperf3's server does at the end of a test): the number is free between
the two closes, and whatever takes it in between (on the kernel nothing
does) must not be lost to the second. It binds a UDP socket, puts it in
an epoll set, closes a fresh fd, waits once in epoll (rxpath's preload
may make a descriptor of its own then, on the freed number), closes the
number again and prints "second close: ERRNO-NAME" (or "second close:
ok"), then "ready"; it echoes every datagram through epoll until one
reads "quit", answers that "bye" and exits 0.

    double_close.py --port P
"""

import argparse
import errno
import os
import select
import socket


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--before-bind", action="store_true")
    a = ap.parse_args()
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    ep = select.epoll()
    if a.before_bind:
        n = os.open("/dev/null", os.O_RDONLY)
        os.close(n)
    s.bind(("0.0.0.0", a.port))
    s.setblocking(False)
    if not a.before_bind:
        n = os.open("/dev/null", os.O_RDONLY)
        os.close(n)
    ep.register(s.fileno(), select.EPOLLIN)
    ep.poll(0.2)
    try:
        os.close(n)
        print("second close: ok", flush=True)
    except OSError as e:
        print("second close: %s" % errno.errorcode.get(e.errno, e.errno), flush=True)
    print("ready", flush=True)
    while True:
        for _ in ep.poll(5.0):
            while True:
                try:
                    d, addr = s.recvfrom(65535)
                except BlockingIOError:
                    break
                if d == b"quit":
                    s.sendto(b"bye", addr)
                    return
                s.sendto(d, addr)


if __name__ == "__main__":
    main()
