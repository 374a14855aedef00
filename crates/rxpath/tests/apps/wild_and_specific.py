"""Two UDP sockets on one port, as the kernel keys them: one bound to the
wildcard, one to ADDR (both with SO_REUSEADDR). With --handback, the
specific one sets IP_RECVERR after bind, an option rxpath does not
honour, so under exec it goes back to the kernel while the wildcard one
stays rxpath's; with --kernel, it sets IP_RECVTTL before bind, so it is
the kernel's from the start. Reads both until one reads "quit" (answered "bye"), then
prints one JSON line: what each read. The kernel gives a datagram for
ADDR to the specific socket.

    wild_and_specific.py --port P --addr ADDR [--handback | --kernel]
"""

import argparse
import json
import select
import socket


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--addr", required=True)
    ap.add_argument("--handback", action="store_true")
    ap.add_argument("--kernel", action="store_true")
    a = ap.parse_args()
    socks = {}
    for name, addr in (("wildcard", "0.0.0.0"), ("specific", a.addr)):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if name == "specific" and a.kernel:
            s.setsockopt(socket.IPPROTO_IP, getattr(socket, "IP_RECVTTL", 12), 1)
        s.bind((addr, a.port))
        socks[name] = s
    if a.handback:
        socks["specific"].setsockopt(socket.IPPROTO_IP, getattr(socket, "IP_RECVERR", 11), 1)
    print("ready", flush=True)
    read = {"wildcard": 0, "specific": 0}
    by_fd = {s.fileno(): (n, s) for n, s in socks.items()}
    while True:
        ready, _, _ = select.select(list(by_fd), [], [])
        for fd in ready:
            name, s = by_fd[fd]
            d, peer = s.recvfrom(65535)
            if d == b"quit":
                s.sendto(b"bye", peer)
                print(json.dumps(read), flush=True)
                return
            read[name] += 1


if __name__ == "__main__":
    main()
