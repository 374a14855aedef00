#!/usr/bin/env python3
"""The client of tcp_listener_opts.py: reads "hello", says so, then reads
on: prints what it got and how the connection ended ("reset" for a
ECONNRESET, "eof" for a FIN)."""
import socket, sys

addr, port = sys.argv[1], int(sys.argv[2])
s = socket.create_connection((addr, port))
s.settimeout(20)
got = b""
while len(got) < 5:
    b = s.recv(16)
    if not b:
        break
    got += b
print("got", got.decode(), flush=True)
s.sendall(b"ok")
try:
    end = "eof" if s.recv(16) == b"" else "data"
except ConnectionResetError:
    end = "reset"
print(end, flush=True)
