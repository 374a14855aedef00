// SPDX-License-Identifier: GPL-2.0 OR MIT
//
// rxpath's XDP program: which frames go to the AF_XDP sockets and which
// to the kernel.
//
// A frame it takes is redirected to the AF_XDP socket of the queue it
// arrived on (XDP_PASS when that queue has none), ICMP errors about the
// TCP segments of the ports it takes included; everything else goes to
// the kernel: ARP and ND, what the configuration does not ask for, and
// whatever this program cannot judge by itself (IP fragments of a
// datagram whose first piece it did not take, IPv6 AH and ESP headers,
// VLAN tags with an ID), which the kernel then handles as it always does
// (reassembly included), and frames longer
// than an AF_XDP frame holds (jumbo frames), which the kernel would drop
// on the way to the socket.
//
// The loader (prog.rs) makes the maps and fills in `cfg` before loading;
// `cfg` is frozen read-only, so the verifier knows it and prunes the paths
// a configuration does not use.
//
// Built with scripts/build-xdp.sh (clang's BPF target); the object is
// checked in beside this file so that cargo alone builds rxpath, and a
// unit test fails when this file changes without the object.

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

#define SEC(name) __attribute__((section(name), used))
#define XDP_PASS 2
#define IPPROTO_ICMP 1
#define IPPROTO_TCP 6
#define IPPROTO_UDP 17
#define IPPROTO_ICMPV6 58
#define ETH_HLEN 14
#define IP4_HLEN 20
#define IP6_HLEN 40
// Extension headers the IPv6 walk steps over, at most (ipv6_rcv's
// hop-by-hop, routing and destination options, each at least 8 bytes):
// more than a frame this program takes can hold (cfg.max_len, 1792
// bytes; a longer frame is the kernel's), so every chain a taken frame
// carries is walked to its end. The verifier walks every iteration: a
// tighter bound is a faster load.
#define V6_EXT_MAX 232
#define V6_OFF_MAX 2048

struct xdp_md {
	u32 data;
	u32 data_end;
	u32 data_meta;
	u32 ingress_ifindex;
	u32 rx_queue_index;
};

// The helpers, by number (include/uapi/linux/bpf.h).
static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static long (*bpf_map_update_elem)(void *map, const void *key, const void *value,
				   u64 flags) = (void *)2;
static long (*bpf_map_delete_elem)(void *map, const void *key) = (void *)3;
static u64 (*bpf_ktime_get_ns)(void) = (void *)5;
static long (*bpf_redirect_map)(void *map, u64 key, u64 flags) = (void *)51;

// The maps: made by the loader, which puts their descriptors where these
// names are used. `xsks`: the XSKMAP, a socket per queue. `ports`: the
// destinations taken, keyed as the kernel keys sockets by struct port_key
// below (a hash map the loader updates as sockets are bound and closed).
char xsks[4] SEC("maps");
char ports[4] SEC("maps");
// `frags`: the TCP datagrams this program took the first fragment of, by
// struct frag_key, with the time it came (an LRU hash map; an entry
// older than FRAG_TTL_NS is no longer followed: the datagram's last piece
// never came, and its ID may now be another datagram's).
char frags[4] SEC("maps");
#define FRAG_TTL_NS 1000000000ull

// What to take (the Rust XdpFilter).
struct rxpath_cfg {
	u8 all;      // every frame, whatever it is
	u8 ipv4;     // IPv4 frames
	u8 ipv6;     // IPv6 frames
	u8 protocol; // only this IP protocol (0: any)
	u8 port_map; // only destination ports in `ports` (UDP or TCP)
	u8 has_port; // only destination port `port`
	u16 port;    // in network order
	u16 max_len; // longer frames are the kernel's (an AF_XDP frame cannot hold them)
	u8 frags;    // with a port filter: take IP fragments too (rxpath reassembles)
};

static volatile const struct rxpath_cfg cfg SEC(".rodata") = {};

static __attribute__((always_inline)) u16 load16(const u8 *p)
{
	return *(const u16 *)p;
}

// The port map's key: a destination as the kernel keys sockets, by
// family, protocol, address and port; a socket bound to its family's
// wildcard is the key with an all-zero address (prog.rs: PortKey). Its
// value: TAKE (rxpath's), or KERNEL for an address whose socket is the
// kernel's, which the kernel picks before a wildcard socket on the port
// (rxpath's or not).
#define TAKE 1
#define KERNEL 2
struct port_key {
	u8 family; // 4 or 6
	u8 proto;
	u16 port;  // in network order
	u8 addr[16];
};

// A fragmented datagram, as the kernel's reassembly keys it: family,
// protocol, identification, source and destination.
struct frag_key {
	u8 family;
	u8 proto;
	u16 pad;
	u32 id;
	u8 src[16];
	u8 dst[16];
};

// Is the destination port `dport` (network order) at `daddr` (4 or 16
// bytes of address, by `family`) one this program takes? The bound
// address first, then the wildcard, as the kernel's socket lookup falls
// back to it.
static __attribute__((always_inline)) int port_taken(u16 dport, u8 proto, u8 family,
						     const u8 *daddr)
{
	if (cfg.port_map) {
		struct port_key key = {};

		key.family = family;
		key.proto = proto;
		key.port = dport;
		if (family == 4)
			__builtin_memcpy(key.addr, daddr, 4);
		else
			__builtin_memcpy(key.addr, daddr, 16);
		u8 *v = bpf_map_lookup_elem(ports, &key);

		if (v)
			return *v == TAKE;
		__builtin_memset(key.addr, 0, 16);
		v = bpf_map_lookup_elem(ports, &key);
		return v && *v == TAKE;
	}
	return !cfg.has_port || dport == cfg.port;
}

// With the port map and no protocol, UDP and TCP both go by the map
// (its keys name the protocol); otherwise by `protocol`.
static __attribute__((always_inline)) int by_port(void)
{
	if (cfg.port_map && !cfg.protocol)
		return 1;
	return (cfg.port_map || cfg.has_port) &&
	       (cfg.protocol == IPPROTO_UDP || cfg.protocol == IPPROTO_TCP);
}

// Is `p` a protocol this program takes (before any port is looked at)?
static __attribute__((always_inline)) int wanted(u8 p)
{
	if (cfg.protocol)
		return p == cfg.protocol;
	return !cfg.port_map || p == IPPROTO_UDP || p == IPPROTO_TCP;
}

// Does this program take TCP by port (the ICMP errors about its
// connections go where their segments go)?
static __attribute__((always_inline)) int tcp_by_port(void)
{
	return by_port() && (cfg.protocol == 0 || cfg.protocol == IPPROTO_TCP);
}

// An ICMP error (destination unreachable, time exceeded, parameter
// problem) quoting a TCP segment sent from a port this program takes:
// the TCP behind that port hears of it (tcp_v4_err). `icmp` is the ICMP
// header; the quoted source is this host's end.
static __attribute__((always_inline)) int take_icmp_v4(const u8 *icmp, const u8 *end)
{
	const u8 *q = icmp + 8;
	const u8 *ql4;

	if (q + IP4_HLEN > end)
		return 0;
	if (icmp[0] != 3 && icmp[0] != 11 && icmp[0] != 12)
		return 0;
	if ((q[0] >> 4) != 4 || (q[0] & 0x0f) < 5 || q[9] != IPPROTO_TCP)
		return 0;
	ql4 = q + (q[0] & 0x0f) * 4;
	if (ql4 + 8 > end)
		return 0;
	return port_taken(load16(ql4), IPPROTO_TCP, 4, q + 12);
}

// ICMPv6's errors (types 1 to 4) as take_icmp_v4's: the quoted IPv6
// header followed by TCP (a quote with extension headers is the
// kernel's).
static __attribute__((always_inline)) int take_icmp_v6(const u8 *icmp, const u8 *end)
{
	const u8 *q = icmp + 8;

	if (q + IP6_HLEN + 8 > end)
		return 0;
	if (icmp[0] < 1 || icmp[0] > 4 || q[6] != IPPROTO_TCP)
		return 0;
	return port_taken(load16(q + IP6_HLEN), IPPROTO_TCP, 6, q + 8);
}

// A fragment of a TCP datagram (`k` its key, `first`: the piece at
// offset 0, whose TCP header is at `l4`; `last`: no more fragments after
// it). The first goes where its destination port says, and if this
// program takes it, the datagram's later pieces follow it (the kernel
// would reassemble them into a segment of a connection it does not know
// and reset it). A later piece that came before the first is the
// kernel's: that datagram is lost, and TCP sends it again.
static __attribute__((always_inline)) int take_tcp_frag(struct frag_key *k, int first,
							  int last, const u8 *l4, const u8 *end,
							  const u8 *daddr)
{
	u64 now = bpf_ktime_get_ns();
	u64 *seen;

	if (first) {
		if (l4 + 4 > end || !port_taken(load16(l4 + 2), IPPROTO_TCP, k->family, daddr)) {
			// The kernel's datagram: no earlier one of its key is
			// followed any more.
			bpf_map_delete_elem(frags, k);
			return 0;
		}
		// One piece only (an atomic fragment): nothing to follow.
		if (!last)
			bpf_map_update_elem(frags, k, &now, 0);
		return 1;
	}
	seen = bpf_map_lookup_elem(frags, k);
	if (!seen)
		return 0;
	if (now - *seen > FRAG_TTL_NS || last) {
		bpf_map_delete_elem(frags, k);
		return now - *seen <= FRAG_TTL_NS;
	}
	return 1;
}

// `l3` is the IP header (after the Ethernet header and any priority
// tags), `end` the frame's end; the caller checked IP4_HLEN bytes there.
static __attribute__((always_inline)) int take_v4(const u8 *l3, const u8 *end)
{
	const u8 *l4;
	u32 ihl = l3[0] & 0x0f;

	if (l3[9] == IPPROTO_ICMP && tcp_by_port()) {
		if ((l3[0] >> 4) != 4 || ihl < 5 || (load16(l3 + 6) & __builtin_bswap16(0x3fff)))
			return 0;
		return take_icmp_v4(l3 + ihl * 4, end);
	}
	if (!wanted(l3[9]))
		return 0;
	if (!by_port())
		return 1;
	// Not IPv4, or a header shorter than its fixed part: the kernel's,
	// which counts it.
	if ((l3[0] >> 4) != 4 || ihl < 5)
		return 0;
	// A fragment (MF or an offset): its ports are not where ports are,
	// or not there at all; the kernel reassembles it, unless this host
	// reassembles what reaches it (a host with no kernel socket behind),
	// or it is TCP to a port this program takes.
	if (load16(l3 + 6) & __builtin_bswap16(0x3fff)) {
		struct frag_key k = {};

		if (cfg.frags)
			return 1;
		if (l3[9] != IPPROTO_TCP || !tcp_by_port())
			return 0;
		k.family = 4;
		k.proto = IPPROTO_TCP;
		k.id = load16(l3 + 4);
		__builtin_memcpy(k.src, l3 + 12, 4);
		__builtin_memcpy(k.dst, l3 + 16, 4);
		return take_tcp_frag(&k, !(load16(l3 + 6) & __builtin_bswap16(0x1fff)),
				     !(load16(l3 + 6) & __builtin_bswap16(0x2000)), l3 + ihl * 4,
				     end, l3 + 16);
	}
	// Options or not, the ports follow the header (ihl words).
	l4 = l3 + ihl * 4;
	if (l4 + 4 > end)
		return 0;
	return port_taken(load16(l4 + 2), l3[9], 4, l3 + 16);
}

// The IPv6 header chain, walked as ipv6_rcv and ip6_protocol_deliver_rcu
// do: hop-by-hop (0), routing (43) and destination options (60) headers,
// each (hdr_ext_len + 1) * 8 bytes, to the end of the chain. `l3` is the
// IPv6 header.
static __attribute__((always_inline)) int take_v6(const u8 *l3, const u8 *end)
{
	u8 next = l3[6];
	u32 off = IP6_HLEN;
	const u8 *l4;

	if (!cfg.protocol && !cfg.port_map)
		return 1;
	if (!by_port())
		return next == cfg.protocol;
	if (l3 + IP6_HLEN > end)
		return 0;
	// An ICMPv6 error right after the header (one behind extension
	// headers is the kernel's, which drops it: no socket of its own).
	if (next == IPPROTO_ICMPV6 && tcp_by_port())
		return take_icmp_v6(l3 + IP6_HLEN, end);
	for (int i = 0; i < V6_EXT_MAX; i++) {
		const u8 *h;

		// Past any frame (the verifier needs the bound to add it).
		if (off > V6_OFF_MAX)
			return 0;
		h = l3 + off;

		if (next != 0 && next != 43 && next != 60 && next != 44 && wanted(next))
			break;
		// A fragment header: as IPv4's fragments.
		if (next == 44) {
			struct frag_key k = {};

			if (cfg.frags)
				return 1;
			if (h + 8 > end || h[0] != IPPROTO_TCP || !tcp_by_port())
				return 0;
			k.family = 6;
			k.proto = IPPROTO_TCP;
			k.id = *(const u32 *)(h + 4);
			__builtin_memcpy(k.src, l3 + 8, 16);
			__builtin_memcpy(k.dst, l3 + 24, 16);
			return take_tcp_frag(&k, !(load16(h + 2) & __builtin_bswap16(0xfff8)),
					     !(load16(h + 2) & __builtin_bswap16(0x0001)), h + 8, end,
					     l3 + 24);
		}
		if (next != 0 && next != 43 && next != 60)
			return 0;
		if (h + 2 > end)
			return 0;
		next = h[0];
		off += ((u32)h[1] + 1) * 8;
	}
	if (!wanted(next) || off > V6_OFF_MAX)
		return 0;
	l4 = l3 + off;
	if (l4 + 4 > end)
		return 0;
	return port_taken(load16(l4 + 2), next, 6, l3 + 24);
}

SEC("xdp")
int rxpath_xdp(struct xdp_md *ctx)
{
	const u8 *data = (const u8 *)(long)ctx->data;
	const u8 *end = (const u8 *)(long)ctx->data_end;
	const u8 *l3 = data + ETH_HLEN;
	u16 proto;
	int take = 0;

	if (cfg.max_len && data + cfg.max_len < end)
		return XDP_PASS;
	if (cfg.all)
		return bpf_redirect_map(xsks, ctx->rx_queue_index, XDP_PASS);
	if (data + ETH_HLEN > end)
		return XDP_PASS;
	proto = load16(data + 12);
	// Up to two priority tags (802.1Q or 802.1ad with VLAN ID 0), which
	// the kernel takes as untagged on this device (vlan_do_receive); a
	// tag with an ID is a VLAN device's, the kernel's.
#pragma unroll
	for (int i = 0; i < 2; i++) {
		if (proto != __builtin_bswap16(0x8100) && proto != __builtin_bswap16(0x88a8))
			break;
		if (l3 + 4 > end)
			return XDP_PASS;
		if (load16(l3) & __builtin_bswap16(0x0fff))
			return XDP_PASS;
		proto = load16(l3 + 2);
		l3 += 4;
	}
	// The fixed part of an IPv4 header, at least.
	if (l3 + IP4_HLEN > end)
		return XDP_PASS;
	switch (proto) {
	case __builtin_bswap16(0x0800):
		take = cfg.ipv4 && take_v4(l3, end);
		break;
	case __builtin_bswap16(0x86dd):
		take = cfg.ipv6 && take_v6(l3, end);
		break;
	}
	if (!take)
		return XDP_PASS;
	return bpf_redirect_map(xsks, ctx->rx_queue_index, XDP_PASS);
}

char _license[] SEC("license") = "GPL";
