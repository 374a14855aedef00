#!/usr/bin/env python3
"""A TCP server that walks the socket calls a real server makes and prints
what it saw, line by line, so that its output under `rxpath exec` can be
compared with its output on the kernel: a level-triggered listener and
edge-triggered connections in epoll (EPOLLIN, EPOLLRDHUP, EPOLLOUT),
poll(), MSG_PEEK, MSG_WAITALL, FIONREAD, TCP_INFO's state, the addresses,
non-blocking sends until EAGAIN, SO_LINGER, shutdown and close; a
level-triggered set that sees an idle connection become readable by the
server's own shutdown(SHUT_RD).

usage: tcp_calls.py ADDR PORT   (prints "ready" once listening)
The client (tcp_calls_client.py) sends b"hello", b" world", b"more" a
moment apart on its first connection (a second stays idle), then shuts down its sending side and reads the reply.
"""
import fcntl, select, socket, struct, sys, termios

addr, port = sys.argv[1], int(sys.argv[2])
l = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind((addr, port))
l.listen(16)
l.setblocking(False)
ep = select.epoll()
ep.register(l.fileno(), select.EPOLLIN)
print("ready", flush=True)

def say(*a):
    print(*a, flush=True)

def names(mask):
    out = [n for n, b in (("IN", select.EPOLLIN), ("OUT", select.EPOLLOUT),
                          ("RDHUP", select.EPOLLRDHUP), ("HUP", select.EPOLLHUP),
                          ("ERR", select.EPOLLERR)) if mask & b]
    return "|".join(out)

evs = ep.poll(10)
say("listener", [names(m) for _, m in evs])
c, peer = l.accept()
say("accepted from the client's address:", peer[0])
say("sockname", c.getsockname() == (addr, port), "peername", c.getpeername() == peer)
info = c.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
say("tcp_info state", info[0])
# The client's second, idle connection: not ready in a level-triggered
# set until the server's own shutdown(SHUT_RD) makes it readable (the
# kernel's sk_state_change wakes the set; no packet comes).
l.setblocking(True)
c2, _ = l.accept()
l.setblocking(False)
lt = select.epoll()
lt.register(c2.fileno(), select.EPOLLIN | select.EPOLLRDHUP)
say("idle", lt.poll(0))
c2.shutdown(socket.SHUT_RD)
say("after shutdown(SHUT_RD)", [names(m) for _, m in lt.poll(0)])
c.setblocking(False)
ep.register(c.fileno(), select.EPOLLIN | select.EPOLLRDHUP | select.EPOLLET)

# "hello": edge-triggered, one event; peek, then the rest stays queued.
evs = ep.poll(10)
say("first", [names(m) for _, m in evs])
say("peek", c.recv(3, socket.MSG_PEEK))
n = struct.unpack("i", fcntl.ioctl(c.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0]
say("fionread", n)
say("no second edge without new data", ep.poll(0.2) == [])
# " world": a new edge; MSG_WAITALL reads both parts whole.
c.setblocking(True)
say("waitall", c.recv(11, socket.MSG_WAITALL))
c.setblocking(False)
evs = ep.poll(10)
say("more", [names(m) for _, m in evs], c.recv(100))
try:
    c.recv(100)
except BlockingIOError:
    say("empty: EAGAIN")
# The client's FIN: EPOLLRDHUP with EPOLLIN, then the end of the stream.
p = select.poll()
p.register(c.fileno(), select.POLLIN | select.POLLRDHUP)
evs = ep.poll(10)
say("fin", [names(m) for _, m in evs], "poll", p.poll(1000)[0][1] & (select.POLLIN | select.POLLRDHUP))
say("end", c.recv(100))
# A reply larger than the send buffer, sent non-blocking: EAGAIN, then
# EPOLLOUT when room comes, until all of it went.
ep.modify(c.fileno(), select.EPOLLOUT | select.EPOLLET)
reply = bytes(range(256)) * (8 << 12)
sent, eagain = 0, 0
while sent < len(reply):
    try:
        sent += c.send(reply[sent:sent + 65536])
    except BlockingIOError:
        eagain += 1
        evs = ep.poll(10)
        if not evs:
            say("no EPOLLOUT"); break
say("sent", sent, "met EAGAIN", eagain > 0)
c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 5))
c.shutdown(socket.SHUT_WR)
c.close()
c2.close()
l.close()
say("done")
