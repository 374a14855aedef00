//! The kernel's side of `bench rfs`: an echo on the reader's CPU that
//! answers as sockperf's server does, over UDP (a socket that connects to
//! its client) or TCP (the accepted connections), so that the kernel's RFS
//! learns the flow from the reader's reads.

use crate::sockperf::PORT;
use anyhow::{bail, Context, Result};
use rxpath_cli::echo_tcp::serve_sockperf;
use rxpath_cli::sockperf::sockperf_reply;
use rxpath_os::sched;
use rxpath_runtime::lab::HOST_ADDR;
use std::io::{self, ErrorKind};
use std::net::{TcpListener, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

/// The kernel's echo on the reader's CPU, until [`KernelEcho::stop`].
pub(super) struct KernelEcho {
    stop: Arc<AtomicBool>,
    thread: thread::JoinHandle<io::Result<()>>,
}

impl KernelEcho {
    /// Bind the echo's socket on [`PORT`] and serve it from a thread on
    /// `cpu`: TCP's listener if `tcp`, else UDP's socket.
    pub(super) fn start(cpu: usize, tcp: bool) -> Result<KernelEcho> {
        if tcp {
            let l = TcpListener::bind((HOST_ADDR, PORT))
                .context("binding the kernel's TCP listener")?;
            l.set_nonblocking(true)?;
            Self::on_cpu(cpu, move |stop| serve_tcp(&l, stop))
        } else {
            let sock =
                UdpSocket::bind((HOST_ADDR, PORT)).context("binding the kernel's echo socket")?;
            sock.set_read_timeout(Some(Duration::from_millis(50)))?;
            Self::on_cpu(cpu, move |stop| serve_udp(&sock, stop))
        }
    }

    /// Run `serve` on a thread pinned to `cpu` until the stop flag it is
    /// given is set.
    fn on_cpu(
        cpu: usize,
        serve: impl FnOnce(&AtomicBool) -> io::Result<()> + Send + 'static,
    ) -> Result<KernelEcho> {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = thread::Builder::new()
            .name("kernel-echo".into())
            .spawn(move || {
                if let Err(e) = sched::pin(0, cpu) {
                    eprintln!("rxpath bench: could not pin the kernel's echo to CPU {cpu}: {e}");
                }
                serve(&s)
            })
            .context("starting the kernel's echo thread")?;
        Ok(KernelEcho { stop, thread })
    }

    pub(super) fn stop(self) -> Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.join() {
            Ok(r) => r.context("the kernel's echo socket"),
            Err(_) => bail!("the kernel's echo thread panicked"),
        }
    }
}

/// UDP: answer each sockperf request, and connect to the client at its
/// first datagram. The kernel's RFS learns a flow only from a connected
/// UDP socket (`__udp_queue_rcv_skb` saves `sk_rxhash` only when the socket
/// has a peer; the seed: "RFS for TCP and connected UDP sockets"), so
/// `sockperf server`, whose socket never connects, gets RPS under RFS's
/// knobs.
fn serve_udp(sock: &UdpSocket, stop: &AtomicBool) -> io::Result<()> {
    let mut buf = [0u8; 2048];
    let mut connected = false;
    // A connected socket reports an ICMP port unreachable (a reply that
    // reached a client just gone, between the readiness probe and the run)
    // as ECONNREFUSED once.
    let passing = |e: &io::Error| {
        matches!(
            e.kind(),
            ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::ConnectionRefused
        )
    };
    while !stop.load(Ordering::Relaxed) {
        let (n, from) = match sock.recv_from(&mut buf) {
            Ok(r) => r,
            Err(e) if passing(&e) => continue,
            Err(e) => return Err(e),
        };
        if !sockperf_reply(&mut buf[..n]) {
            continue;
        }
        if !connected {
            sock.connect(from)?;
            connected = true;
        }
        match sock.send(&buf[..n]) {
            Err(e) if !passing(&e) => return Err(e),
            _ => {}
        }
    }
    Ok(())
}

/// TCP: serve the listener's connections one at a time as `sockperf
/// server --tcp` answers; the kernel's RFS learns each flow from the
/// thread's reads (`inet_recvmsg` records it).
fn serve_tcp(l: &TcpListener, stop: &AtomicBool) -> io::Result<()> {
    let echoed = AtomicU64::new(0);
    while !stop.load(Ordering::Relaxed) {
        let c = match l.accept() {
            Ok((c, _)) => c,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                thread::sleep(Duration::from_millis(5));
                continue;
            }
            Err(e) => return Err(e),
        };
        c.set_nonblocking(false)?;
        c.set_nodelay(true)?;
        c.set_read_timeout(Some(Duration::from_millis(50)))?;
        let read = |b: &mut [u8]| loop {
            match io::Read::read(&mut &c, b) {
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    if stop.load(Ordering::Relaxed) {
                        return Ok(0);
                    }
                }
                r => return r,
            }
        };
        let write = |m: &[u8]| io::Write::write_all(&mut &c, m);
        // A client gone mid-message ends its connection, not the echo.
        let _ = serve_sockperf(read, write, &echoed);
    }
    Ok(())
}
