//! The waiting half of rxpath's TCP sockets: threads asleep in `accept`,
//! `read`, `write` and `connect`, busy polling, and the thread that runs
//! the machine's timers. The machine and every call that never waits are
//! `rxpath_core::sock`'s TCP layer (over `rxpath_tcp`, sans-I/O).
//!
//! ```text
//!  segment ─▶ core TCP layer ─ TcpWake::changed(ids) ─▶ TcpWaits: each socket's
//!             (lock, Stack)                              Waiter bumped, its sleepers woken
//!                            ─ TcpWake::rearm(at)   ─▶ the timer thread sleeps until `at`,
//!                                                      then Sockets::tcp_timeout
//! ```
//!
//! A call that cannot go on (`EAGAIN`) busy-polls the NAPI the socket's
//! last segment came from for `busy_poll` µs if on (`sk_busy_loop`), then
//! sleeps on its [`Waiter`] until the machine touches the socket.

use super::{busy_loop, lock, Watch};
use foldhash::HashMap;
use rxpath_core::sock::{Sockets, TcpWake, BUSY_POLL_BUDGET};
use rxpath_core::NapiId;
use rxpath_tcp::{SockId, SockOpt, Stack, State};
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::thread::JoinHandle;

/// One socket's sleepers: a generation bumped each time the machine
/// touches the socket, so a sleeper that looked before the bump does not
/// sleep through it.
#[derive(Debug, Default)]
struct Waiter {
    gen: Mutex<Gen>,
    cv: Condvar,
    /// The NAPI of the socket's last segment (`sk_napi_id`).
    napi: AtomicU32,
    /// The flow hash of its last segment (`sk_rxhash`).
    rxhash: AtomicU32,
    /// A preloaded program's `poll`/`epoll` on the socket, told each time
    /// the machine touches it (`sk_data_ready`, `sk_write_space`,
    /// `sk_state_change`: it looks at the socket's events itself).
    watch: OnceLock<Weak<dyn Watch>>,
}

/// A waiter's generation and how many threads sleep on it (a bump with
/// no sleeper makes no system call).
#[derive(Debug, Default)]
struct Gen {
    n: u64,
    sleepers: u32,
}

impl Waiter {
    fn bump(&self) {
        {
            let mut g = lock(&self.gen);
            g.n += 1;
            if g.sleepers > 0 {
                self.cv.notify_all();
            }
        }
        if let Some(w) = self.watch.get().and_then(Weak::upgrade) {
            w.ready();
        }
    }

    fn generation(&self) -> u64 {
        lock(&self.gen).n
    }

    /// Sleep until the generation moves past `seen` or `most` passes.
    fn wait_past_for(&self, seen: u64, most: std::time::Duration) {
        let mut g = lock(&self.gen);
        if g.n != seen {
            return;
        }
        g.sleepers += 1;
        g = self
            .cv
            .wait_timeout(g, most)
            .map(|(g, _)| g)
            .unwrap_or_else(|e| e.into_inner().0);
        g.sleepers -= 1;
    }

    /// Sleep until the generation moves past `seen`.
    fn wait_past(&self, seen: u64) {
        let mut g = lock(&self.gen);
        g.sleepers += 1;
        while g.n == seen {
            g = self.cv.wait(g).unwrap_or_else(|e| e.into_inner());
        }
        g.sleepers -= 1;
    }
}

/// The longest the timer thread sleeps while any timer runs: a jiffy at
/// the kernel's HZ=250. A deadline that comes sooner than the one the
/// thread sleeps toward is run at its next look, up to this late, as the
/// kernel's timer wheel runs timers on jiffies.
const TIMER_TICK_NS: u64 = 4_000_000;

/// The timer's deadline and the stop flag, under one lock.
#[derive(Debug, Default)]
struct TimerState {
    at: Option<u64>,
    stop: bool,
}

/// A host's TCP waiters and its timer: the [`TcpWake`] the core calls.
#[derive(Debug, Default)]
pub struct TcpWaits {
    waiters: Mutex<HashMap<SockId, Arc<Waiter>>>,
    timer: Mutex<TimerState>,
    timer_cv: Condvar,
}

impl TcpWake for TcpWaits {
    fn changed(&self, ids: &[SockId], napi: u32, rxhash: u32) {
        let mut w = lock(&self.waiters);
        for id in ids {
            // A socket without a waiter yet (a child in the accept queue)
            // gets one from a segment, as the kernel's child keeps its
            // `sk_napi_id` and `sk_rxhash` from before `accept`.
            let x = match w.get(id) {
                Some(x) => x,
                None if napi != 0 || rxhash != 0 => w.entry(*id).or_default(),
                None => continue,
            };
            if napi != 0 {
                x.napi.store(napi, Ordering::Relaxed);
            }
            if rxhash != 0 && x.rxhash.load(Ordering::Relaxed) != rxhash {
                x.rxhash.store(rxhash, Ordering::Relaxed);
            }
            x.bump();
        }
    }

    fn rearm(&self, at: Option<u64>) {
        let mut g = lock(&self.timer);
        let was_idle = g.at.is_none();
        g.at = at;
        // While any timer runs the thread looks at least once a jiffy
        // (`TIMER_TICK_NS`), so a deadline that moves (the delayed ACK's
        // and the RTO's, on every segment) costs no wakeup; only a thread
        // asleep with no timer at all must be told.
        if was_idle && at.is_some() {
            self.timer_cv.notify_one();
        }
    }
}

impl TcpWaits {
    /// The waiter of `id`, an accepted child: the one its segments made
    /// before `accept`, if any.
    fn waiter(&self, id: SockId) -> Arc<Waiter> {
        lock(&self.waiters).entry(id).or_default().clone()
    }

    /// A new waiter for `id`, a socket just made: nothing of the slot's
    /// earlier owner (its flow, its NAPI, its watch) carries over.
    fn fresh_waiter(&self, id: SockId) -> Arc<Waiter> {
        let w = Arc::new(Waiter::default());
        lock(&self.waiters).insert(id, w.clone());
        w
    }

    /// Forget `id`'s waiter if it is still `mine` (and wake who sleeps
    /// on it): a closed socket's slot may be a new socket's by now, with
    /// a waiter of its own.
    fn forget_mine(&self, id: SockId, mine: &Arc<Waiter>) {
        let mut ws = lock(&self.waiters);
        if ws.get(&id).is_some_and(|w| Arc::ptr_eq(w, mine)) {
            ws.remove(&id);
        }
        drop(ws);
        mine.bump();
    }

    /// Start the thread that runs the machine's timers on `socks`
    /// (`tcp_write_timer`, `tcp_delack_timer`, `tcp_keepalive_timer`):
    /// it sleeps until the deadline the core last gave, then runs what is
    /// due. [`Self::stop_timer`] ends it.
    pub fn start_timer(self: &Arc<Self>, socks: Arc<Sockets>) -> io::Result<JoinHandle<()>> {
        let me = self.clone();
        std::thread::Builder::new()
            .name("rxpath-tcp-timer".into())
            .spawn(move || me.timer_loop(&socks))
    }

    /// Stop the timer thread.
    pub fn stop_timer(&self) {
        lock(&self.timer).stop = true;
        self.timer_cv.notify_all();
    }

    fn timer_loop(&self, socks: &Sockets) {
        // A deadline the machine leaves in the past after running it would
        // spin: run it again no sooner than a jiffy later.
        const RETRY_NS: u64 = TIMER_TICK_NS;
        let mut last_run: Option<(u64, u64)> = None;
        let mut g = lock(&self.timer);
        loop {
            if g.stop {
                return;
            }
            let Some(at) = g.at else {
                g = self.timer_cv.wait(g).unwrap_or_else(|e| e.into_inner());
                continue;
            };
            let now = rxpath_dev::mono_ns();
            let due = match last_run {
                Some((d, ran)) if d == at => ran + RETRY_NS,
                _ => at,
            };
            if now < due {
                let wait = std::time::Duration::from_nanos((due - now).min(TIMER_TICK_NS));
                g = self
                    .timer_cv
                    .wait_timeout(g, wait)
                    .map(|r| r.0)
                    .unwrap_or_else(|e| e.into_inner().0);
                continue;
            }
            drop(g);
            last_run = Some((at, now));
            socks.tcp_timeout(now);
            g = lock(&self.timer);
        }
    }
}

fn errno(e: i32) -> io::Error {
    io::Error::from_raw_os_error(e)
}

/// What sockets on one host share: the socket layer and the waiters.
#[derive(Debug, Clone)]
pub(crate) struct TcpHost {
    pub(crate) socks: Arc<Sockets>,
    pub(crate) waits: Arc<TcpWaits>,
}

impl TcpHost {
    /// A call on the machine, now.
    fn call<R>(&self, f: impl FnOnce(&mut Stack, u64) -> R) -> io::Result<R> {
        self.socks
            .tcp_call(rxpath_dev::mono_ns(), f)
            .ok_or_else(|| io::Error::new(io::ErrorKind::Unsupported, "this host runs no TCP"))
    }

    /// [`Self::call`] for a query that sends nothing and moves no timer
    /// (readiness): no clock read, nothing to send after it.
    fn query<R>(&self, f: impl FnOnce(&mut Stack) -> R) -> io::Result<R> {
        self.socks
            .tcp_query(f)
            .ok_or_else(|| io::Error::new(io::ErrorKind::Unsupported, "this host runs no TCP"))
    }

    /// Run `f` until it stops saying `EAGAIN` (or `nonblocking`): between
    /// tries busy-poll the socket's NAPI for `busy_us` µs, then sleep
    /// until the machine touches the socket.
    fn until_ready<R>(
        &self,
        w: &Waiter,
        busy_us: u32,
        nonblocking: bool,
        mut f: impl FnMut(&mut Stack, u64) -> Result<R, i32>,
    ) -> io::Result<R> {
        loop {
            let seen = w.generation();
            match self.call(&mut f)? {
                Err(libc::EAGAIN) if !nonblocking => {}
                r => return r.map_err(errno),
            }
            let napi = w.napi.load(Ordering::Relaxed);
            if busy_us > 0 && napi != 0 {
                let ids = [NapiId(napi)];
                let moved = || w.generation() != seen;
                busy_loop(&self.socks, &ids, busy_us, BUSY_POLL_BUDGET, &moved);
                if w.generation() != seen {
                    continue;
                }
            }
            if napi != 0 {
                // A sleeper polls nothing: a deferral (its own busy poll's,
                // or an epoll set's) ends, the interrupt raised again
                // (`napi_resume_irqs`), so what comes is not left waiting.
                self.socks.resume_irqs(&[NapiId(napi)]);
            }
            w.wait_past(seen);
        }
    }
}

/// A listening TCP socket on an rxpath host ([`crate::Host::tcp_listen`]).
#[derive(Debug)]
pub struct TcpListener {
    host: TcpHost,
    id: SockId,
    w: Arc<Waiter>,
    local: SocketAddr,
    busy_us: AtomicU32,
    closed: AtomicBool,
}

/// How a listener shares its address, chosen before its `bind`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListenShare {
    /// `IPV6_V6ONLY`: an IPv6 listener that takes no IPv4.
    pub v6only: bool,
    /// `SO_REUSEPORT`: listeners on one address split its connections by
    /// their flow's hash (a listener per thread).
    pub reuseport: bool,
}

impl TcpListener {
    pub(crate) fn listen(
        host: TcpHost,
        addr: SocketAddr,
        backlog: i32,
        share: ListenShare,
    ) -> io::Result<Self> {
        let id = host.call(|s, _| s.socket(addr.is_ipv6()))?;
        let w = host.waits.fresh_waiter(id);
        let r = host.call(|s, _| {
            s.set_option(id, SockOpt::ReuseAddr, 1, 0)?;
            if share.v6only {
                s.set_option(id, SockOpt::V6Only, 1, 0)?;
            }
            if share.reuseport {
                s.set_option(id, SockOpt::ReusePort, 1, 0)?;
            }
            s.bind(id, addr)?;
            s.listen(id, backlog)?;
            s.addrs(id)
        })?;
        let local = match r {
            Ok((Some(local), _)) => local,
            Ok((None, _)) => addr,
            Err(e) => {
                let _ = host.call(|s, now| s.close(id, now));
                host.waits.forget_mine(id, &w);
                return Err(errno(e));
            }
        };
        Ok(TcpListener {
            busy_us: AtomicU32::new(host.socks.busy_read()),
            host,
            id,
            w,
            local,
            closed: AtomicBool::new(false),
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// `SO_BUSY_POLL` for this socket and the connections it accepts.
    pub fn set_busy_poll(&self, us: u32) {
        self.busy_us.store(us, Ordering::Relaxed);
    }

    /// Its busy-poll window (`SO_BUSY_POLL`, µs; 0: off), the NAPI its
    /// last segment came from (`sk_napi_id`; 0: none yet) and the host's
    /// socket layer: what a preloaded program's wait busy-polls.
    pub fn busy_poll_of(&self) -> (u32, NapiId, &Sockets) {
        (
            self.busy_us.load(Ordering::Relaxed),
            NapiId(self.w.napi.load(Ordering::Relaxed)),
            &self.host.socks,
        )
    }

    /// `accept`: wait for an established connection.
    pub fn accept(&self) -> io::Result<(TcpStream, SocketAddr)> {
        self.accept_with(false)
    }

    /// `accept` that says `WouldBlock` instead of waiting when no
    /// connection is established yet (`O_NONBLOCK`).
    pub fn try_accept(&self) -> io::Result<(TcpStream, SocketAddr)> {
        self.accept_with(true)
    }

    /// A socket option by the kernel's name (the connections it accepts
    /// inherit them, as the kernel's `sk_clone_lock` copies them).
    pub fn set_option(&self, opt: SockOpt, v: i32) -> io::Result<()> {
        let id = self.id;
        self.host
            .call(|s, now| s.set_option(id, opt, v, now))?
            .map_err(errno)
    }

    /// Readiness as `poll` reports it (`inet_csk_listen_poll`: `EPOLLIN`
    /// while a connection waits to be accepted).
    pub fn events(&self) -> io::Result<u32> {
        let id = self.id;
        self.host.query(|s| s.events(id))?.map_err(errno)
    }

    /// Tell `w` each time the machine touches the listener (see
    /// [`Watch`]); set once.
    pub fn set_watch(&self, w: Weak<dyn Watch>) {
        let _ = self.w.watch.set(w);
    }

    fn accept_with(&self, nonblocking: bool) -> io::Result<(TcpStream, SocketAddr)> {
        let busy = self.busy_us.load(Ordering::Relaxed);
        let id = self.id;
        let (child, peer) = self
            .host
            .until_ready(&self.w, busy, nonblocking, |s, _| s.accept(id))?;
        let w = self.host.waits.waiter(child);
        Ok((
            TcpStream {
                host: self.host.clone(),
                id: child,
                w,
                busy_us: AtomicU32::new(busy),
                nonblocking: AtomicBool::new(false),
                closed: AtomicBool::new(false),
            },
            peer,
        ))
    }
}

impl TcpListener {
    /// `close`: stop listening (connections not yet accepted are reset,
    /// as the kernel's `inet_csk_listen_stop` does); a thread in
    /// [`Self::accept`] returns an error. Dropping closes too.
    pub fn close(&self) {
        if !self.closed.swap(true, Ordering::AcqRel) {
            let id = self.id;
            let _ = self.host.call(|s, now| s.close(id, now));
            // The slot may be a new socket's by now.
            self.host.waits.forget_mine(id, &self.w);
        }
    }
}

impl Drop for TcpListener {
    fn drop(&mut self) {
        self.close();
    }
}

/// How [`crate::Host::tcp_open_held`] opens a connection.
#[derive(Debug, Clone, Copy)]
pub enum Opening<'a> {
    /// `connect`: the SYN now.
    Connect,
    /// `connect` with `TCP_FASTOPEN_CONNECT`: with a Fast Open cookie
    /// kept for the peer, no SYN until the first write, which it carries;
    /// else a SYN asking for a cookie.
    FastopenConnect,
    /// `sendto` with `MSG_FASTOPEN`: the SYN carries the cookie and what
    /// of these bytes fits (asks for a cookie when none is kept).
    FastopenData(&'a [u8]),
}

/// A TCP connection on an rxpath host. Reads and writes may come from
/// different threads at once. Dropping it closes it (`close`: a FIN after
/// what was written, as the kernel sends it).
#[derive(Debug)]
pub struct TcpStream {
    host: TcpHost,
    id: SockId,
    w: Arc<Waiter>,
    busy_us: AtomicU32,
    nonblocking: AtomicBool,
    /// Closed by [`Self::close_linger`] (the slot may name another
    /// socket since).
    closed: AtomicBool,
}

impl TcpStream {
    pub(crate) fn connect(host: TcpHost, from: SocketAddr, to: SocketAddr) -> io::Result<Self> {
        let s = Self::connect_start(host, from, to)?;
        s.wait_connected()?;
        Ok(s)
    }

    /// `connect` that sends the SYN and returns (`EINPROGRESS`): the
    /// handshake ends when [`Self::events`] says `EPOLLOUT` (or an error);
    /// [`Self::wait_connected`] waits for it.
    pub(crate) fn connect_start(
        host: TcpHost,
        from: SocketAddr,
        to: SocketAddr,
    ) -> io::Result<Self> {
        Self::open(host, from, to, Opening::Connect).map(|(s, _)| s)
    }

    /// A connection from `from` to `to` opened as `how` says; with the
    /// bytes its SYN carried (Fast Open).
    pub(crate) fn open(
        host: TcpHost,
        from: SocketAddr,
        to: SocketAddr,
        how: Opening<'_>,
    ) -> io::Result<(Self, usize)> {
        let id = host.call(|s, _| s.socket(to.is_ipv6()))?;
        let w = host.waits.fresh_waiter(id);
        let s = TcpStream {
            busy_us: AtomicU32::new(host.socks.busy_read()),
            host,
            id,
            w,
            nonblocking: AtomicBool::new(false),
            closed: AtomicBool::new(false),
        };
        let carried = s
            .host
            .call(|st, now| {
                st.bind(id, from)?;
                match how {
                    Opening::Connect => st.connect(id, to, now).map(|_| 0),
                    Opening::FastopenConnect => {
                        st.set_option(id, rxpath_tcp::SockOpt::FastopenConnect, 1, now)?;
                        st.connect(id, to, now).map(|_| 0)
                    }
                    Opening::FastopenData(d) => st.send_fastopen(id, Some(to), d, now),
                }
            })?
            .map_err(errno)?;
        Ok((s, carried))
    }

    /// Whether the connection's `connect` left its SYN for the first
    /// write (`TCP_FASTOPEN_CONNECT` with a cookie kept).
    pub fn fastopen_deferred(&self) -> bool {
        let id = self.id;
        matches!(self.host.query(|st| st.fastopen_deferred(id)), Ok(Ok(true)))
    }

    /// `inet_wait_for_connect`: until the handshake ends either way (the
    /// error the connection ended with, if it did).
    pub fn wait_connected(&self) -> io::Result<()> {
        let id = self.id;
        self.host
            .until_ready(&self.w, 0, false, |st, _| match st.state(id) {
                Ok(State::SynSent | State::SynRecv) => Err(libc::EAGAIN),
                Ok(_) => match st.take_error(id) {
                    Ok(Some(e)) => Err(e),
                    _ => Ok(()),
                },
                Err(e) => Err(e),
            })
    }

    /// `read`: wait for data; `Ok(0)` at the end of the stream.
    pub fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.record_flow();
        let id = self.id;
        let nb = self.nonblocking.load(Ordering::Relaxed);
        self.host.until_ready(&self.w, self.busy(), nb, |s, now| {
            s.recv(id, buf, false, now)
        })
    }

    /// `write`: wait for room in the send buffer, queue what fits.
    pub fn write(&self, buf: &[u8]) -> io::Result<usize> {
        let id = self.id;
        let nb = self.nonblocking.load(Ordering::Relaxed);
        self.host
            .until_ready(&self.w, 0, nb, |s, now| s.send(id, buf, false, false, now))
    }

    /// `recv` with its flags: `peek` (`MSG_PEEK`) leaves the data queued;
    /// `nonblocking` (`MSG_DONTWAIT`, or `O_NONBLOCK`) says `WouldBlock`
    /// instead of waiting.
    pub fn recv(&self, buf: &mut [u8], peek: bool, nonblocking: bool) -> io::Result<usize> {
        self.record_flow();
        let id = self.id;
        self.host
            .until_ready(&self.w, self.busy(), nonblocking, |s, now| {
                s.recv(id, buf, peek, now)
            })
    }

    /// `send` with its flags: `more` (`MSG_MORE`); `nonblocking`
    /// (`MSG_DONTWAIT`, or `O_NONBLOCK`) says `WouldBlock` when the send
    /// buffer is full instead of waiting.
    pub fn send(&self, buf: &[u8], more: bool, nonblocking: bool) -> io::Result<usize> {
        let id = self.id;
        self.host.until_ready(&self.w, 0, nonblocking, |s, now| {
            s.send(id, buf, more, false, now)
        })
    }

    /// `close` with `SO_LINGER` on for `linger` (`tcp_close` then
    /// `sk_stream_wait_close`): the FIN goes after what was written (or a
    /// reset, if unread data waits), and the call returns once the peer
    /// acknowledged them (the connection left `FIN_WAIT1`, `CLOSING` and
    /// `LAST_ACK`) or `linger` passed; the connection goes on either way.
    /// Says whether it got there in time. Dropping the stream after it
    /// closes nothing more.
    pub fn close_linger(&self, linger: std::time::Duration) -> bool {
        if self.closed.swap(true, Ordering::AcqRel) {
            return true;
        }
        let id = self.id;
        let ends = self.addrs().ok().and_then(|(l, r)| Some((l?, r?)));
        let _ = self.host.call(|s, now| s.close(id, now));
        // The slot may be freed while this waits and given to a new
        // socket: this waiter leaves the map now; the loop below looks
        // every 10 ms.
        self.host.waits.forget_mine(id, &self.w);
        let napi = self.w.napi.load(Ordering::Relaxed);
        if napi != 0 {
            // Deferred interrupts go back on: the peer's ACKs are not left
            // waiting for the deferral to end.
            self.host.socks.resume_irqs(&[NapiId(napi)]);
        }
        let deadline = std::time::Instant::now() + linger;
        loop {
            let seen = self.w.generation();
            let closing =
                ends.is_some_and(|(l, r)| self.host.query(|s| s.closing(l, r)).unwrap_or(false));
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if !closing || left.is_zero() {
                break !closing;
            }
            // The waiter left the map: a look every 10 ms (the kernel's
            // wait is woken by the ACK itself).
            self.w
                .wait_past_for(seen, left.min(std::time::Duration::from_millis(10)));
        }
    }

    /// Is the stream in non-blocking mode ([`Self::set_nonblocking`])?
    pub fn nonblocking(&self) -> bool {
        self.nonblocking.load(Ordering::Relaxed)
    }

    /// Readiness as `poll` reports it (`tcp_poll`: `EPOLLIN`, `EPOLLOUT`,
    /// `EPOLLRDHUP`, `EPOLLHUP`, `EPOLLERR`).
    pub fn events(&self) -> io::Result<u32> {
        let id = self.id;
        self.host.query(|s| s.events(id))?.map_err(errno)
    }

    /// Tell `w` each time the machine touches the connection (see
    /// [`Watch`]); set once.
    pub fn set_watch(&self, w: Weak<dyn Watch>) {
        let _ = self.w.watch.set(w);
    }

    /// An option's value by the kernel's name (`getsockopt`; `SO_ERROR`
    /// reads and clears the pending error).
    pub fn option(&self, opt: SockOpt) -> io::Result<i32> {
        let id = self.id;
        self.host.call(|s, _| s.option(id, opt))?.map_err(errno)
    }

    /// Bytes queued to read (`SIOCINQ`, `FIONREAD`) and bytes not yet
    /// acknowledged (`SIOCOUTQ`).
    pub fn queues(&self) -> io::Result<(usize, usize)> {
        let id = self.id;
        self.host.call(|s, _| s.queues(id))?.map_err(errno)
    }

    /// Write all of `buf`.
    pub fn write_all(&self, mut buf: &[u8]) -> io::Result<()> {
        while !buf.is_empty() {
            let n = self.write(buf)?;
            buf = &buf[n..];
        }
        Ok(())
    }

    /// `shutdown(SHUT_WR)` (`write`) and/or `SHUT_RD` (`read`).
    pub fn shutdown(&self, read: bool, write: bool) -> io::Result<()> {
        let id = self.id;
        self.host
            .call(|s, now| s.shutdown(id, read, write, now))?
            .map_err(errno)
    }

    /// `TCP_NODELAY`.
    pub fn set_nodelay(&self, on: bool) -> io::Result<()> {
        self.set_option(SockOpt::NoDelay, on as i32)
    }

    /// A socket option by the kernel's name.
    pub fn set_option(&self, opt: SockOpt, v: i32) -> io::Result<()> {
        let id = self.id;
        self.host
            .call(|s, now| s.set_option(id, opt, v, now))?
            .map_err(errno)
    }

    /// Wake the threads waiting on the stream, to look at it again (after
    /// a `shutdown` of its reading, which a waiting read then returns as
    /// the end of the stream).
    pub fn wake(&self) {
        self.w.bump();
    }

    /// `O_NONBLOCK`: reads and writes say `WouldBlock` instead of waiting.
    pub fn set_nonblocking(&self, on: bool) {
        self.nonblocking.store(on, Ordering::Relaxed);
    }

    /// `SO_BUSY_POLL` µs.
    pub fn set_busy_poll(&self, us: u32) {
        self.busy_us.store(us, Ordering::Relaxed);
    }

    /// Its busy-poll window (`SO_BUSY_POLL`, µs; 0: off), the NAPI its
    /// last segment came from (`sk_napi_id`; 0: none yet) and the host's
    /// socket layer: what a preloaded program's wait busy-polls.
    pub fn busy_poll_of(&self) -> (u32, NapiId, &Sockets) {
        (
            self.busy_us.load(Ordering::Relaxed),
            NapiId(self.w.napi.load(Ordering::Relaxed)),
            &self.host.socks,
        )
    }

    fn busy(&self) -> u32 {
        self.busy_us.load(Ordering::Relaxed)
    }

    /// RFS: the connection's flow is read on this thread's CPU
    /// (`sock_rps_record_flow`, which `inet_recvmsg` calls before TCP's
    /// read), once a segment gave the connection its flow hash.
    fn record_flow(&self) {
        let hash = self.w.rxhash.load(Ordering::Relaxed);
        let flows = self.host.socks.sock_flows();
        if hash == 0 || flows.is_empty() {
            return;
        }
        if let Some(cpu) = rxpath_os::sched::current_cpu() {
            flows.record(hash, cpu as u32);
        }
    }

    /// Both ends (`getsockname`, `getpeername`).
    pub fn addrs(&self) -> io::Result<(Option<SocketAddr>, Option<SocketAddr>)> {
        let id = self.id;
        self.host.call(|s, _| s.addrs(id))?.map_err(errno)
    }

    /// `getsockopt(TCP_INFO)`.
    pub fn tcp_info(&self) -> io::Result<rxpath_tcp::TcpInfo> {
        let id = self.id;
        self.host.call(|s, now| s.tcp_info(id, now))?.map_err(errno)
    }

    /// The connection's state.
    pub fn state(&self) -> io::Result<State> {
        let id = self.id;
        self.host.call(|s, _| s.state(id))?.map_err(errno)
    }
}

impl Drop for TcpStream {
    fn drop(&mut self) {
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        let id = self.id;
        let _ = self.host.call(|s, now| s.close(id, now));
        self.host.waits.forget_mine(id, &self.w);
    }
}

impl io::Read for &TcpStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        TcpStream::read(self, buf)
    }
}

impl io::Write for &TcpStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        TcpStream::write(self, buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
