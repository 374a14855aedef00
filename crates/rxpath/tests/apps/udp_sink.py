"""A UDP sink: reads datagrams on PORT until one reads "quit", answers that
"bye", then prints one JSON line: how many datagrams it read ("quit" not
counted) and how many distinct payloads among them. A datagram read twice
shows as read > distinct.

    udp_sink.py --port P [--bind ADDR] [--handback-after N]

With --handback-after, it sets IP_RECVERR after N datagrams: an option
rxpath does not honour after bind, so under exec the socket goes back to
the kernel while datagrams keep arriving.
"""

import argparse
import json
import socket


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--bind", default="0.0.0.0")
    ap.add_argument("--handback-after", type=int, default=-1)
    a = ap.parse_args()
    fam = socket.AF_INET6 if ":" in a.bind else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_DGRAM)
    s.bind((a.bind, a.port))
    print("ready", flush=True)
    read, seen = 0, set()
    while True:
        d, addr = s.recvfrom(65535)
        if d == b"quit":
            s.sendto(b"bye", addr)
            break
        read += 1
        seen.add(d)
        if read == a.handback_after:
            s.setsockopt(socket.IPPROTO_IP, getattr(socket, "IP_RECVERR", 11), 1)
    print(json.dumps({"read": read, "distinct": len(seen)}), flush=True)


if __name__ == "__main__":
    main()
