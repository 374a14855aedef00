#!/bin/sh
# Build rxpath's XDP program from its C source with clang's BPF target, and
# record the source's checksum beside the object (a unit test of rxpath-dev
# fails when the source changes without the object). The object is checked
# in: cargo alone builds rxpath; only a change to the program needs clang.
set -eu
dir=$(dirname "$0")/../crates/rxpath-dev/src/sys/xdp
src=$dir/rxpath_xdp.bpf.c
obj=$dir/rxpath_xdp.bpf.o
command -v clang >/dev/null || { echo "clang is needed (apt-get install clang)" >&2; exit 1; }
# No -g: no BTF; the loader needs only the code, its relocations and .rodata.
clang -O2 -target bpf -mcpu=v2 -Wall -Werror -c "$src" -o "$obj"
python3 -c "import sys, zlib; print(zlib.crc32(open(sys.argv[1], 'rb').read()))" "$src" > "$obj.crc32"
echo "built $obj ($(wc -c < "$obj") bytes), source CRC-32 $(cat "$obj.crc32")"
