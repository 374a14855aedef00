"""Send COUNT distinct datagrams to ADDR:PORT, paced (a pause every 20 so a
veth and a sleeping reader keep up), then "quit" until the sink answers
"bye"; print one JSON line: what was sent and whether the sink said bye.

    udp_blast.py ADDR PORT COUNT [--tag TEXT] [--burst N]

--burst: the pause comes every N datagrams (20 by default).
"""

import json
import socket
import sys
import time


def main():
    addr, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    tag = sys.argv[sys.argv.index("--tag") + 1] if "--tag" in sys.argv else "d"
    burst = int(sys.argv[sys.argv.index("--burst") + 1]) if "--burst" in sys.argv else 20
    fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_DGRAM)
    for i in range(count):
        s.sendto(("%s %d" % (tag, i)).encode(), (addr, port))
        if i % burst == burst - 1:
            time.sleep(0.002)
    bye = False
    if "--no-quit" not in sys.argv:
        s.settimeout(0.25)
        for _ in range(40):
            s.sendto(b"quit", (addr, port))
            try:
                bye = s.recvfrom(65535)[0] == b"bye"
            except socket.timeout:
                pass
            if bye:
                break
    print(json.dumps({"sent": count, "bye": bye}))


if __name__ == "__main__":
    main()
