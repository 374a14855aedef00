"""A UDP echo server written as ordinary programs write them, for the
preload tests: it answers every datagram with its bytes until one reads
"quit", answers that "bye" and exits 0.

    udp_echo.py --port P --mux block|select|poll|epoll|epoll-et|asyncio|fork|daemon|prefork|grandchild|dup|pktinfo|peek|gso|cmsg|shutdown|tstamp
                [--bind ADDR] [--opt-before-bind] [--opt-after-bind] [--second-port Q]

--mux picks how it waits: a blocking recvfrom, select(), poll(), epoll
(level- or edge-triggered, non-blocking socket), or asyncio's datagram
endpoint (epoll with its self-pipe beside the socket); `fork` reads each
datagram and forks a child that answers it through the inherited socket
(as `socat UDP-RECVFROM:P,fork` does); `daemon` forks once and the parent
exits, leaving the child to serve (as `daemon()` does); `prefork` forks two
workers that read the socket while the parent only waits; `grandchild`
forks a child that does the same (the workers are grandchildren of the
process that bound, as NSD's); `dup` serves on
a `dup` of the socket after closing the first number; `pktinfo` reads
with IP_PKTINFO, checks the destination (--expect-dst) and answers from
it with IP_PKTINFO on sendmsg, as DNS servers bound to the wildcard do;
`peek` sizes each read with FIONREAD and MSG_PEEK | MSG_TRUNC first, as
dnsmasq does; `gso` answers each datagram three times in one sendmsg
with UDP_SEGMENT, as QUIC servers send.
`cmsg` reads with IP_RECVTOS, IP_PKTINFO and UDP_GRO on and checks each
read's control messages (the client sets TOS 0x2a: udp_client.py
--tos); `tstamp` reads with SO_TIMESTAMPNS and SO_RXQ_OVFL and checks
each read's timestamp; `shutdown` reads on two threads and, after "quit", shuts the
socket down for reading, which must wake the other reader.
--opt-before-bind / --opt-after-bind set IP_RECVTTL (a control message
rxpath does not give) before or after bind; after bind it prints the
errno the call raised, if any.
--fork-after S: prefork and grandchild fork their workers S seconds after
"ready" (what comes meanwhile waits in the socket's queue, as when a
server starts under traffic).
--second-port also binds a second socket on Q and answers one datagram on
it first (a socket bound after the first, on another port).
"""

import argparse
import asyncio
import errno
import os
import select
import signal
import socket
import struct
import sys
import time


def answer(s, d, a):
    """Echo `d` to `a`; False once it was the last ("quit")."""
    if d == b"quit":
        s.sendto(b"bye", a)
        return False
    s.sendto(d, a)
    return True


def drain(s):
    """Answer what is queued on a non-blocking socket; False after quit."""
    while True:
        try:
            d, a = s.recvfrom(65535)
        except BlockingIOError:
            return True
        if not answer(s, d, a):
            return False


def serve_block(s):
    while True:
        d, a = s.recvfrom(65535)
        if not answer(s, d, a):
            return


def serve_select(s):
    s.setblocking(False)
    while True:
        r, _, _ = select.select([s], [], [], 5.0)
        if r and not drain(s):
            return


def serve_poll(s):
    s.setblocking(False)
    p = select.poll()
    p.register(s, select.POLLIN)
    while True:
        for _fd, _ev in p.poll(5000):
            if not drain(s):
                return


def exclusive_rules(s):
    """EPOLLEXCLUSIVE as the kernel checks it: fine on ADD, EINVAL on a
    MOD and with EPOLLONESHOT; exit 1 if a call answers otherwise."""
    ex = select.EPOLLEXCLUSIVE
    ep = select.epoll()
    ep.register(s.fileno(), select.EPOLLIN | ex)
    for what, call in [
        ("mod", lambda: ep.modify(s.fileno(), select.EPOLLIN)),
        ("oneshot", lambda: select.epoll().register(s.fileno(), select.EPOLLIN | ex | select.EPOLLONESHOT)),
    ]:
        try:
            call()
            print("EPOLLEXCLUSIVE %s: accepted" % what, flush=True)
            sys.exit(1)
        except OSError as e:
            if e.errno != errno.EINVAL:
                print("EPOLLEXCLUSIVE %s: %s" % (what, e), flush=True)
                sys.exit(1)
    ep.close()


def serve_epoll(s, et):
    s.setblocking(False)
    exclusive_rules(s)
    ep = select.epoll()
    ep.register(s.fileno(), select.EPOLLIN | (select.EPOLLET if et else 0))
    while True:
        # Edge-triggered: `drain` reads until EAGAIN, as the contract says.
        for _fd, _ev in ep.poll(5.0):
            if not drain(s):
                return


def serve_fork(s):
    while True:
        d, a = s.recvfrom(65535)
        pid = os.fork()
        if pid == 0:
            answer(s, d, a)
            os._exit(0)
        os.waitpid(pid, 0)
        if d == b"quit":
            return


def serve_prefork(s, fork_after=0.0):
    # As pre-forking servers (NSD) do: workers forked before any traffic
    # read the socket (or, with --fork-after, once traffic is queued); the
    # parent only waits. The worker that reads "quit" answers and exits;
    # the parent then stops the other.
    time.sleep(fork_after)
    kids = []
    for _ in range(2):
        pid = os.fork()
        if pid == 0:
            serve_block(s)
            os._exit(0)
        kids.append(pid)
    done, _ = os.wait()
    for k in kids:
        if k != done:
            os.kill(k, signal.SIGTERM)
            os.waitpid(k, 0)


def serve_grandchild(s, fork_after=0.0):
    # As NSD does: the process that bound forks a child that carries on as
    # the server's main process, which forks the workers that read: the
    # socket is served by grandchildren of the process that bound it.
    pid = os.fork()
    if pid == 0:
        serve_prefork(s, fork_after)
        os._exit(0)
    os.waitpid(pid, 0)


def serve_daemon(s):
    if os.fork() > 0:
        # The parent is done: it exits (through atexit, as a program does).
        sys.exit(0)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    serve_block(s)


IP_PKTINFO = getattr(socket, "IP_PKTINFO", 8)
IP_RECVTTL = 12
UDP_GRO = 104
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
SO_RXQ_OVFL = getattr(socket, "SO_RXQ_OVFL", 40)
# The TOS byte the client sets with --tos (DSCP AF11 and ECT(0)).
TOS = 0x2A


def serve_pktinfo(s, expect):
    """As a DNS server on the wildcard does: read with IP_PKTINFO, check
    the address the datagram was sent to, answer from that address."""
    while True:
        d, anc, _flags, a = s.recvmsg(65535, socket.CMSG_SPACE(12))
        info = [c[2] for c in anc if c[0] == socket.IPPROTO_IP and c[1] == IP_PKTINFO]
        ok = len(info) == 1 and socket.inet_ntoa(info[0][8:12]) == expect
        reply = d if ok else b"bad pktinfo %r" % (anc,)
        if d == b"quit":
            reply = b"bye"
        s.sendmsg([reply], [(socket.IPPROTO_IP, IP_PKTINFO, info[0])] if info else [], 0, a)
        if d == b"quit":
            return


def serve_cmsg(s, expect):
    """As a server that wants to know how each datagram came: IP_RECVTOS,
    IP_PKTINFO and UDP_GRO on, each read checked for exactly the control
    messages the kernel gives (the TOS byte the client set, the
    destination; no UDP_GRO message for a single datagram)."""
    s.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
    s.setsockopt(socket.IPPROTO_UDP, UDP_GRO, 1)
    while True:
        d, anc, _flags, a = s.recvmsg(65535, 256)
        kinds = sorted((c[0], c[1]) for c in anc)
        tos = [c[2] for c in anc if c[0] == socket.IPPROTO_IP and c[1] == socket.IP_TOS]
        info = [c[2] for c in anc if c[0] == socket.IPPROTO_IP and c[1] == IP_PKTINFO]
        want = sorted([(socket.IPPROTO_IP, socket.IP_TOS), (socket.IPPROTO_IP, IP_PKTINFO)])
        ok = kinds == want and tos == [bytes([TOS])] and socket.inet_ntoa(info[0][8:12]) == expect
        if d == b"quit":
            s.sendto(b"bye", a)
            return
        s.sendto(d if ok else b"bad cmsg %r" % (anc,), a)


def serve_tstamp(s):
    """As a server that logs when each datagram came and whether the
    socket dropped any: SO_TIMESTAMPNS and SO_RXQ_OVFL on (the latter set
    before bind); each read must carry a wall-clock timestamp no later
    than the read and not long before, and no SO_RXQ_OVFL message while
    nothing was dropped (the kernel sends none for 0)."""
    s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    while True:
        d, anc, _flags, a = s.recvmsg(65535, 256)
        now = time.time()
        ts = [c[2] for c in anc if c[0] == socket.SOL_SOCKET and c[1] == SO_TIMESTAMPNS]
        ovfl = [c for c in anc if c[0] == socket.SOL_SOCKET and c[1] == SO_RXQ_OVFL]
        ok = len(anc) == 1 and len(ts) == 1 and not ovfl
        if ok:
            sec, nsec = struct.unpack("qq", ts[0])
            at = sec + nsec / 1e9
            ok = now - 2.0 <= at <= now + 0.001
        if d == b"quit":
            s.sendto(b"bye", a)
            return
        s.sendto(d if ok else b"bad cmsg %r at %f" % (anc, now), a)


def serve_shutdown(s):
    """Two threads block in recvfrom on the socket; after "quit" the main
    thread shuts it down for reading, as servers stop their readers: the
    other thread's read must return at once with no bytes."""
    import threading

    stop = threading.Event()
    ended = []

    def reader():
        while True:
            d, a = s.recvfrom(65535)
            if d == b"" and a is None:
                ended.append(True)
                return
            if not answer(s, d, a):
                stop.set()
                return

    ts = [threading.Thread(target=reader) for _ in range(2)]
    for t in ts:
        t.start()
    stop.wait()
    try:
        s.shutdown(socket.SHUT_RD)
    except OSError as e:
        # An unconnected UDP socket says ENOTCONN and is shut down anyway.
        if e.errno != errno.ENOTCONN:
            raise
    for t in ts:
        t.join(5)
    if any(t.is_alive() for t in ts) or not ended:
        print("shutdown did not wake the reader", flush=True)
        os._exit(1)


def serve_peek(s):
    """As dnsmasq sizes its reads: FIONREAD, then MSG_PEEK | MSG_TRUNC for
    the whole length, a short MSG_PEEK, then the read itself."""
    import array
    import fcntl
    import termios

    while True:
        select.select([s], [], [])
        n = array.array("i", [0])
        fcntl.ioctl(s.fileno(), termios.FIONREAD, n, True)
        head = bytearray(4)
        full = s.recv_into(head, 4, socket.MSG_PEEK | socket.MSG_TRUNC)
        first = s.recv(2, socket.MSG_PEEK)
        d, a = s.recvfrom(65535)
        ok = n[0] == len(d) == full and bytes(head) == d[:4] and first == d[:2]
        if not ok:
            d = b"bad peek %d %d %d" % (n[0], full, len(d))
        if not answer(s, d, a):
            return


UDP_SEGMENT = 103


def serve_gso(s):
    """Answer each datagram three times with one segmented send
    (UDP_SEGMENT as a control message), as QUIC servers send."""
    import struct

    while True:
        d, a = s.recvfrom(65535)
        if d == b"quit":
            s.sendto(b"bye", a)
            return
        seg = [(socket.IPPROTO_UDP, UDP_SEGMENT, struct.pack("H", len(d)))]
        s.sendmsg([d * 3], seg, 0, a)


def serve_asyncio(s):
    s.setblocking(False)

    class Echo(asyncio.DatagramProtocol):
        def __init__(self, fut):
            self.fut = fut

        def connection_made(self, t):
            self.t = t

        def datagram_received(self, d, a):
            if d == b"quit":
                self.t.sendto(b"bye", a)
                if not self.fut.done():
                    self.fut.set_result(None)
                return
            self.t.sendto(d, a)

    async def main():
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        t, _ = await loop.create_datagram_endpoint(lambda: Echo(fut), sock=s)
        await fut
        t.close()

    asyncio.run(main())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--mux", default="block")
    ap.add_argument("--bind", default="0.0.0.0")
    ap.add_argument("--opt-before-bind", action="store_true")
    ap.add_argument("--opt-after-bind", action="store_true")
    ap.add_argument("--second-port", type=int)
    ap.add_argument("--expect-dst", default="198.18.9.6")
    ap.add_argument("--device", help="SO_BINDTODEVICE before bind")
    ap.add_argument("--freebind", action="store_true", help="IP_FREEBIND before bind")
    ap.add_argument(
        "--fork-after", type=float, default=0.0, help="prefork/grandchild: seconds before the workers"
    )
    ap.add_argument("--chroot", help="chroot here after bind (as NSD and named -t do)")
    a = ap.parse_args()
    fam = socket.AF_INET6 if ":" in a.bind else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_DGRAM)
    if a.mux in ("pktinfo", "cmsg"):
        s.setsockopt(socket.IPPROTO_IP, IP_PKTINFO, 1)
    if a.opt_before_bind:
        s.setsockopt(socket.IPPROTO_IP, IP_RECVTTL, 1)
    if a.mux == "tstamp":
        s.setsockopt(socket.SOL_SOCKET, SO_RXQ_OVFL, 1)
    if a.device:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, a.device.encode())
    if a.freebind:
        s.setsockopt(socket.IPPROTO_IP, 15, 1)  # IP_FREEBIND
    s.bind((a.bind, a.port))
    if a.opt_after_bind:
        try:
            s.setsockopt(socket.IPPROTO_IP, IP_RECVTTL, 1)
            print("setsockopt after bind: ok", flush=True)
        except OSError as e:
            print("setsockopt after bind: %s" % errno.errorcode.get(e.errno, e.errno), flush=True)
    if a.chroot:
        os.chroot(a.chroot)
        os.chdir("/")
    if a.second_port:
        s2 = socket.socket(fam, socket.SOCK_DGRAM)
        s2.bind((a.bind, a.second_port))
        d, addr = s2.recvfrom(65535)
        s2.sendto(d, addr)
        s2.close()
    print("ready", flush=True)
    mux = a.mux
    if mux == "block":
        serve_block(s)
    elif mux == "select":
        serve_select(s)
    elif mux == "poll":
        serve_poll(s)
    elif mux in ("epoll", "epoll-et"):
        serve_epoll(s, mux == "epoll-et")
    elif mux == "asyncio":
        serve_asyncio(s)
    elif mux == "fork":
        serve_fork(s)
    elif mux == "daemon":
        serve_daemon(s)
    elif mux == "prefork":
        serve_prefork(s, a.fork_after)
    elif mux == "grandchild":
        serve_grandchild(s, a.fork_after)
    elif mux == "gso":
        serve_gso(s)
    elif mux == "peek":
        serve_peek(s)
    elif mux == "cmsg":
        serve_cmsg(s, a.expect_dst)
    elif mux == "shutdown":
        serve_shutdown(s)
    elif mux == "tstamp":
        serve_tstamp(s)
    elif mux == "pktinfo":
        serve_pktinfo(s, a.expect_dst)
    elif mux == "dup":
        # The socket under another number, the first one closed.
        fd = os.dup(s.fileno())
        s.close()
        s = socket.socket(fileno=fd)
        serve_block(s)
    else:
        sys.exit("unknown --mux " + mux)
    s.close()


if __name__ == "__main__":
    main()
