"""A UDP sink: reads datagrams on PORT until one reads "quit", answers that
"bye", then prints one JSON line: how many datagrams it read ("quit" not
counted) and how many distinct payloads among them. A datagram read twice
shows as read > distinct.

    udp_sink.py --port P [--bind ADDR]
"""

import argparse
import json
import socket


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--bind", default="0.0.0.0")
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
    print(json.dumps({"read": read, "distinct": len(seen)}), flush=True)


if __name__ == "__main__":
    main()
