#!/bin/bash
# Where a DNS answer's CPU goes: knotd under `rxpath exec` and in Knot's
# own AF_XDP mode, each at one offered rate from kxdpgun, the server core
# (CPU 0) sampled by `perf record` (cpu-clock: idle is sampled too), then
# each DSO's samples turned into ns per answered query. Root; needs knot,
# knot-dnsutils, perf and a release build (`cargo build --release`).
#
#   sudo scripts/dns-profile.sh [RATE] [OUT.txt]
#
# The topology is `rxpath lab`'s with one queue (as `rxpath bench dns`
# builds it): rxpdns0 here, rxpdns1 in netns rxp-dns, 198.18.0.1/.2.
# Everything it starts and builds is removed on exit, even on failure.
set -euo pipefail
rate=${1:-180000}
out=${2:-/dev/stdout}
secs=8
here=$(cd "$(dirname "$0")/.." && pwd)
rxpath=$here/target/release/rxpath
for t in knotd kxdpgun perf taskset python3; do
    command -v $t >/dev/null || { echo "$t is needed" >&2; exit 1; }
done
[ -x "$rxpath" ] || { echo "build first: cargo build --release" >&2; exit 1; }
dir=$(mktemp -d /tmp/rxpath-dns-profile.XXXXXX)
cleanup() {
    pkill -INT -x knotd 2>/dev/null || true
    sleep 1
    ip link set dev rxpdns0 xdp off 2>/dev/null || true
    "$rxpath" lab down --host-if rxpdns0 --peer-if rxpdns1 --netns rxp-dns >/dev/null 2>&1 || true
    rm -rf "$dir"
}
trap cleanup EXIT
if pgrep -x knotd >/dev/null; then
    echo "a knotd runs already; stop it first" >&2
    exit 1
fi
"$rxpath" lab up --queues 1 --host-if rxpdns0 --peer-if rxpdns1 --netns rxp-dns >/dev/null
mkdir -p "$dir/run"
cat > "$dir/example.test.zone" <<'EOF'
$ORIGIN example.test.
$TTL 3600
@ IN SOA ns1 hostmaster 1 7200 3600 1209600 3600
@ IN NS ns1
ns1 IN A 198.18.0.1
www IN A 198.18.0.10
www IN AAAA 2001:2::10
EOF
printf 'www.example.test A\nwww.example.test AAAA\nexample.test NS\nexample.test SOA\n' > "$dir/queries.txt"
conf() { # $1: extra server-level sections
    cat <<EOF
server:
    rundir: "$dir/run"
    user: root:root
    listen: 198.18.0.1@53
    udp-workers: 1
    tcp-workers: 1
    background-workers: 1
$1
database:
    storage: "$dir/db"
log:
  - target: stderr
    any: error
zone:
  - domain: example.test
    storage: "$dir"
    file: "example.test.zone"
EOF
}
conf "" > "$dir/exec.conf"
conf "xdp:
    listen: rxpdns0@53
    udp: on" > "$dir/xdp.conf"

for mode in exec xdp; do
    if [ $mode = exec ]; then
        taskset -c 0 "$rxpath" exec --iface rxpdns0 --mode xdp -- knotd -c "$dir/exec.conf" > "$dir/exec.out" 2>&1 &
    else
        taskset -c 0 knotd -c "$dir/xdp.conf" > "$dir/xdp.out" 2>&1 &
    fi
    sleep 3
    ip netns exec rxp-dns kxdpgun -t $((secs + 4)) -Q "$rate" -F 1 -I rxpdns1 \
        -i "$dir/queries.txt" 198.18.0.1 > "$dir/$mode.gun" 2>&1 &
    gun=$!
    sleep 2
    perf record -o "$dir/$mode.data" -C 0 -- sleep $secs >/dev/null 2>&1
    wait $gun
    pkill -INT -x knotd
    sleep 2
    [ $mode = xdp ] && ip link set dev rxpdns0 xdp off
    perf report -i "$dir/$mode.data" --no-children --sort dso -F overhead,dso \
        2>/dev/null | grep -v '^#' | grep -v '^$' > "$dir/$mode.dso"
    perf report -i "$dir/$mode.data" --no-children --sort sym -F overhead,sym \
        --percent-limit 0.5 2>/dev/null | grep -v '^#' | grep -v '^$' > "$dir/$mode.sym"
done

python3 - "$dir" "$rate" "$secs" > "$out" <<'EOF'
import re, sys
d, rate, secs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
name = {"exec": "knotd under rxpath exec", "xdp": "knotd, its own AF_XDP mode"}
def answered(m):
    t = open(f"{d}/{m}.gun").read()
    got = re.search(r"total replies:\s+\d+ \((\d+) pps\)", t)
    return int(got.group(1))
def rows(m, kind):
    for line in open(f"{d}/{m}.{kind}"):
        p = line.split(None, 1)
        if len(p) == 2 and p[0].endswith("%"):
            yield float(p[0][:-1]), p[1].strip()
print(f"offered {rate}/s; CPU 0 (knotd and its threads) sampled {secs} s; ns per answered query")
for m in ("exec", "xdp"):
    a = answered(m)
    ns = lambda pct: pct / 100 * 1e9 / a
    dsos = list(rows(m, "dso"))
    idle = sum(p for p, s in rows(m, "sym") if "safe_halt" in s or "cpuidle" in s)
    busy = sum(p for p, _ in dsos) - idle
    print(f"\n{name[m]}: answered {a}/s; busy {ns(busy):.0f} ns per answer")
    for p, s in sorted(dsos, reverse=True):
        if s.startswith("[kernel"):
            p -= idle
            s += " (idle taken out)"
        if ns(p) >= 5:
            print(f"  {ns(p):6.0f}  {s}")
    print("  symbols over 0.5 % of CPU 0, ns per answer:")
    for p, s in sorted(rows(m, "sym"), reverse=True):
        if "safe_halt" not in s and "cpuidle" not in s:
            print(f"  {ns(p):6.0f}  {s}")
EOF
