"""SO_REUSEPORT as servers use it: four sockets on one port, a thread each.

    reuseport.py server ADDR PORT TOTAL   answer TOTAL datagrams in all, then
                                          print one JSON line: each member's
                                          flows (the senders' ports)
    reuseport.py client ADDR PORT FLOWS PER
                                          PER datagrams from each of FLOWS
                                          sockets, each answered before the
                                          next; print the number missing
"""

import json
import socket
import sys
import threading


def server(addr, port, total):
    members = []
    for _ in range(4):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        s.bind((addr, port))
        members.append(s)
    print("ready", flush=True)
    flows = [set() for _ in members]
    lock = threading.Lock()
    left = [total]
    done = threading.Event()

    def serve(i, s):
        while not done.is_set():
            s.settimeout(0.2)
            try:
                d, a = s.recvfrom(65535)
            except socket.timeout:
                continue
            s.sendto(d, a)
            with lock:
                flows[i].add(a[1])
                left[0] -= 1
                if left[0] == 0:
                    done.set()

    ts = [threading.Thread(target=serve, args=(i, s)) for i, s in enumerate(members)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    print(json.dumps({"flows": [sorted(f) for f in flows]}), flush=True)


def client(addr, port, nflows, per):
    missing = 0
    socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(nflows)]
    for k in range(per):
        for i, s in enumerate(socks):
            s.settimeout(2)
            m = b"flow %d datagram %d" % (i, k)
            s.sendto(m, (addr, port))
            try:
                d, _ = s.recvfrom(65535)
                missing += d != m
            except socket.timeout:
                missing += 1
    print(json.dumps({"missing": missing}))


if __name__ == "__main__":
    if sys.argv[1] == "server":
        server(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        client(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
