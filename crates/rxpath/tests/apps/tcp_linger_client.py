#!/usr/bin/env python3
"""The client of tcp_linger.py: two connections; reads the first after 1 s
and the second after 3 s, each to its end; prints the bytes of each."""
import socket, sys, time

addr, port = sys.argv[1], int(sys.argv[2])
for wait in (1.0, 3.0):
    s = socket.create_connection((addr, port))
    time.sleep(wait)
    got = 0
    while True:
        b = s.recv(1 << 20)
        if not b:
            break
        got += len(b)
    print("got", got, flush=True)
    s.close()
