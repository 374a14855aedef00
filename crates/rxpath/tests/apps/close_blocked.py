"""close() while another thread is blocked in recvfrom on the socket, as
the kernel keeps it: the blocked call holds the open file, so the port
stays bound (a new bind to it fails with EADDRINUSE) and the call returns
the next datagram. Prints "rebind: ERRNO-NAME" (or "rebind: ok"), then
"ready"; the blocked thread answers the datagram it gets from a fresh
socket and prints "blocked read returned N bytes"; exit 0.

    close_blocked.py --port P
"""

import argparse
import errno
import socket
import threading
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    a = ap.parse_args()
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("0.0.0.0", a.port))
    got = []

    def reader():
        d, addr = s.recvfrom(65535)
        got.append(len(d))
        r = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        r.sendto(d, addr)
        r.close()

    t = threading.Thread(target=reader)
    t.start()
    time.sleep(0.3)
    s.close()
    s2 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s2.bind(("0.0.0.0", a.port))
        print("rebind: ok", flush=True)
    except OSError as e:
        print("rebind: %s" % errno.errorcode.get(e.errno, e.errno), flush=True)
    print("ready", flush=True)
    t.join(10.0)
    if t.is_alive():
        print("the blocked read never returned", flush=True)
        import os
        os._exit(1)
    print("blocked read returned %d bytes" % got[0], flush=True)


if __name__ == "__main__":
    main()
