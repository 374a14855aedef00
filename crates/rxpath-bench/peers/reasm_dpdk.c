/*
 * The DPDK peer of `rxpath bench reasm`: IPv4 fragments from a capture,
 * replayed from memory by DPDK's pcap driver (net_pcap, infinite_rx=1),
 * put back together by librte_ip_frag as a DPDK application does it:
 * rte_ipv4_frag_reassemble_packet per fragment (a table of 4096 buckets
 * of 16, 30 s life, as the kernel's ipfrag_time), the death row freed
 * after each burst and every datagram freed once whole. No checksum is
 * checked (librte_ip_frag checks none).
 *
 * With two lcores (-l A,B) the driver runs on the second: its
 * rte_eth_rx_burst copies each packet into a fresh mbuf, as a NIC's DMA
 * would write it, and hands the bursts over an rte_ring to the first,
 * which reassembles (rxpath's replay has the same split: a producer
 * thread writes the frames, the NAPI thread reassembles). With one lcore
 * it does both.
 *
 * Usage: reasm_dpdk EAL-ARGS -- SECONDS
 * Prints one JSON line: the fragments, datagrams and seconds of the timed
 * window, and the seconds of it the reassembling lcore spent on packets.
 */
#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_ip.h>
#include <rte_ip_frag.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_ring.h>
#include <stdio.h>
#include <stdlib.h>

#define BURST 32
#define POOL 32767

static volatile int stop;

/* The driver's lcore: bursts from the port into the ring, until stop. */
static int rx_lcore(void *arg)
{
	struct rte_ring *ring = arg;
	struct rte_mbuf *pkts[BURST];
	while (!stop) {
		uint16_t n = rte_eth_rx_burst(0, 0, pkts, BURST);
		uint16_t put = 0;
		while (put < n && !stop)
			put += rte_ring_enqueue_burst(ring, (void **)pkts + put, n - put, NULL);
		rte_pktmbuf_free_bulk(pkts + put, n - put);
	}
	return 0;
}

static int setup_port(struct rte_mempool *mp)
{
	struct rte_eth_conf conf = {0};
	int sock = rte_eth_dev_socket_id(0);

	if (rte_eth_dev_configure(0, 1, 1, &conf) < 0)
		return -1;
	if (rte_eth_rx_queue_setup(0, 0, 1024, sock, NULL, mp) < 0)
		return -1;
	if (rte_eth_tx_queue_setup(0, 0, 1024, sock, NULL) < 0)
		return -1;
	return rte_eth_dev_start(0);
}

int main(int argc, char **argv)
{
	int used = rte_eal_init(argc, argv);
	if (used < 0) {
		fprintf(stderr, "reasm_dpdk: rte_eal_init failed\n");
		return 2;
	}
	argc -= used;
	argv += used;
	double secs = argc > 1 ? atof(argv[1]) : 2.0;
	if (rte_eth_dev_count_avail() < 1) {
		fprintf(stderr, "reasm_dpdk: no port (the net_pcap vdev is missing)\n");
		return 2;
	}
	struct rte_mempool *mp = rte_pktmbuf_pool_create(
		"rxpath_reasm", POOL, 256, 0, RTE_MBUF_DEFAULT_BUF_SIZE, rte_socket_id());
	if (mp == NULL || setup_port(mp) < 0) {
		fprintf(stderr, "reasm_dpdk: pool or port setup failed\n");
		return 2;
	}
	uint64_t hz = rte_get_tsc_hz();
	struct rte_ip_frag_tbl *tbl =
		rte_ip_frag_table_create(4096, 16, 4096 * 16, hz * 30, rte_socket_id());
	if (tbl == NULL) {
		fprintf(stderr, "reasm_dpdk: rte_ip_frag_table_create failed\n");
		return 2;
	}
	struct rte_ip_frag_death_row dr = {0};
	struct rte_mbuf *pkts[BURST];
	uint64_t frags = 0, dgrams = 0, whole = 0, other = 0, bytes = 0;
	/* Cycles spent on the packets of a burst (reassembly and frees): the
	 * reassembling lcore's busy time, its turns on an empty ring left out. */
	uint64_t reasm_cycles = 0;
	struct rte_ring *ring = NULL;
	unsigned worker = rte_get_next_lcore(-1, 1, 0);
	if (worker < RTE_MAX_LCORE) {
		ring = rte_ring_create("rxpath_reasm_rx", 4096, rte_socket_id(),
				       RING_F_SP_ENQ | RING_F_SC_DEQ);
		if (ring == NULL || rte_eal_remote_launch(rx_lcore, ring, worker) != 0) {
			fprintf(stderr, "reasm_dpdk: the driver's lcore could not start\n");
			return 2;
		}
	}
	uint64_t start = rte_rdtsc();
	uint64_t end = start + (uint64_t)(secs * (double)hz);
	uint64_t now = start;
	while (now < end) {
		uint16_t n = ring != NULL
			? rte_ring_dequeue_burst(ring, (void **)pkts, BURST, NULL)
			: rte_eth_rx_burst(0, 0, pkts, BURST);
		now = rte_rdtsc();
		uint64_t t0 = now;
		if (n == 0)
			continue;
		for (uint16_t i = 0; i < n; i++) {
			struct rte_mbuf *m = pkts[i];
			struct rte_ether_hdr *eh = rte_pktmbuf_mtod(m, struct rte_ether_hdr *);
			if (eh->ether_type != rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4)) {
				other++;
				rte_pktmbuf_free(m);
				continue;
			}
			struct rte_ipv4_hdr *ip = (struct rte_ipv4_hdr *)(eh + 1);
			if (!rte_ipv4_frag_pkt_is_fragmented(ip)) {
				whole++;
				rte_pktmbuf_free(m);
				continue;
			}
			frags++;
			m->l2_len = sizeof(*eh);
			m->l3_len = (ip->version_ihl & 0x0f) * 4;
			struct rte_mbuf *d = rte_ipv4_frag_reassemble_packet(tbl, &dr, m, now, ip);
			if (d != NULL) {
				dgrams++;
				bytes += d->pkt_len;
				rte_pktmbuf_free(d);
			}
		}
		rte_ip_frag_free_death_row(&dr, 3);
		reasm_cycles += rte_rdtsc() - t0;
	}
	double elapsed = (double)(rte_rdtsc() - start) / (double)hz;
	stop = 1;
	rte_eal_mp_wait_lcore();
	if (ring != NULL) {
		struct rte_mbuf *m;
		while (rte_ring_dequeue(ring, (void **)&m) == 0)
			rte_pktmbuf_free(m);
	}
	printf("{\"fragments\":%lu,\"datagrams\":%lu,\"unfragmented\":%lu,\"other\":%lu,"
	       "\"bytes\":%lu,\"seconds\":%.6f,\"reasm_seconds\":%.6f}\n",
	       (unsigned long)frags, (unsigned long)dgrams, (unsigned long)whole,
	       (unsigned long)other, (unsigned long)bytes, elapsed,
	       (double)reasm_cycles / (double)hz);
	fflush(stdout);
	rte_ip_frag_table_destroy(tbl);
	rte_eth_dev_stop(0);
	rte_eal_cleanup();
	return 0;
}
