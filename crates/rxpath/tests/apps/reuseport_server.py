#!/usr/bin/env python3
"""A server with a listener per thread, as SO_REUSEPORT servers are
built: usage reuseport_server.py ADDR PORT THREADS CONNECTIONS. Each
thread binds its own socket to ADDR:PORT with SO_REUSEPORT, listens and
echoes what each connection it accepts sends, to its end. Prints `ready`
once all listen; after CONNECTIONS in all, one line per listener with
how many it took, then `served N`."""
import socket, sys, threading

addr, port, n, total = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
lock = threading.Lock()
taken = [0] * n
done = threading.Event()
listeners = []
for i in range(n):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind((addr, port))
    s.listen(64)
    listeners.append(s)


def serve(i):
    while True:
        c, _ = listeners[i].accept()
        got = b""
        while True:
            b = c.recv(65536)
            if not b:
                break
            got += b
        c.sendall(got)
        c.close()
        with lock:
            taken[i] += 1
            if sum(taken) == total:
                done.set()


for i in range(n):
    threading.Thread(target=serve, args=(i,), daemon=True).start()
print("ready", flush=True)
done.wait()
for i, k in enumerate(taken):
    print("listener %d: %d" % (i, k))
print("served %d" % sum(taken), flush=True)
