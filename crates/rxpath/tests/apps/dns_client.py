"""A DNS client for the knotd tests: queries built by hand (no DNS library),
over IPv4 and IPv6, small answers (A, AAAA, NS, SOA, a name that does not
exist) and a large one (a TXT set of about 3 KB: with EDNS 4096 it comes
back in IP fragments, with EDNS 1232 truncated). Each query has its own
id; every answer is kept whole, so two runs compare byte for byte.

    dns_client.py SERVER4 SERVER6 PORT ROUNDS [--sorted]

--sorted: each answer's records in sorted order (a server that shuffles
its RRsets, as pdns_recursor does, then answers the same bytes).

It first waits (10 s at most) until the server answers on both addresses
with no error (a server still loading its zone answers SERVFAIL).

Prints one JSON line: {"answers": {id: hex}, "missing": n, "large": n}.
"""

import json
import socket
import struct
import sys
import time

QUERIES = [
    ("www.example.test", 1, None),
    ("www.example.test", 28, None),
    ("example.test", 2, 1232),
    ("example.test", 6, 1232),
    ("nope.example.test", 1, 1232),
    ("big.example.test", 16, 4096),
    ("big.example.test", 16, 1232),
]


def query(qid, name, qtype, edns):
    q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 1 if edns else 0)
    for label in name.split("."):
        q += bytes([len(label)]) + label.encode()
    q += b"\x00" + struct.pack(">HH", qtype, 1)
    if edns:
        q += b"\x00" + struct.pack(">HHIH", 41, edns, 0, 0)
    return q


def skip_name(m, i):
    """The offset after the (possibly compressed) name at `i`."""
    while True:
        n = m[i]
        if n == 0:
            return i + 1
        if n & 0xC0 == 0xC0:
            return i + 2
        i += 1 + n


def sorted_sections(m):
    """`m` with the records of each section sorted (their bytes are
    position-independent when their names point into the question, as
    a server's answers do); `m` as it is if it does not parse."""
    try:
        qd, an, ns, ar = struct.unpack(">HHHH", m[4:12])
        i = 12
        for _ in range(qd):
            i = skip_name(m, i) + 4
        out = bytearray(m[:i])
        for count in (an, ns, ar):
            rrs = []
            for _ in range(count):
                j = skip_name(m, i)
                rdlen = struct.unpack(">H", m[j + 8 : j + 10])[0]
                rrs.append(m[i : j + 10 + rdlen])
                i = j + 10 + rdlen
            out += b"".join(sorted(rrs))
        return bytes(out + m[i:])
    except (IndexError, struct.error):
        return m


def wait_up(fam, srv, port):
    """Until the server answers with its zone loaded (it has just been
    started; named answers SERVFAIL while it loads): 10 s at most."""
    s = socket.socket(fam, socket.SOCK_DGRAM)
    s.settimeout(0.2)
    for _ in range(50):
        s.sendto(query(0, "example.test", 6, None), (srv, port))
        try:
            d = s.recvfrom(65535)[0]
        except OSError:
            continue
        if len(d) >= 4 and d[:2] == b"\x00\x00" and d[3] & 0x0F == 0:
            return
        time.sleep(0.2)
    sys.exit("the server never answered on %s" % srv)


def main():
    srv4, srv6, port, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    wait_up(socket.AF_INET, srv4, port)
    wait_up(socket.AF_INET6, srv6, port)
    answers = {}
    missing = large = 0
    qid = 1
    for fam, srv in ((socket.AF_INET, srv4), (socket.AF_INET6, srv6)):
        s = socket.socket(fam, socket.SOCK_DGRAM)
        s.settimeout(1.0)
        for _ in range(rounds):
            for name, qtype, edns in QUERIES:
                q = query(qid, name, qtype, edns)
                got = None
                for _attempt in range(3):
                    s.sendto(q, (srv, port))
                    try:
                        while True:
                            d, _ = s.recvfrom(65535)
                            if d[:2] == q[:2]:
                                got = d
                                break
                    except socket.timeout:
                        continue
                    break
                if got is None:
                    missing += 1
                else:
                    if "--sorted" in sys.argv:
                        got = sorted_sections(got)
                    answers[qid] = got.hex()
                    if len(got) > 1472:
                        large += 1
                qid += 1
        s.close()
    print(json.dumps({"answers": answers, "missing": missing, "large": large}))


main()
