//! A quinn handshake and transfers between two rxpath hosts on simulated
//! NICs wired back to back (no root, no interface): each host's TX port
//! puts its frames on the other's RX queue.

use rxpath_core::sock::TxPort;
use rxpath_dev::sim::{Coalesce, SimConfig};
use rxpath_quinn::{perf, RxpathSocket};
use rxpath_runtime::{Host, HostConfig, HostDevice};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

const SERVER: &str = "198.18.0.1";
const CLIENT: &str = "198.18.0.2";

fn host(addr: &str, mac: [u8; 6]) -> Arc<Host> {
    let mut cfg = HostConfig::default();
    cfg.sock.local_addrs = vec![addr.parse().unwrap()];
    cfg.sock.mac = mac;
    let sim = SimConfig {
        coalesce: Coalesce::EVERY_FRAME,
        ..Default::default()
    };
    Arc::new(Host::start(cfg, HostDevice::Sim(sim)).expect("sim host"))
}

/// The cable: frames sent by one host arrive on the other's queue.
#[derive(Debug)]
struct Wire(Mutex<Weak<Host>>);

impl TxPort for Wire {
    fn send(&mut self, frames: &[&[u8]]) -> std::io::Result<usize> {
        let Some(peer) = self.0.lock().unwrap().upgrade() else {
            return Ok(0);
        };
        let mut p = peer.sim_port().expect("sim port");
        let mut n = 0;
        for f in frames {
            // A full RX ring drops the frame, as a wire would.
            let _ = p.inject(f, 0);
            n += 1;
        }
        p.flush(rxpath_dev::mono_ns());
        Ok(n)
    }
}

#[test]
fn quinn_handshake_and_perf_transfers_over_rxpath_sockets() {
    let (smac, cmac) = ([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
    let server = host(SERVER, smac);
    let client = host(CLIENT, cmac);
    server
        .sockets()
        .set_tx(Box::new(Wire(Mutex::new(Arc::downgrade(&client)))));
    client
        .sockets()
        .set_tx(Box::new(Wire(Mutex::new(Arc::downgrade(&server)))));
    // rxpath runs no ARP: each side knows the other's MAC.
    client.sockets().add_neighbor(SERVER.parse().unwrap(), smac);
    server.sockets().add_neighbor(CLIENT.parse().unwrap(), cmac);

    let saddr: SocketAddr = format!("{SERVER}:4433").parse().unwrap();
    let ssock = server.udp_bind(saddr).unwrap();
    let csock = client
        .udp_bind(format!("{CLIENT}:0").parse().unwrap())
        .unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let stats = Arc::new(perf::ServerStats::default());
    let (done, gro_reads) = rt.block_on(async {
        let (scfg, cert) = perf::self_signed_server().unwrap();
        let sep = quinn::Endpoint::new_with_abstract_socket(
            quinn::EndpointConfig::default(),
            Some(scfg),
            Arc::new(RxpathSocket::new(ssock.clone())),
            Arc::new(quinn::TokioRuntime),
        )
        .unwrap();
        tokio::spawn(perf::serve(sep.clone(), stats.clone()));
        let mut cep = quinn::Endpoint::new_with_abstract_socket(
            quinn::EndpointConfig::default(),
            None,
            Arc::new(RxpathSocket::new(csock.clone())),
            Arc::new(quinn::TokioRuntime),
        )
        .unwrap();
        cep.set_default_client_config(perf::client_trusting(cert).unwrap());
        let conn = tokio::time::timeout(
            Duration::from_secs(10),
            cep.connect(saddr, "localhost").unwrap(),
        )
        .await
        .expect("handshake in time")
        .expect("handshake");
        // Upload 4 MB, download 4 MB, and small requests.
        let r = tokio::time::timeout(Duration::from_secs(60), async {
            let up = perf::request(&conn, 4 << 20, 0).await?;
            let down = perf::request(&conn, 0, 4 << 20).await?;
            for _ in 0..20 {
                perf::request(&conn, 32, 32).await?;
            }
            anyhow::Ok(up + down)
        })
        .await
        .expect("transfers in time")
        .expect("transfers");
        conn.close(0u32.into(), b"done");
        cep.wait_idle().await;
        sep.close(0u32.into(), b"done");
        (r, ssock.counters().read)
    });
    let reads = gro_reads;
    assert_eq!(done, 4 << 20, "every byte asked for arrived");
    assert_eq!(stats.bytes_in.load(Ordering::Relaxed), (4 << 20) + 20 * 32);
    assert_eq!(stats.connections.load(Ordering::Relaxed), 1);
    assert!(stats.streams.load(Ordering::Relaxed) >= 22);
    assert!(gro_reads > 0);
    drop((ssock, csock));
    drop(rt);
    for (name, h) in [("server", server), ("client", client)] {
        let Ok(h) = Arc::try_unwrap(h) else {
            panic!("{name} host still shared")
        };
        let r = h.shutdown();
        assert_eq!(r.frames_home, r.frames_total, "every frame home");
        if name == "server" {
            // quinn's segmented sends arrive as bursts that GRO merges: the
            // server read several datagrams per read.
            let t = r.napi_total();
            eprintln!("server: {} datagrams in {} reads", t.delivered, reads);
            assert!(t.delivered >= 2 * reads, "GRO packets reached quinn");
        }
    }
}
