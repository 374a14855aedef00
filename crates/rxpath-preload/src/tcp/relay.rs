//! A connection relayed to a forked child: the child's fd is one end of a
//! UNIX stream pair, and two threads of the parent (which runs the host)
//! carry bytes between the other end and rxpath's connection. What the
//! peer sends, the child reads; what the child writes, the peer gets; an
//! end of stream on either side is passed on as one (`shutdown`), and the
//! connection closes once the child has let go of its end and the peer's
//! data stopped or ended.

use super::sock::TcpSock;
use crate::sys::pair;
use crate::sys::Ours;
use rxpath_dev::sync::lock;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Bytes carried at a time.
const CHUNK: usize = 64 * 1024;

/// Relays running in this process.
static RUNNING: AtomicUsize = AtomicUsize::new(0);

/// The parent's ends of the running relays: a child forked later closes
/// its copies ([`close_ends_in_child`]), or the relays would never see
/// their own child let go.
fn ends() -> &'static Mutex<Vec<RawFd>> {
    static E: Mutex<Vec<RawFd>> = Mutex::new(Vec::new());
    &E
}

/// In a child just forked: close the copies of the running relays' ends
/// (and forget them: the child may reuse the numbers, and its own
/// children must not close those).
pub(crate) fn close_ends_in_child() {
    if let Ok(mut e) = ends().try_lock() {
        for fd in e.drain(..) {
            crate::sys::close_fd(fd);
        }
    }
}

/// How many connections are relayed to children now.
pub(crate) fn running() -> usize {
    RUNNING.load(Ordering::SeqCst)
}

/// Carry `t`'s connection to and from the child holding the other end of
/// `end`, on two threads of their own (signals blocked: they are
/// rxpath's). The relay holds the socket: when it stops, the connection
/// closes as it would at its last fd's close (a FIN after what was
/// written; a reset if the child left bytes unread).
pub(crate) fn start(t: Arc<TcpSock>, end: Ours) -> io::Result<()> {
    let end = Arc::new(end);
    let fd = end.as_raw_fd();
    lock(ends()).push(fd);
    let forget = move || lock(ends()).retain(|e| *e != fd);
    RUNNING.fetch_add(1, Ordering::SeqCst);
    let r = crate::sys::signals_blocked(|| {
        std::thread::Builder::new()
            .name("rxpath-relay".into())
            .spawn(move || {
                from_child_then_close(&t, &end);
                // Forgotten before it closes: a later child must not
                // close a number reused by then.
                forget();
                drop((t, end));
                RUNNING.fetch_sub(1, Ordering::SeqCst);
            })
    });
    if let Err(e) = r {
        forget();
        RUNNING.fetch_sub(1, Ordering::SeqCst);
        return Err(e);
    }
    Ok(())
}

/// The child's bytes to the peer (this thread), the peer's to the child
/// (a second thread), then the end: see the module's text.
fn from_child_then_close(t: &Arc<TcpSock>, end: &Arc<Ours>) {
    let Some(s) = t.stream() else { return };
    let to_child = {
        let (t, end) = (t.clone(), end.clone());
        std::thread::Builder::new()
            .name("rxpath-relay-in".into())
            .spawn(move || to_child(&t, &end))
    };
    let Ok(to_child) = to_child else {
        // Nothing would carry the peer's bytes: reset, said by the caller.
        let _ = s.set_option(rxpath_tcp::SockOpt::Linger, 0);
        return;
    };
    let mut buf = vec![0u8; CHUNK];
    let mut child_reset = loop {
        match pair::recv(end, &mut buf) {
            Ok(0) => break false,
            Ok(n) => {
                if write_all(t, &buf[..n]).is_err() {
                    // The connection is gone (reset, timed out): the
                    // child's writes fail from now on, as they would on
                    // the kernel's socket.
                    pair::shut_read(end);
                    break false;
                }
            }
            // The child closed its end with bytes it never read: the
            // kernel's close would reset the connection.
            Err(e) => break e.raw_os_error() == Some(libc::ECONNRESET),
        }
    };
    if !child_reset {
        let _ = s.shutdown(false, true);
        // The child still reads until it closes its end (or shuts its
        // reading, and the peer's end of stream came).
        pair::wait_hangup(end);
        // A child that shut its writing and then closed with bytes unread.
        child_reset = pair::take_error(end) == Some(libc::ECONNRESET);
    }
    if child_reset {
        let _ = s.set_option(rxpath_tcp::SockOpt::Linger, 0);
    }
    // Nothing reads the peer's bytes any more: a read still waiting ends.
    let _ = s.shutdown(true, false);
    s.wake();
    let _ = to_child.join();
}

/// The peer's bytes to the child until either side's stream ends.
fn to_child(t: &TcpSock, end: &Ours) {
    let Some(s) = t.stream() else { return };
    let mut buf = vec![0u8; CHUNK];
    loop {
        match s.recv(&mut buf, false, false) {
            Ok(0) => break,
            Ok(n) => {
                if pair::send_all(end, &buf[..n]).is_err() {
                    // The child let go with the peer's bytes unread: the
                    // kernel's close would reset the connection.
                    let _ = s.set_option(rxpath_tcp::SockOpt::Linger, 0);
                    return;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // Reset or timed out: the child reads the end of the stream.
            Err(_) => break,
        }
    }
    pair::shut_write(end);
}

/// Send all of `buf` on `t`'s connection, waiting for room.
fn write_all(t: &TcpSock, mut buf: &[u8]) -> io::Result<()> {
    let Some(s) = t.stream() else {
        return Err(io::ErrorKind::NotConnected.into());
    };
    while !buf.is_empty() {
        match s.send(buf, false, false) {
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
