"""Send COUNT datagrams of distinct payloads to ADDR:PORT, one at a time,
each retried until its answer comes (up to 20 tries), then "quit" (the
server answers "bye" and exits); print one JSON line: the answers in
order (hex), how many were missing, and whether the server said bye.

    udp_client.py ADDR PORT COUNT [--no-quit] [--tos N] [--big BYTES] [--dstopts]
                  [--tries N] [--wait SECONDS]
"""

import json
import socket
import sys


def main():
    addr, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_DGRAM)
    if "--dstopts" in sys.argv:
        # A destination-options header (PadN) on every datagram, before UDP.
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_DSTOPTS, bytes([0, 0, 1, 4, 0, 0, 0, 0]))
    if "--tos" in sys.argv:
        s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, int(sys.argv[sys.argv.index("--tos") + 1], 0))
    def opt(name, default, conv):
        return conv(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default

    tries = opt("--tries", 20, int)
    s.settimeout(opt("--wait", 0.25, float))
    answers, missing, wrong = [], 0, 0
    for i in range(count):
        m = ("datagram %d " % i).encode() + bytes((i * 7 + k) % 256 for k in range(i % 300))
        if "--big" in sys.argv:
            # Past the MTU: it travels as IP fragments.
            m += bytes(k % 251 for k in range(int(sys.argv[sys.argv.index("--big") + 1])))
        got = None
        for _ in range(tries):
            s.sendto(m, (addr, port))
            try:
                while True:
                    d, _a = s.recvfrom(65535)
                    if d == m:
                        got = d
                        break
                    if not d.startswith(b"datagram "):
                        wrong += 1
            except socket.timeout:
                pass
            if got is not None:
                break
        if got is None:
            missing += 1
        answers.append((got or b"").hex())
    bye = False
    if "--no-quit" not in sys.argv:
        for _ in range(20):
            s.sendto(b"quit", (addr, port))
            try:
                while not bye:
                    d, _a = s.recvfrom(65535)
                    bye = d == b"bye"
            except socket.timeout:
                pass
            if bye:
                break
    print(json.dumps({"answers": answers, "missing": missing, "wrong": wrong, "bye": bye}))


if __name__ == "__main__":
    main()
