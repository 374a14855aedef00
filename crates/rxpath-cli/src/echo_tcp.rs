//! `rxpath echo --tcp`: the echo server on rxpath's TCP. One thread
//! accepts; each connection has a thread that reads and writes back: the
//! bytes as they come, or in `--sockperf` mode each whole sockperf message
//! that asks for an answer, its client bit cleared (sockperf's TCP
//! ping-pong).

use crate::sockperf::{sockperf_reply, SOCKPERF_HEADER};
use rxpath_runtime::{Host, TcpListener, TcpStream};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};

/// The largest sockperf message a connection takes (its `-m` limit).
const MSG_MAX: usize = 65_536;

/// The connections being served: each stream and its thread.
type Conns = Arc<Mutex<Vec<(Arc<TcpStream>, JoinHandle<()>)>>>;

/// A running TCP echo.
pub(crate) struct TcpEcho {
    listener: Arc<TcpListener>,
    acceptor: JoinHandle<()>,
    conns: Conns,
}

impl TcpEcho {
    /// Listen on `addr` and serve every connection until [`Self::stop`],
    /// the `n`-th connection's thread on CPU `cpus[n % len]` if `cpus` names
    /// any (its reads record that CPU for RFS).
    pub(crate) fn start(
        host: &Host,
        addr: SocketAddr,
        (busy_us, sockperf): (u32, bool),
        cpus: Vec<u16>,
        stop: Arc<AtomicBool>,
        echoed: Arc<AtomicU64>,
    ) -> anyhow::Result<TcpEcho> {
        let listener = Arc::new(host.tcp_listen(addr, 128)?);
        listener.set_busy_poll(busy_us);
        let conns: Conns = Arc::default();
        let (l, c) = (listener.clone(), conns.clone());
        let acceptor = thread::Builder::new()
            .name("rxpath-echo/accept".into())
            .spawn(move || {
                let mut n = 0;
                while !stop.load(Ordering::Acquire) {
                    let Ok((s, _)) = l.accept() else {
                        break;
                    };
                    let s = Arc::new(s);
                    let (s2, echoed) = (s.clone(), echoed.clone());
                    let cpu = (!cpus.is_empty()).then(|| cpus[n % cpus.len()] as usize);
                    n += 1;
                    let h = thread::Builder::new()
                        .name("rxpath-echo/conn".into())
                        .spawn(move || {
                            if let Some(c) = cpu {
                                if let Err(e) = rxpath_os::sched::pin(0, c) {
                                    log::warn!("echo: a connection's thread not on CPU {c}: {e}");
                                }
                            }
                            serve_conn(&s2, sockperf, &echoed)
                        });
                    match h {
                        Ok(h) => rxpath_dev::sync::lock(&c).push((s, h)),
                        Err(e) => log::warn!("echo: no thread for a connection: {e}"),
                    }
                }
            })?;
        Ok(TcpEcho {
            listener,
            acceptor,
            conns,
        })
    }

    /// The address it listens on.
    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr()
    }

    /// Close the listener, shut every connection down (each thread sees
    /// the end of its stream) and wait for the threads.
    pub(crate) fn stop(self) {
        self.listener.close();
        let _ = self.acceptor.join();
        let conns = std::mem::take(&mut *rxpath_dev::sync::lock(&self.conns));
        for (s, h) in conns {
            let _ = s.shutdown(true, true);
            let _ = h.join();
        }
    }
}

/// Echo one connection until its end (or an error): what was answered is
/// counted in `echoed` (chunks, or sockperf messages).
fn serve_conn(s: &TcpStream, sockperf: bool, echoed: &AtomicU64) {
    if sockperf {
        let _ = serve_sockperf(|b| s.read(b), |m| s.write_all(m), echoed);
        return;
    }
    let mut buf = vec![0u8; MSG_MAX];
    loop {
        let n = match s.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if s.write_all(&buf[..n]).is_err() {
            return;
        }
        echoed.fetch_add(1, Ordering::Relaxed);
    }
}

/// Answer a stream of sockperf messages as `sockperf server --tcp` does:
/// each whole message that asks for an answer goes back, its client bit
/// cleared, counted in `echoed`. Until the end of the stream (`Ok`) or an
/// error of `read` or `write`, or a message longer than sockperf's limit.
/// For any stream: rxpath's TCP here, the kernel's in the benches.
pub fn serve_sockperf(
    mut read: impl FnMut(&mut [u8]) -> std::io::Result<usize>,
    mut write: impl FnMut(&[u8]) -> std::io::Result<()>,
    echoed: &AtomicU64,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; MSG_MAX * 2];
    let mut have = 0;
    loop {
        match read(&mut buf[have..])? {
            0 => return Ok(()),
            n => have += n,
        }
        let mut at = 0;
        while let Some(len) = message_len(&buf[at..have]) {
            if !(SOCKPERF_HEADER..=MSG_MAX).contains(&len) {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("a sockperf message of {len} bytes"),
                ));
            }
            if at + len > have {
                break;
            }
            let msg = &mut buf[at..at + len];
            if sockperf_reply(msg) {
                write(msg)?;
                echoed.fetch_add(1, Ordering::Relaxed);
            }
            at += len;
        }
        buf.copy_within(at..have, 0);
        have -= at;
    }
}

/// The length a sockperf message at the start of `b` says it has (its
/// header's length field), once the header is there.
fn message_len(b: &[u8]) -> Option<usize> {
    let h = b.get(..SOCKPERF_HEADER)?;
    Some(u32::from_be_bytes([h[10], h[11], h[12], h[13]]) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_says_its_length_once_its_header_is_there() {
        let m = [0, 0, 0, 0, 0, 0, 0, 7, 0, 3, 0, 0, 0, 64];
        assert_eq!(message_len(&m), Some(64));
        assert_eq!(message_len(&m[..13]), None);
    }
}
