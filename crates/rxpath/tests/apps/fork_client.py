#!/usr/bin/env python3
"""Connections to a fork-per-connection server that answers each with
what its child makes of the bytes sent (socat TCP-LISTEN,fork): usage
fork_client.py ADDR PORT. Eight connections, four at a time, each sends
its own bytes (up to 1.4 MB) while it reads the answer, shuts its
writing once all is sent and reads the answer to the end; prints one line per connection, in order: its number, the
answer's length and sha256."""
import concurrent.futures, hashlib, socket, sys, threading, time

addr, port = sys.argv[1], int(sys.argv[2])


def connect():
    for _ in range(100):
        try:
            return socket.create_connection((addr, port), timeout=20)
        except OSError:
            time.sleep(0.1)
    raise SystemExit("no server")


def one(i):
    s = connect()
    data = bytes((i * 7 + k) % 251 for k in range(i * 200_000 + 13))

    def send():
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)

    sender = threading.Thread(target=send)
    sender.start()
    got = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        got += b
    sender.join()
    s.close()
    return "%d %d %s" % (i, len(got), hashlib.sha256(got).hexdigest())


connect().close()  # the server listens
with concurrent.futures.ThreadPoolExecutor(4) as ex:
    for line in ex.map(one, range(8)):
        print(line, flush=True)
