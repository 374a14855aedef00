#!/usr/bin/env python3
"""Options set on a listener before listen() are its connections' (the
kernel's sk_clone_lock copies the socket): SO_LINGER {1, 0}, SO_KEEPALIVE,
TCP_NODELAY, IP_TOS and the buffer sizes (SO_RCVBUF, SO_SNDBUF: doubled,
and fixed) set on the listener read back on the accepted connection, and its close() resets the connection (linger 0) instead of
sending a FIN.

usage: tcp_listener_opts.py ADDR PORT   (prints "ready" once listening)
One connection from tcp_listener_opts_client.py: sends it "hello", prints
what the accepted socket says of each option, closes."""
import socket, struct, sys

addr, port = sys.argv[1], int(sys.argv[2])
l = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
l.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
l.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
l.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, 0x20)
l.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 50000)
l.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 32768)
l.bind((addr, port))
l.listen(4)
print("ready", flush=True)

c, _ = l.accept()
print("linger", struct.unpack("ii", c.getsockopt(socket.SOL_SOCKET, socket.SO_LINGER, 8)), flush=True)
print("keepalive", c.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE), flush=True)
print("nodelay", c.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY), flush=True)
print("tos", hex(c.getsockopt(socket.IPPROTO_IP, socket.IP_TOS)), flush=True)
print("rcvbuf", c.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF), flush=True)
print("sndbuf", c.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF), flush=True)
c.sendall(b"hello")
# Wait for the client to have it (it says so), then close: a reset.
c.recv(16)
c.close()
print("done", flush=True)
