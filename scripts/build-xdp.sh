#!/bin/sh
# Build rxpath's BPF programs from their C sources with clang's BPF target
# (the XDP program, and AF_PACKET's tap and ingress steering), and record
# each source's checksum beside its object (a unit test of rxpath-dev fails
# when a source changes without its object). The objects are checked in:
# cargo alone builds rxpath; only a change to a program needs clang.
set -eu
sys=$(dirname "$0")/../crates/rxpath-dev/src/sys
command -v clang >/dev/null || { echo "clang is needed (apt-get install clang)" >&2; exit 1; }
for src in "$sys/xdp/rxpath_xdp.bpf.c" "$sys/tap/rxpath_tap.bpf.c"; do
	obj=${src%.c}.o
	# No -g: no BTF; the loader needs only the code, its relocations and .rodata.
	clang -O2 -target bpf -mcpu=v2 -Wall -Werror -c "$src" -o "$obj"
	python3 -c "import sys, zlib; print(zlib.crc32(open(sys.argv[1], 'rb').read()))" "$src" > "$obj.crc32"
	echo "built $obj ($(wc -c < "$obj") bytes), source CRC-32 $(cat "$obj.crc32")"
done
