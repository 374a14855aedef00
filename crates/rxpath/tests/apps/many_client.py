#!/usr/bin/env python3
"""Many short connections to an echo server: usage many_client.py ADDR
PORT N. Eight at a time, each sends its own bytes, shuts its writing and
reads the answer to the end; prints one line per connection, in order:
its number, the answer's length and sha256."""
import concurrent.futures, hashlib, socket, sys, time

addr, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])


def one(i):
    for _ in range(100):
        try:
            s = socket.create_connection((addr, port), timeout=20)
            break
        except OSError:
            time.sleep(0.1)
    else:
        raise SystemExit("no server")
    s.sendall(bytes((i * 13 + k) % 251 for k in range(i * 3000 + 7)))
    s.shutdown(socket.SHUT_WR)
    got = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        got += b
    s.close()
    return "%d %d %s" % (i, len(got), hashlib.sha256(got).hexdigest())


with concurrent.futures.ThreadPoolExecutor(8) as ex:
    for line in ex.map(one, range(n)):
        print(line, flush=True)
