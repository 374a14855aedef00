// SPDX-License-Identifier: GPL-2.0 OR MIT
//
// rxpath's AF_PACKET steering: which frames rxpath's packet sockets take
// and the kernel never sees, decided once per frame.
//
// An AF_PACKET socket taps a copy of each frame; the kernel still delivers
// the frame itself. For a destination rxpath serves, one of the two must
// give it up, and both must agree on every frame, or a datagram is read
// twice (or by no one) while a port changes hands. Two programs share the
// decision:
//
// - `rxpath_tap`, the socket filter on rxpath's packet sockets, runs at
//   the tap (__netif_receive_skb_core's ptype_all walk). It decides as the
//   XDP program does (the port map, keyed as the kernel keys sockets),
//   keeps the frame in rxpath's ring or not, and writes its verdict in a
//   per-CPU slot.
// - `rxpath_ingress`, on the interface's tcx ingress hook, runs next for
//   the same frame on the same CPU (taps, then ingress, before any other
//   frame on this CPU) and drops what the tap took, before IP input; the
//   rest goes on to the kernel. It reads the slot and clears it, so a
//   frame no tap judged (rxpath's sockets gone) is the kernel's.
//
// A port given back to the kernel (or taken) in the map changes hands
// between two frames, never within one.
//
// Frames longer than rxpath's frames hold (jumbo frames), IP fragments
// (the kernel reassembles them for the socket behind the fd), VLAN
// frames with an ID, and frames for another host are the kernel's.
//
// Built with scripts/build-xdp.sh; the object is checked in beside this
// file, and a unit test fails when this file changes without it.

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

#define SEC(name) __attribute__((section(name), used))
#define IPPROTO_UDP 17
#define IPPROTO_TCP 6
#define ETH_HLEN 14
#define IP6_HLEN 40
#define PACKET_OTHERHOST 3
// tcx's verdicts.
#define TCX_NEXT -1
#define TCX_DROP 2
// As in rxpath_xdp.bpf.c: every chain a frame can carry.
#define V6_EXT_MAX 1200
#define V6_OFF_MAX 9216

// The start of struct __sk_buff (include/uapi/linux/bpf.h): the fields
// read here, at their offsets.
struct __sk_buff {
	u32 len;
	u32 pkt_type;
	u32 mark;
	u32 queue_mapping;
	u32 protocol;
	u32 vlan_present;
	u32 vlan_tci;
};

static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static long (*bpf_skb_load_bytes)(const void *skb, u32 off, void *to, u32 len) = (void *)26;

// `ports`: the destinations taken (as the XDP program's). `verdict`: a
// per-CPU array of one u32, the tap's verdict on the frame in flight on
// this CPU (0: none, 1: the kernel's, 2: taken).
char ports[4] SEC("maps");
char verdict[4] SEC("maps");

// The XDP program's struct rxpath_cfg; this program reads protocol,
// port_map, ipv4, ipv6 and max_len.
struct rxpath_cfg {
	u8 all;
	u8 ipv4;
	u8 ipv6;
	u8 protocol;
	u8 port_map;
	u8 has_port;
	u16 port;
	u16 max_len;
	u8 frags;
};

static volatile const struct rxpath_cfg cfg SEC(".rodata") = {};

struct port_key {
	u8 family;
	u8 proto;
	u16 port;
	u8 addr[16];
};

// The values, as in rxpath_xdp.bpf.c: rxpath's, or the kernel's (an
// address whose socket is the kernel's, before a wildcard one).
#define TAKE 1
#define KERNEL 2

static __attribute__((always_inline)) int taken(struct port_key *key)
{
	u8 *v = bpf_map_lookup_elem(ports, key);

	if (v)
		return *v == TAKE;
	__builtin_memset(key->addr, 0, 16);
	v = bpf_map_lookup_elem(ports, key);
	return v && *v == TAKE;
}

// IPv4 at `l3`: not a fragment, the port after the header and options.
static __attribute__((always_inline)) int take_v4(struct __sk_buff *skb, u32 l3)
{
	u8 h[20];
	u16 port;
	struct port_key key = {};

	if (bpf_skb_load_bytes(skb, l3, h, sizeof(h)))
		return 0;
	if ((h[0] >> 4) != 4 || (h[0] & 0x0f) < 5 || h[9] != cfg.protocol)
		return 0;
	if (((h[6] << 8) | h[7]) & 0x3fff)
		return 0;
	if (bpf_skb_load_bytes(skb, l3 + (h[0] & 0x0f) * 4 + 2, &port, 2))
		return 0;
	key.family = 4;
	key.proto = cfg.protocol;
	key.port = port;
	__builtin_memcpy(key.addr, h + 16, 4);
	return taken(&key);
}

// IPv6 at `l3`: hop-by-hop, routing and destination options walked to
// the end of the chain (as ipv6_rcv); a fragment is the kernel's.
static __attribute__((always_inline)) int take_v6(struct __sk_buff *skb, u32 l3)
{
	u8 h[IP6_HLEN];
	u8 ext[2];
	u8 next;
	u32 off = IP6_HLEN;
	u16 port;
	struct port_key key = {};

	if (bpf_skb_load_bytes(skb, l3, h, sizeof(h)))
		return 0;
	if ((h[0] >> 4) != 6)
		return 0;
	next = h[6];
	for (int i = 0; i < V6_EXT_MAX; i++) {
		if (next == cfg.protocol || off > V6_OFF_MAX)
			break;
		if (next != 0 && next != 43 && next != 60)
			return 0;
		if (bpf_skb_load_bytes(skb, l3 + off, ext, 2))
			return 0;
		next = ext[0];
		off += ((u32)ext[1] + 1) * 8;
	}
	if (next != cfg.protocol || off > V6_OFF_MAX)
		return 0;
	if (bpf_skb_load_bytes(skb, l3 + off + 2, &port, 2))
		return 0;
	key.family = 6;
	key.proto = cfg.protocol;
	key.port = port;
	__builtin_memcpy(key.addr, h + 24, 16);
	return taken(&key);
}

static __attribute__((always_inline)) int judge(struct __sk_buff *skb)
{
	u16 proto;

	if (!cfg.port_map || skb->len > cfg.max_len)
		return 0;
	if (skb->pkt_type == PACKET_OTHERHOST)
		return 0;
	// A tag the device took off (the tap and ingress see it so): an ID
	// is a VLAN device's frame.
	if (skb->vlan_present && (skb->vlan_tci & 0x0fff))
		return 0;
	if (bpf_skb_load_bytes(skb, 12, &proto, 2))
		return 0;
	if (proto == __builtin_bswap16(0x0800))
		return cfg.ipv4 && take_v4(skb, ETH_HLEN);
	if (proto == __builtin_bswap16(0x86dd))
		return cfg.ipv6 && take_v6(skb, ETH_HLEN);
	return 0;
}

SEC("socket")
int rxpath_tap(struct __sk_buff *skb)
{
	u32 zero = 0;
	u32 *slot = bpf_map_lookup_elem(verdict, &zero);
	int take = judge(skb);

	if (slot)
		*slot = take ? 2 : 1;
	return take ? skb->len : 0;
}

SEC("tc")
int rxpath_ingress(struct __sk_buff *skb)
{
	u32 zero = 0;
	u32 *slot = bpf_map_lookup_elem(verdict, &zero);
	u32 v;

	if (!slot)
		return TCX_NEXT;
	v = *slot;
	*slot = 0;
	return v == 2 ? TCX_DROP : TCX_NEXT;
}

char _license[] SEC("license") = "GPL";
