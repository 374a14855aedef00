#!/usr/bin/env python3
"""SO_LINGER with a timeout: close() waits for the peer to acknowledge what
was written and the FIN (sk_stream_wait_close), or for the timeout.

usage: tcp_linger.py ADDR PORT   (prints "ready" once listening)
Two connections from tcp_linger_client.py, each sent what the socket takes
without blocking (the client reads nothing yet):
  acked:   SO_LINGER 5 s; the client starts reading after 1 s, so close()
           returns once it has read everything (about 1 s);
  timeout: SO_LINGER 1 s; the client reads after 3 s, so close() returns at
           the timeout (about 1 s) and the data goes on being delivered.
Prints, per connection, the bytes sent and whether close() took as long as
it should (the client prints the bytes it got)."""
import socket, struct, sys, time

addr, port = sys.argv[1], int(sys.argv[2])
l = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind((addr, port))
l.listen(4)
print("ready", flush=True)

for case, linger, lo, hi in (("acked", 5, 0.8, 4.5), ("timeout", 1, 0.8, 2.5)):
    c, _ = l.accept()
    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, linger))
    c.setblocking(False)
    sent, chunk = 0, b"x" * 65536
    while sent < 8_000_000:
        try:
            sent += c.send(chunk)
        except BlockingIOError:
            break
    c.setblocking(True)
    t = time.monotonic()
    c.close()
    dt = time.monotonic() - t
    print(case, "sent", sent, "close waited as it should:", lo <= dt < hi, flush=True)
print("done", flush=True)
