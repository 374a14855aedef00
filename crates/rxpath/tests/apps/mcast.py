"""Multicast receivers as feed handlers and service discovery write them.

    mcast.py server IFNAME IFADDR SRC OTHER
                                      eight sockets (below); print `ready`,
                                      read until `end` arrives and the
                                      sockets go quiet, then print one JSON
                                      line: each socket's datagrams' tags
    mcast.py client IFNAME SRC OTHER SRV
                                      send the corpus (from SRC, and from
                                      OTHER where a source filter is tried),
                                      then `end` to SRV

The sockets, all with SO_REUSEADDR (as multicast receivers share a port):
  A  0.0.0.0:6000  joins G1 (ip_mreqn, by index); joins and leaves G9
  B  0.0.0.0:6000  joins G2 (ip_mreq, by address); IP_MULTICAST_ALL off
  C  G1:6000       joins G1 (MCAST_JOIN_GROUP)
  D  0.0.0.0:6000  joins nothing; IP_MULTICAST_ALL off
  E  0.0.0.0:6001  G4 from SRC only (IP_ADD_SOURCE_MEMBERSHIP)
  F  0.0.0.0:6001  joins G5, blocks OTHER (IP_BLOCK_SOURCE)
  V  [::]:6000     IPV6_V6ONLY, joins G6 (IPV6_JOIN_GROUP)
  W  [::]:6000     dual stack, joins G2 (IP_ADD_MEMBERSHIP on an IPv6 socket)
"""

import json
import select
import socket
import struct
import sys
import time

G1, G2, G3, G4, G5, G9 = "239.1.1.1", "239.2.2.2", "239.3.3.3", "232.1.1.1", "239.5.5.5", "239.9.9.9"
G6, G7 = "ff05::114", "ff05::115"
IP_MULTICAST_ALL = 49
IP_BLOCK_SOURCE = 38
IP_ADD_SOURCE_MEMBERSHIP = 39
MCAST_JOIN_GROUP = 42


def a4(s):
    return socket.inet_aton(s)


def udp(family, addr, port):
    s = socket.socket(family, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6:
        return s
    s.bind((addr, port))
    return s


def group_req(ifindex, group):
    sin = struct.pack("=H2s4s8x", socket.AF_INET, b"\0\0", a4(group))
    return struct.pack("=I4x", ifindex) + sin.ljust(128, b"\0")


def server(ifname, ifaddr):
    idx = socket.if_nametoindex(ifname)
    socks = {}
    a = udp(socket.AF_INET, "0.0.0.0", 6000)
    a.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, struct.pack("4s4si", a4(G1), a4("0.0.0.0"), idx))
    nine = struct.pack("4s4si", a4(G9), a4("0.0.0.0"), idx)
    a.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, nine)
    a.setsockopt(socket.IPPROTO_IP, socket.IP_DROP_MEMBERSHIP, nine)
    socks["A"] = a
    b = udp(socket.AF_INET, "0.0.0.0", 6000)
    b.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, struct.pack("4s4s", a4(G2), a4(ifaddr)))
    b.setsockopt(socket.IPPROTO_IP, IP_MULTICAST_ALL, 0)
    socks["B"] = b
    c = udp(socket.AF_INET, G1, 6000)
    c.setsockopt(socket.IPPROTO_IP, MCAST_JOIN_GROUP, group_req(idx, G1))
    socks["C"] = c
    d = udp(socket.AF_INET, "0.0.0.0", 6000)
    d.setsockopt(socket.IPPROTO_IP, IP_MULTICAST_ALL, 0)
    socks["D"] = d
    e = udp(socket.AF_INET, "0.0.0.0", 6001)
    src = struct.pack("4s4s4s", a4(G4), a4(ifaddr), a4(sys.argv[4]))
    e.setsockopt(socket.IPPROTO_IP, IP_ADD_SOURCE_MEMBERSHIP, src)
    socks["E"] = e
    f = udp(socket.AF_INET, "0.0.0.0", 6001)
    f.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, struct.pack("4s4si", a4(G5), a4("0.0.0.0"), idx))
    block = struct.pack("4s4s4s", a4(G5), a4(ifaddr), a4(sys.argv[5]))
    f.setsockopt(socket.IPPROTO_IP, IP_BLOCK_SOURCE, block)
    socks["F"] = f
    v = udp(socket.AF_INET6, "::", 6000)
    v.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    v.bind(("::", 6000))
    v.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_JOIN_GROUP, socket.inet_pton(socket.AF_INET6, G6) + struct.pack("I", idx))
    socks["V"] = v
    w = udp(socket.AF_INET6, "::", 6000)
    w.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    w.bind(("::", 6000))
    w.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, struct.pack("4s4si", a4(G2), a4("0.0.0.0"), idx))
    socks["W"] = w
    print("ready", flush=True)
    got = {k: [] for k in socks}
    by_fd = {s.fileno(): k for k, s in socks.items()}
    ended, deadline = False, time.time() + 30
    while time.time() < deadline:
        r, _, _ = select.select(list(socks.values()), [], [], 0.5)
        if not r and ended:
            break
        for s in r:
            data, _ = s.recvfrom(2048)
            tag = data.decode()
            got[by_fd[s.fileno()]].append(tag)
            ended |= tag == "end"
    print(json.dumps({k: sorted(v) for k, v in got.items()}), flush=True)


def client(ifname, src, other, srv):
    idx = socket.if_nametoindex(ifname)
    corpus = [
        (src, G1, 6000, "g1"),
        (src, G2, 6000, "g2"),
        (src, G3, 6000, "nobody-joined"),
        (src, G9, 6000, "left"),
        (src, "198.18.9.255", 6000, "broadcast"),
        (src, "224.0.0.1", 6000, "all-hosts"),
        (src, G4, 6001, "g4-from-src"),
        (other, G4, 6001, "g4-from-other"),
        (src, G5, 6001, "g5-from-src"),
        (other, G5, 6001, "g5-from-other"),
        (src, "224.0.0.1", 6002, "no-socket"),
    ]
    for frm, dst, port, tag in corpus:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, a4(frm))
        s.bind((frm, 0))
        s.sendto(tag.encode(), (dst, port))
        s.close()
        time.sleep(0.005)
    for dst, tag in [(G6, "g6"), (G7, "g7-nobody"), ("ff02::1", "all-nodes")]:
        s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_IF, idx)
        s.sendto(tag.encode(), (dst, 6000, 0, idx))
        s.close()
        time.sleep(0.005)
    time.sleep(0.2)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.sendto(b"end", (srv, 6000))
    print(json.dumps({"sent": len(corpus) + 4}))


if __name__ == "__main__":
    if sys.argv[1] == "server":
        server(sys.argv[2], sys.argv[3])
    else:
        client(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5])
