"""A server that starts another program which serves a socket of its own
(as a supervisor runs a worker with exec): the parent binds --port P,
prints "ready" once the child it started (this script with --child,
through subprocess, so fork and exec) has bound P+1; each answers
datagrams on its port until one reads "quit", answered "bye".

    two_processes.py --port P
"""

import argparse
import socket
import subprocess
import sys


def serve(s):
    while True:
        d, a = s.recvfrom(65535)
        if d == b"quit":
            s.sendto(b"bye", a)
            return
        s.sendto(d, a)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--child", action="store_true")
    a = ap.parse_args()
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("0.0.0.0", a.port))
    if a.child:
        print("bound", flush=True)
        serve(s)
        return
    c = subprocess.Popen(
        [sys.executable, __file__, "--port", str(a.port + 1), "--child"],
        stdout=subprocess.PIPE,
    )
    c.stdout.readline()
    print("ready", flush=True)
    serve(s)
    c.wait()


if __name__ == "__main__":
    main()
