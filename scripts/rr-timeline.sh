#!/bin/sh
# Where one UDP round trip's time goes, measured: `sockperf ping-pong` in
# the lab's peer namespace (CPU 1) against `rxpath echo --busy-poll 50`
# (CPU 0, AF_XDP, as `bench rr`'s busy row) or the kernel's `sockperf
# server` (CPU 0), with the kernel's tracepoints recorded system-wide for
# one second: the client's sendto, its veth transmit, the XDP redirect
# into the AF_XDP socket (rxpath) or the server's receive (kernel), the
# server's send (rxpath's TX kick, a sendto on the XSK; the kernel
# server's sendto), the reply's transmit, its receive on the client's
# end, and the client's recvfrom returning. scripts/rr-timeline.py pairs
# them into round trips and prints the median of each step.
#
#     sudo scripts/rr-timeline.sh [rxpath|kernel] [OUT_PREFIX]
#
# Root, perf, sockperf; the lab (`rxpath lab up`, 198.18.0.0/15) is made
# and removed. Tracepoints cost a little each: the steps add up to more
# than sockperf's round trip without them (it is printed beside them).
set -eu
server=${1:-rxpath}
out=${2:-/tmp/rr-timeline-$server}
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${RXPATH:-$here/target/release/rxpath}
for t in perf sockperf; do
    command -v $t >/dev/null || { echo "rr-timeline: needs $t" >&2; exit 1; }
done
ns=rxp-peer
cleanup() {
    [ -n "${srv:-}" ] && kill "$srv" 2>/dev/null || true
    wait 2>/dev/null || true
    "$bin" lab down >/dev/null 2>&1 || true
}
trap cleanup EXIT INT TERM
"$bin" lab up --queues 1 >/dev/null
case $server in
rxpath)
    taskset -c 0 "$bin" echo --iface rxp0 --port 11111 --sockperf --queues 1 \
        --threads 1 --napi-threads 1 --busy-poll 50 --duration 30s >"$out.server.log" 2>&1 &
    srv=$! ;;
kernel)
    taskset -c 0 sockperf server -i 198.18.0.1 -p 11111 >"$out.server.log" 2>&1 &
    srv=$! ;;
*) echo "rr-timeline: rxpath or kernel" >&2; exit 2 ;;
esac
sleep 2
ip netns exec $ns taskset -c 1 sockperf ping-pong -i 198.18.0.1 -p 11111 -t 6 -m 64 \
    >"$out.client.log" 2>&1 &
cli=$!
sleep 3
perf record -q -a -o "$out.data" \
    -e syscalls:sys_enter_sendto -e syscalls:sys_enter_sendmsg \
    -e syscalls:sys_exit_recvfrom -e syscalls:sys_exit_recvmsg \
    -e net:net_dev_start_xmit -e net:netif_receive_skb -e xdp:xdp_redirect \
    -- sleep 1 >/dev/null 2>&1
wait $cli || true
perf script --ns -i "$out.data" -F comm,pid,tid,cpu,time,event,trace >"$out.txt" 2>/dev/null
python3 "$here/scripts/rr-timeline.py" "$server" "$out.txt" "$out.client.log"
