"""SO_REUSEPORT as servers use it: four sockets on one port, a thread each.

    reuseport.py server ADDR PORT TOTAL [cbpf]
                                          answer TOTAL datagrams in all, then
                                          print one JSON line: each member's
                                          flows (the senders' ports; with
                                          cbpf, the datagrams' first bytes)
    reuseport.py client ADDR PORT FLOWS PER [cbpf]
                                          PER datagrams from each of FLOWS
                                          sockets, each answered before the
                                          next; print the number missing

With `cbpf` the group runs a classic BPF program (SO_ATTACH_REUSEPORT_CBPF,
as knotd's socket-affinity does): `ld b[0]; ret a`, so a datagram goes to
the member its first byte names, and each client flow starts its datagrams
with its number modulo 4.
"""

import ctypes
import json
import socket
import struct
import sys
import threading

SO_ATTACH_REUSEPORT_CBPF = 51


class SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8),
                ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


def attach_by_first_byte(s):
    """`ld b[0]; ret a` on the socket's group."""
    prog = (SockFilter * 2)(SockFilter(0x30, 0, 0, 0), SockFilter(0x16, 0, 0, 0))
    fprog = struct.pack("HxxxxxxQ", 2, ctypes.addressof(prog))
    s.setsockopt(socket.SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, fprog)
    return prog


def server(addr, port, total, cbpf):
    members = []
    for _ in range(4):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        s.bind((addr, port))
        members.append(s)
    if cbpf:
        attach_by_first_byte(members[0])
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
                flows[i].add(d[0] if cbpf else a[1])
                left[0] -= 1
                if left[0] == 0:
                    done.set()

    ts = [threading.Thread(target=serve, args=(i, s)) for i, s in enumerate(members)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    print(json.dumps({"flows": [sorted(f) for f in flows]}), flush=True)


def client(addr, port, nflows, per, cbpf):
    missing = 0
    socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(nflows)]
    for k in range(per):
        for i, s in enumerate(socks):
            s.settimeout(2)
            m = b"flow %d datagram %d" % (i, k)
            if cbpf:
                m = bytes([i % 4]) + m
            s.sendto(m, (addr, port))
            try:
                d, _ = s.recvfrom(65535)
                missing += d != m
            except socket.timeout:
                missing += 1
    print(json.dumps({"missing": missing}))


if __name__ == "__main__":
    cbpf = sys.argv[-1] == "cbpf"
    if sys.argv[1] == "server":
        server(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), cbpf)
    else:
        client(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), cbpf)
