#!/usr/bin/env python3
"""A fork-per-connection server from the standard library
(socketserver.ForkingTCPServer): usage forking_server.py ADDR PORT. Each
child sets TCP_NODELAY, says the connection's addresses as
getpeername/getsockname give them (the peer's address without its port),
then sends back what it reads until the peer's end of stream.
SIGTERM ends it as a clean exit."""
import signal, socket, socketserver, sys

# SIGTERM ends the server as a clean exit (the children have answered).
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))


class Echo(socketserver.BaseRequestHandler):
    def handle(self):
        s = self.request
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer, local = s.getpeername(), s.getsockname()
        s.sendall(b"peer %s local %s:%d\n" % (peer[0].encode(), local[0].encode(), local[1]))
        while True:
            b = s.recv(65536)
            if not b:
                break
            s.sendall(b)


socketserver.ForkingTCPServer.allow_reuse_address = True
with socketserver.ForkingTCPServer((sys.argv[1], int(sys.argv[2])), Echo) as srv:
    srv.serve_forever()
