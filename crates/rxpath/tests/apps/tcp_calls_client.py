#!/usr/bin/env python3
"""The client of tcp_calls.py: usage: tcp_calls_client.py ADDR PORT."""
import hashlib, socket, sys, time

addr, port = sys.argv[1], int(sys.argv[2])
for _ in range(100):
    try:
        s = socket.create_connection((addr, port), timeout=10)
        break
    except OSError:
        time.sleep(0.1)
# A second connection, left idle (the server shuts its reading side).
s2 = socket.create_connection((addr, port), timeout=10)
for part in (b"hello", b" world", b"more"):
    time.sleep(0.4)
    s.sendall(part)
time.sleep(0.4)
s.shutdown(socket.SHUT_WR)
h, n = hashlib.sha256(), 0
while True:
    b = s.recv(65536)
    if not b:
        break
    n += len(b)
    h.update(b)
print(n, h.hexdigest())
