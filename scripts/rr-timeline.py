#!/usr/bin/env python3
"""Pair the tracepoints scripts/rr-timeline.sh recorded into round trips
and print the median (and 90th percentile) of each step, in µs.

    rr-timeline.py rxpath|kernel PERF_SCRIPT_TXT [SOCKPERF_CLIENT_LOG]

The client runs on CPU 1, the server on CPU 0. A round trip is, in time
order: the client's sendto (A), its veth's transmit (B), the request
reaching the server (C: the XDP redirect into the AF_XDP socket for
rxpath; the host end's receive for the kernel), for the kernel the
server's recvfrom returning (C2), the server's send (D: rxpath's TX kick,
the kernel server's sendto), the reply's transmit (E; for rxpath it is
inside the kick), its receive on the client's end (F), and the client's recvfrom returning (G). A sequence out
of order is dropped (said).
"""

import re
import statistics
import sys

LINE = re.compile(r"^\s*(\S+)\s+(\d+)/(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+(\S+):\s*(.*)$")


def events(path):
    with open(path) as f:
        for line in f:
            m = LINE.match(line)
            if not m:
                continue
            comm, pid, _tid, cpu, t, ev, rest = m.groups()
            yield comm, int(pid), int(cpu), float(t) * 1e6, ev.rstrip(":"), rest


def step_of(server, comm, cpu, ev, rest):
    """Which step an event is, or None."""
    client = cpu == 1 and comm == "sockperf"
    if ev == "syscalls:sys_enter_sendto" and client:
        return "A"
    if ev in ("syscalls:sys_exit_recvfrom", "syscalls:sys_exit_recvmsg") and client:
        return "G"
    if ev == "net:net_dev_start_xmit":
        if "dev=rxp1" in rest:
            return "B"
        if "dev=rxp0" in rest:
            return "E"
    if ev == "net:netif_receive_skb":
        if "dev=rxp1" in rest:
            return "F"
        if "dev=rxp0" in rest and server == "kernel":
            return "C"
    if ev == "xdp:xdp_redirect" and server == "rxpath":
        return "C"
    if cpu == 0 and not client:
        if server == "kernel" and ev in ("syscalls:sys_exit_recvfrom", "syscalls:sys_exit_recvmsg"):
            return "C2"
        if ev in ("syscalls:sys_enter_sendto", "syscalls:sys_enter_sendmsg"):
            return "D"
    return None


def main():
    server, path = sys.argv[1], sys.argv[2]
    # rxpath's reply leaves through the AF_XDP TX ring: copy mode hands it
    # to the veth inside the kick, without a net_dev_start_xmit (E).
    order = ["A", "B", "C", "C2", "D", "E", "F", "G"] if server == "kernel" else ["A", "B", "C", "D", "F", "G"]
    names = {
        ("A", "B"): "client sendto -> its veth transmits",
        ("B", "C"): "veth -> XDP redirect into the AF_XDP socket" if server == "rxpath" else "veth -> host end receives (IP/UDP input follows)",
        ("C", "C2"): "-> the server's recvfrom returns",
        ("C2", "D"): "server: recvfrom -> sendto",
        ("C", "D"): "rxpath: the poll finds it, IP/UDP input, echo, TX ring -> kick",
        ("D", "E"): "send -> the reply's veth transmit",
        ("D", "F"): "kick: the reply copied to an skb, veth, the client's end receives",
        ("E", "F"): "reply: veth -> the client's end receives",
        ("F", "G"): "-> the client's recvfrom returns",
        ("G", "A"): "client: recvfrom -> its next sendto",
    }
    gaps = {}
    cur, at, last_g, whole, dropped = None, {}, None, [], 0
    for comm, _pid, cpu, t, ev, rest in events(path):
        s = step_of(server, comm, cpu, ev, rest)
        if s is None:
            continue
        if s == "A":
            if last_g is not None:
                gaps.setdefault(("G", "A"), []).append(t - last_g)
                last_g = None
            if cur is not None:
                dropped += 1
            cur, at = 0, {"A": t}
            continue
        if cur is None:
            continue
        want = order[cur + 1] if cur + 1 < len(order) else None
        if s != want:
            # Another event of a step already seen (a second kick, a
            # retransmit) is ignored; one out of order drops the trip.
            if s in at:
                continue
            dropped += 1
            cur = None
            continue
        at[s] = t
        cur += 1
        if s == "G":
            for a, b in zip(order, order[1:]):
                gaps.setdefault((a, b), []).append(at[b] - at[a])
            whole.append(at["G"] - at["A"])
            last_g, cur = t, None
    if not whole:
        sys.exit("rr-timeline: no whole round trip in the trace")
    print(f"{server}: {len(whole)} round trips paired ({dropped} dropped out of order)")
    print(f"{'step':62} {'median µs':>10} {'p90 µs':>8}")
    total = 0.0
    for a, b in list(zip(order, order[1:])) + [("G", "A")]:
        v = gaps.get((a, b), [])
        if not v:
            continue
        med = statistics.median(v)
        p90 = statistics.quantiles(v, n=10)[-1] if len(v) >= 10 else max(v)
        total += med
        print(f"{names[(a, b)]:62} {med:10.2f} {p90:8.2f}")
    print(f"{'send to receive (A -> G), median':62} {statistics.median(whole):10.2f}")
    print(f"{'the steps, added (with the client turn)':62} {total:10.2f}")
    if len(sys.argv) > 3:
        text = open(sys.argv[3]).read()
        m = re.search(r"avg-rtt=([\d.]+)", text) or re.search(r"avg-latency=([\d.]+)", text)
        if m:
            print(f"{'sockperf round trip (avg), traced run':62} {float(m.group(1)):10.2f}")


main()
