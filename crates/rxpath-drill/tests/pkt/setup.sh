#!/bin/sh
# rxpath's own packetdrill scripts (tests/pkt/corners): the sysctls they
# assume, set in the run's network namespace. Run by each script first.
sysctl -q net.ipv4.tcp_timestamps=0
sysctl -q net.ipv4.tcp_sack=1
sysctl -q net.ipv4.tcp_window_scaling=1
sysctl -q net.ipv4.tcp_rmem="4096 540000 15728640"
sysctl -q net.ipv4.tcp_wmem="4096 262144 4194304"
sysctl -q net.ipv4.tcp_syncookies=1
sysctl -q net.ipv4.tcp_early_retrans=3
tc qdisc replace dev tun0 root pfifo 2>/dev/null || true
exit 0
