//! The world packetdrill drives: rxpath's TCP stack, a file-descriptor
//! table, and a virtual clock. Safe code only; `abi` turns packetdrill's C
//! calls into these.
//!
//! Time is virtual: it moves when packetdrill sleeps (`usleep`), a little
//! each time it reads the clock (so its spin-wait ends), and, when it
//! waits for a packet that nothing would send now, straight to the next
//! timer's deadline. A script's timing is then exact and never flaky.
//!
//! Blocking calls run on packetdrill's system-call thread: they wait on a
//! condition variable (the thread sleeps, which is how packetdrill sees a
//! call is blocked) until the stack's state lets them finish.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::IntoRawFd;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::thread::{self, ThreadId};
use std::time::{Duration, Instant};

use rxpath_tcp::{Errno, Nanos, SockId, SockOpt, Stack, State, TcpConfig};

mod wait;

/// Where virtual time starts, in µs since the epoch (packetdrill only
/// subtracts).
const EPOCH_US: u64 = 1_700_000_000_000_000;
/// The longest real time virtual time waits for a woken call to finish
/// (a guard against a call that never reads the clock again).
const SETTLE_MAX: Duration = Duration::from_secs(2);

/// packetdrill's `MAX_SPIN_USECS`: how early before an event it stops
/// sleeping to spin.
const MAX_SPIN_US: u64 = 20;

/// `POLLNVAL`.
const POLLNVAL: u32 = 0x20;

#[derive(Debug)]
enum Fd {
    Tcp {
        id: SockId,
        nonblock: bool,
        connecting: bool,
    },
    Epoll {
        interest: BTreeMap<i32, Interest>,
    },
}

#[derive(Debug, Clone, Copy)]
struct Interest {
    events: u32,
    data: u64,
    /// For `EPOLLET`: the wakeup counts (readers, writers) last seen, or
    /// none when a report is due (just added or modified, as
    /// `epoll_ctl` queues an item ready at that moment).
    seen: Option<(u64, u64)>,
    disabled: bool,
}

/// The state behind the lock.
pub struct World {
    stack: Stack,
    now: Nanos,
    fds: BTreeMap<i32, Fd>,
    outq: VecDeque<(Vec<u8>, Nanos)>,
    /// The device segments TCP (TSO): packets leave whole.
    tso: bool,
    /// Bumped on every change a blocked call may be waiting for.
    gen: u64,
    /// Blocked calls and the generation they last looked at.
    waiters: HashMap<ThreadId, u64>,
    /// Clock readings since anything else happened (a spin detector).
    clock_reads: u32,
    /// A call that blocked has returned; its thread has not yet read the
    /// clock for its end time. Virtual time waits for that reading.
    end_pending: Option<ThreadId>,
}

/// The world and the condition variable blocked calls wait on.
pub struct Shared {
    m: Mutex<World>,
    cv: Condvar,
}

/// A readiness report: fd or epoll data, and the events.
pub type Ready = (u64, u32);

impl World {
    /// Move what the stack sent to the outbound queue, cut to the MSS
    /// when the device does not segment (as the kernel's GSO would).
    fn flush(&mut self) {
        while let Some(t) = self.stack.poll_transmit() {
            if self.tso || t.gso_size == 0 {
                self.outq.push_back((t.packet, self.now));
            } else {
                for p in rxpath_tcp::wire::segment(&t.packet, t.gso_size as usize) {
                    self.outq.push_back((p, self.now));
                }
            }
        }
    }

    /// The device's offloads, read where packetdrill's scripts set them:
    /// `ethtool -K tun0 tso off` on the namespace's tun0 (the offload
    /// asked for; a tun without a reader reports it off). No tun0 or no
    /// ethtool: TSO on, as packetdrill's own tun.
    fn refresh_offloads(&mut self) {
        let Ok(out) = std::process::Command::new("ethtool")
            .args(["-k", "tun0"])
            .output()
        else {
            return;
        };
        if !out.status.success() {
            return;
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let on = |name: &str| {
            text.lines()
                .find(|l| l.trim_start().starts_with(name))
                .map(|l| {
                    let v = l.split_once(':').map(|x| x.1).unwrap_or("");
                    v.trim_start().starts_with("on") || v.contains("[requested on]")
                })
        };
        // The kernel's TCP builds large skbs whatever the device offers
        // (GSO is always on for TCP, since 4.13); without TSO they are cut
        // before the device.
        self.tso = on("tx-tcp-segmentation:").unwrap_or(true);
    }

    /// The device as the script set it: a root FIFO of limit 0 on tun0
    /// (`tc qdisc replace dev tun0 root pfifo limit 0`) drops what the
    /// stack sends, and the stack hears of it as the kernel's does
    /// (`NET_XMIT_DROP`). Read before every call and every move of the
    /// clock: a script's command runs between those.
    fn refresh_qdisc(&mut self) {
        let drops = rxpath_dev::sys::af_packet::ifindex("tun0")
            .ok()
            .and_then(|i| rxpath_dev::sys::qdisc::root(i as u32).ok().flatten())
            .is_some_and(|r| r.drops_all());
        self.stack.set_tx_stopped(drops);
    }

    /// Move the clock to `t`, running every timer due on the way.
    fn advance_to(&mut self, t: Nanos) {
        self.refresh_qdisc();
        while let Some(d) = self.stack.next_deadline().filter(|&d| d <= t) {
            self.now = self.now.max(d);
            let now = self.now;
            self.stack.on_timeout(now);
            self.flush();
        }
        self.now = self.now.max(t);
    }

    /// `inet_wait_for_connect`'s test: `EAGAIN` while the handshake is
    /// on, its error if it failed.
    fn handshake_done(&mut self, fd: i32) -> Result<(), Errno> {
        let (id, _) = self.tcp(fd)?;
        match self.stack.state(id)? {
            State::SynSent | State::SynRecv => Err(libc::EAGAIN),
            State::Closed => Err(self.stack.take_error(id)?.unwrap_or(libc::ECONNREFUSED)),
            _ => Ok(()),
        }
    }

    fn tcp(&self, fd: i32) -> Result<(SockId, bool), Errno> {
        match self.fds.get(&fd) {
            Some(Fd::Tcp { id, nonblock, .. }) => Ok((*id, *nonblock)),
            Some(_) => Err(libc::ENOTSOCK),
            None => Err(libc::EBADF),
        }
    }

    /// A descriptor number that is also a real open file (`/dev/null`):
    /// packetdrill closes the sockets a script left open with the real
    /// `close(2)`, which must then succeed. `abi`'s `close` closes both.
    fn new_fd(&mut self, f: Fd) -> Result<i32, Errno> {
        let file = std::fs::File::open("/dev/null")
            .map_err(|e| e.raw_os_error().unwrap_or(libc::EMFILE))?;
        let fd = file.into_raw_fd();
        self.fds.insert(fd, f);
        Ok(fd)
    }

    /// Read the TCP sysctls as the kernel reads them, at use: the scripts
    /// set them (`defaults.sh`) after the stack was made; and forget the
    /// Fast Open cookies if the script flushed the kernel's `tcp_metrics`
    /// since ([`crate::metrics`]).
    fn refresh_sysctls(&mut self) {
        for name in rxpath_tcp::config::SYSCTLS {
            if let Ok(v) = std::fs::read_to_string(rxpath_tcp::config::sysctl_path(name)) {
                let _ = self.stack.cfg.set(name, &v);
            }
        }
        if crate::metrics::flushed() {
            self.stack.fo_cache.clear();
        }
    }

    fn events(&mut self, fd: i32) -> u32 {
        match self.fds.get(&fd) {
            Some(Fd::Tcp { id, .. }) => {
                let id = *id;
                self.stack.events(id).unwrap_or(POLLNVAL)
            }
            Some(Fd::Epoll { interest }) => {
                let watched: Vec<(i32, u32)> =
                    interest.iter().map(|(&f, i)| (f, i.events)).collect();
                if watched.into_iter().any(|(f, ev)| self.events(f) & ev != 0) {
                    libc::EPOLLIN as u32
                } else {
                    0
                }
            }
            None => POLLNVAL,
        }
    }

    fn wakeups(&self, fd: i32) -> (u64, u64) {
        match self.fds.get(&fd) {
            Some(Fd::Tcp { id, .. }) => self.stack.wakeups(*id).unwrap_or((0, 0)),
            _ => (0, 0),
        }
    }
}

impl Shared {
    /// A world whose `connect` calls leave from `local_addrs`, on a
    /// device of `mtu`.
    pub fn new(local_addrs: Vec<IpAddr>, mtu: u32) -> Self {
        let cfg = TcpConfig {
            mtu,
            ..TcpConfig::default()
        };
        let mut w = World {
            stack: Stack::new(cfg, 0x0005_eed0_f7c9, local_addrs),
            now: 0,
            fds: BTreeMap::new(),
            outq: VecDeque::new(),
            tso: true,
            clock_reads: 0,
            gen: 0,
            waiters: HashMap::new(),
            end_pending: None,
        };
        w.refresh_sysctls();
        Shared {
            m: Mutex::new(w),
            cv: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, World> {
        self.m.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Run `f` and publish what it changed: packets to the outbound
    /// queue, a wakeup to every blocked call.
    fn op<T>(&self, f: impl FnOnce(&mut World) -> T) -> T {
        let mut w = self.lock();
        w.clock_reads = 0;
        w.refresh_qdisc();
        let r = f(&mut w);
        w.flush();
        w.gen += 1;
        self.cv.notify_all();
        r
    }

    /// Wait (in real time) until every blocked call has looked at the
    /// latest state and none that finished is still to read its end time:
    /// only then may virtual time move, as the kernel's blocked threads
    /// wake within microseconds of what woke them.
    fn settle<'a>(&'a self, mut w: MutexGuard<'a, World>) -> MutexGuard<'a, World> {
        let start = Instant::now();
        while w.end_pending.is_some() || w.waiters.values().any(|&g| g < w.gen) {
            let left = SETTLE_MAX.saturating_sub(start.elapsed());
            if left.is_zero() {
                w.end_pending = None;
                break;
            }
            w = self
                .cv
                .wait_timeout(w, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        w
    }

    /// Retry `f` while it says `EAGAIN` and the call may block, until
    /// `deadline` (virtual) if one is given; `Ok(None)` when it passed.
    fn block<T>(
        &self,
        nonblock: bool,
        deadline: Option<Nanos>,
        mut f: impl FnMut(&mut World) -> Result<T, Errno>,
    ) -> Result<Option<T>, Errno> {
        let me = thread::current().id();
        let mut w = self.lock();
        let mut waited = false;
        loop {
            let r = f(&mut w);
            w.flush();
            match r {
                Err(libc::EAGAIN) if !nonblock && !matches!(deadline, Some(d) if w.now >= d) => {
                    waited = true;
                    let g = w.gen;
                    w.waiters.insert(me, g);
                    self.cv.notify_all();
                    w = self.cv.wait(w).unwrap_or_else(|e| e.into_inner());
                }
                r => {
                    w.waiters.remove(&me);
                    if waited {
                        w.end_pending = Some(me);
                    }
                    w.gen += 1;
                    self.cv.notify_all();
                    return match r {
                        Err(libc::EAGAIN) if !nonblock => Ok(None),
                        r => r.map(Some),
                    };
                }
            }
        }
    }

    /// Microseconds of virtual time. Reading the clock does not move it,
    /// except in a spin (the third reading in a row with nothing between
    /// moves it 1 µs, so packetdrill's spin-wait ends).
    pub fn now_us(&self) -> u64 {
        let me = thread::current().id();
        let mut w = self.lock();
        if w.end_pending == Some(me) {
            // A blocked call's end time: the clock as it woke.
            w.end_pending = None;
            self.cv.notify_all();
            return EPOCH_US + w.now / 1000;
        }
        w.clock_reads += 1;
        if w.clock_reads < 3 {
            return EPOCH_US + w.now / 1000;
        }
        let mut w = self.settle(w);
        let t = w.now + 1000;
        w.advance_to(t);
        w.gen += 1;
        self.cv.notify_all();
        EPOCH_US + w.now / 1000
    }

    /// Sleep in virtual time. packetdrill sleeps until 20 µs before an
    /// event (`MAX_SPIN_USECS`) and spins the rest: the sleep covers those
    /// 20 µs too, so the event's time is met exactly.
    pub fn usleep(&self, us: u64) {
        let mut w = self.settle(self.lock());
        w.clock_reads = 0;
        let t = w.now + (us + MAX_SPIN_US) * 1000;
        w.advance_to(t);
        w.gen += 1;
        self.cv.notify_all();
    }

    /// A packet from packetdrill to the stack.
    pub fn netdev_send(&self, pkt: &[u8]) {
        self.op(|w| {
            let now = w.now;
            w.stack.input(pkt, now)
        })
    }

    /// The next packet the stack sent and its virtual time (µs since the
    /// epoch), moving the clock to the next timer when nothing is queued.
    pub fn netdev_receive(&self) -> Option<(Vec<u8>, u64)> {
        let mut w = self.lock();
        w.clock_reads = 0;
        loop {
            w = self.settle(w);
            if let Some((p, t)) = w.outq.pop_front() {
                return Some((p, EPOCH_US + t / 1000));
            }
            let d = w.stack.next_deadline()?;
            w.advance_to(d);
            w.gen += 1;
            self.cv.notify_all();
        }
    }

    /// `socket`.
    pub fn socket(&self, domain: i32, ty: i32) -> Result<i32, Errno> {
        if domain != libc::AF_INET && domain != libc::AF_INET6 {
            return Err(libc::EAFNOSUPPORT);
        }
        if ty & 0xf != libc::SOCK_STREAM {
            return Err(libc::EPROTONOSUPPORT);
        }
        self.op(|w| {
            w.refresh_sysctls();
            w.refresh_offloads();
            let id = w.stack.socket(domain == libc::AF_INET6);
            let nonblock = ty & libc::SOCK_NONBLOCK != 0;
            w.new_fd(Fd::Tcp {
                id,
                nonblock,
                connecting: false,
            })
        })
    }

    /// `bind`.
    pub fn bind(&self, fd: i32, addr: SocketAddr) -> Result<(), Errno> {
        self.op(|w| {
            let (id, _) = w.tcp(fd)?;
            w.stack.bind(id, addr)
        })
    }

    /// `listen`.
    pub fn listen(&self, fd: i32, backlog: i32) -> Result<(), Errno> {
        self.op(|w| {
            let (id, _) = w.tcp(fd)?;
            w.stack.listen(id, backlog)
        })
    }

    /// `accept`.
    pub fn accept(&self, fd: i32) -> Result<(i32, SocketAddr), Errno> {
        let (_, nonblock) = self.lock().tcp(fd)?;
        let r = self.block(nonblock, None, |w| {
            let (id, _) = w.tcp(fd)?;
            let (child, peer) = w.stack.accept(id)?;
            Ok((
                w.new_fd(Fd::Tcp {
                    id: child,
                    nonblock: false,
                    connecting: false,
                })?,
                peer,
            ))
        })?;
        Ok(r.expect("no deadline"))
    }

    /// `connect`.
    pub fn connect(&self, fd: i32, addr: SocketAddr) -> Result<(), Errno> {
        let (nonblock, connecting) = {
            let w = self.lock();
            let (_, nb) = w.tcp(fd)?;
            let connecting = matches!(
                w.fds.get(&fd),
                Some(Fd::Tcp {
                    connecting: true,
                    ..
                })
            );
            (nb, connecting)
        };
        if !connecting {
            let deferred = self.op(|w| {
                let (id, _) = w.tcp(fd)?;
                let now = w.now;
                w.stack.connect(id, addr, now)?;
                if w.stack.fastopen_deferred(id)? {
                    // No SYN until the first write: connected, as far as
                    // the program can tell.
                    return Ok(true);
                }
                if let Some(Fd::Tcp { connecting, .. }) = w.fds.get_mut(&fd) {
                    *connecting = true;
                }
                Ok::<bool, Errno>(false)
            })?;
            if deferred {
                return Ok(());
            }
            if nonblock {
                return Err(libc::EINPROGRESS);
            }
        }
        let r = self.block(nonblock, None, |w| w.handshake_done(fd));
        let mut w = self.lock();
        if let Some(Fd::Tcp { connecting, .. }) = w.fds.get_mut(&fd) {
            if !matches!(r, Err(libc::EAGAIN)) {
                *connecting = false;
            }
        }
        match r {
            Err(libc::EAGAIN) => Err(libc::EALREADY),
            Ok(_) if connecting => Ok(()),
            r => r.map(|_| ()),
        }
    }

    /// `recv` and its family: `peek`, `waitall`, `dontwait` as the flags.
    pub fn recv(
        &self,
        fd: i32,
        buf: &mut [u8],
        peek: bool,
        waitall: bool,
        dontwait: bool,
    ) -> Result<usize, Errno> {
        let (_, nonblock) = self.lock().tcp(fd)?;
        let nonblock = nonblock || dontwait;
        let mut got = 0;
        loop {
            let r = self.block(nonblock, None, |w| {
                let (id, _) = w.tcp(fd)?;
                let now = w.now;
                w.stack.recv(id, &mut buf[got..], peek, now)
            });
            match r {
                Ok(Some(0)) => return Ok(got),
                Ok(Some(n)) => {
                    got += n;
                    if !waitall || peek || got == buf.len() {
                        return Ok(got);
                    }
                }
                Ok(None) => unreachable!("no deadline"),
                Err(e) if got > 0 && e != libc::EBADF => return Ok(got),
                Err(e) => return Err(e),
            }
        }
    }

    /// `send` and its family; `more` is `MSG_MORE`. A blocking call
    /// returns when all is queued.
    pub fn send(
        &self,
        fd: i32,
        data: &[u8],
        more: bool,
        eor: bool,
        dontwait: bool,
    ) -> Result<usize, Errno> {
        let (_, nonblock) = self.lock().tcp(fd)?;
        let (deferred, connecting) = self.op(|w| {
            let (id, _) = w.tcp(fd)?;
            let deferred = w.stack.fastopen_deferred(id)?;
            let connecting = matches!(w.stack.state(id)?, State::SynSent | State::SynRecv);
            Ok::<_, Errno>((deferred, connecting))
        })?;
        if deferred {
            // The write sends the SYN a Fast Open connect left for it.
            return self.send_fastopen(fd, None, data, dontwait);
        }
        let nonblock = nonblock || dontwait;
        if connecting && !nonblock {
            // `sk_stream_wait_connect`: a writer pending.
            self.write_pending(fd, true)?;
        }
        let r = self.send_inner(fd, data, more, eor, nonblock);
        if connecting && !nonblock {
            let _ = self.write_pending(fd, false);
        }
        r
    }

    fn send_inner(
        &self,
        fd: i32,
        data: &[u8],
        more: bool,
        eor: bool,
        nonblock: bool,
    ) -> Result<usize, Errno> {
        let mut sent = 0;
        // `sk_stream_wait_memory`: a writer that found no room sleeps
        // until `sk_stream_write_space` wakes it, which it does only once
        // the socket is writable as `poll` says (a third of the buffer
        // free), or on an error; freed bytes alone do not wake it.
        let mut asleep = false;
        let wakes = (libc::EPOLLOUT | libc::EPOLLERR | libc::EPOLLHUP) as u32;
        loop {
            let r = self.block(nonblock, None, |w| {
                let (id, _) = w.tcp(fd)?;
                if asleep && w.stack.events(id)? & wakes == 0 {
                    return Err(libc::EAGAIN);
                }
                let now = w.now;
                let r = w.stack.send(id, &data[sent..], more, eor, now);
                asleep = r == Err(libc::EAGAIN);
                r
            });
            match r {
                Ok(Some(n)) => {
                    sent += n;
                    if sent == data.len() || nonblock {
                        return Ok(sent);
                    }
                }
                Ok(None) => unreachable!("no deadline"),
                Err(e) if sent > 0 => {
                    let _ = e;
                    return Ok(sent);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// A writer on `fd` waits for its handshake (`pending`), or no
    /// longer: [`Stack::set_write_pending`].
    fn write_pending(&self, fd: i32, pending: bool) -> Result<(), Errno> {
        self.op(|w| {
            let (id, _) = w.tcp(fd)?;
            w.stack.set_write_pending(id, pending)
        })
    }

    /// `sendto` or `sendmsg` with `MSG_FASTOPEN` to `to`: connect with
    /// data on the SYN ([`Stack::send_fastopen`]). Non-blocking, the call
    /// returns what the SYN carried (`EINPROGRESS` for nothing); blocking,
    /// it waits for the connection and sends the rest. On a connected
    /// socket, a plain send.
    pub fn send_fastopen(
        &self,
        fd: i32,
        to: Option<SocketAddr>,
        data: &[u8],
        dontwait: bool,
    ) -> Result<usize, Errno> {
        let (_, nonblock) = self.lock().tcp(fd)?;
        let nonblock = nonblock || dontwait;
        let open = self.op(|w| {
            let (id, _) = w.tcp(fd)?;
            Ok::<_, Errno>(!matches!(
                w.stack.state(id)?,
                State::Closed | State::Listen | State::SynSent | State::SynRecv
            ))
        })?;
        if open {
            return self.send(fd, data, false, false, dontwait);
        }
        let n = self.op(|w| {
            w.refresh_sysctls();
            let (id, _) = w.tcp(fd)?;
            let now = w.now;
            w.stack.send_fastopen(id, to, data, now)
        })?;
        if nonblock {
            return if n > 0 { Ok(n) } else { Err(libc::EINPROGRESS) };
        }
        // The call waits for the handshake (`inet_wait_for_connect`), a
        // writer pending when data is left after the SYN's
        // (`tcp_send_syn_data` clears `fo->data` when all fit).
        let pending = n < data.len();
        self.write_pending(fd, pending)?;
        let connected = self.block(false, None, |w| w.handshake_done(fd));
        let _ = self.write_pending(fd, false);
        connected?;
        if n == data.len() {
            return Ok(n);
        }
        match self.send(fd, &data[n..], false, false, false) {
            Ok(m) => Ok(n + m),
            Err(_) if n > 0 => Ok(n),
            Err(e) => Err(e),
        }
    }

    /// `close`.
    pub fn close(&self, fd: i32) -> Result<(), Errno> {
        self.op(|w| {
            let f = w.fds.remove(&fd).ok_or(libc::EBADF)?;
            for other in w.fds.values_mut() {
                if let Fd::Epoll { interest } = other {
                    interest.remove(&fd);
                }
            }
            match f {
                Fd::Tcp { id, .. } => {
                    let now = w.now;
                    w.stack.close(id, now)
                }
                Fd::Epoll { .. } => Ok(()),
            }
        })
    }

    /// `shutdown`.
    pub fn shutdown(&self, fd: i32, how: i32) -> Result<(), Errno> {
        let (rd, wr) = match how {
            libc::SHUT_RD => (true, false),
            libc::SHUT_WR => (false, true),
            libc::SHUT_RDWR => (true, true),
            _ => return Err(libc::EINVAL),
        };
        self.op(|w| {
            let (id, _) = w.tcp(fd)?;
            let now = w.now;
            w.stack.shutdown(id, rd, wr, now)
        })
    }

    /// `fcntl(F_GETFL)` and `fcntl(F_SETFL)`.
    pub fn fcntl(&self, fd: i32, cmd: i32, arg: i64) -> Result<i32, Errno> {
        self.op(|w| match (w.fds.get_mut(&fd), cmd) {
            (None, _) => Err(libc::EBADF),
            (Some(Fd::Tcp { nonblock, .. }), libc::F_GETFL) => {
                Ok(libc::O_RDWR | if *nonblock { libc::O_NONBLOCK } else { 0 })
            }
            (Some(Fd::Tcp { nonblock, .. }), libc::F_SETFL) => {
                *nonblock = arg as i32 & libc::O_NONBLOCK != 0;
                Ok(0)
            }
            (Some(_), libc::F_GETFL) => Ok(libc::O_RDWR),
            (Some(_), libc::F_SETFL) => Ok(0),
            _ => Err(libc::EINVAL),
        })
    }

    /// `ioctl`: `SIOCINQ`, `SIOCOUTQ`, `FIONBIO`.
    pub fn ioctl(&self, fd: i32, req: u64, arg: i32) -> Result<i32, Errno> {
        self.op(|w| {
            let (id, _) = w.tcp(fd)?;
            let (inq, outq) = w.stack.queues(id)?;
            match req {
                r if r == libc::FIONREAD => Ok(inq as i32),
                r if r == libc::TIOCOUTQ => Ok(outq as i32),
                r if r == libc::FIONBIO => {
                    if let Some(Fd::Tcp { nonblock, .. }) = w.fds.get_mut(&fd) {
                        *nonblock = arg != 0;
                    }
                    Ok(0)
                }
                _ => Err(libc::ENOTTY),
            }
        })
    }

    /// An integer socket option.
    pub fn setsockopt(&self, fd: i32, opt: SockOpt, val: i32) -> Result<(), Errno> {
        self.op(|w| {
            if opt == SockOpt::FastopenConnect {
                // `tcp_fastopen` is read at the call.
                w.refresh_sysctls();
            }
            let (id, _) = w.tcp(fd)?;
            let now = w.now;
            w.stack.set_option(id, opt, val, now)
        })
    }

    /// Read an integer socket option.
    pub fn getsockopt(&self, fd: i32, opt: SockOpt) -> Result<i32, Errno> {
        self.op(|w| {
            let (id, _) = w.tcp(fd)?;
            w.stack.option(id, opt)
        })
    }

    /// The `TCP_CM_INQ` value a `recvmsg` reports, when `TCP_INQ` is on.
    pub fn inq_cmsg(&self, fd: i32) -> Result<Option<i32>, Errno> {
        let mut w = self.lock();
        let (id, _) = w.tcp(fd)?;
        if w.stack.option(id, SockOpt::Inq)? == 0 {
            return Ok(None);
        }
        Ok(Some(w.stack.inq_hint(id)?))
    }

    /// `getsockopt(TCP_INFO)`, as the bytes the kernel copies out.
    pub fn tcp_info(&self, fd: i32) -> Result<Vec<u8>, Errno> {
        let w = self.lock();
        let (id, _) = w.tcp(fd)?;
        Ok(w.stack.tcp_info(id, w.now)?.as_bytes())
    }

    /// `SO_MEMINFO`: `sk_get_meminfo`'s nine counters (receive queue,
    /// receive buffer, 0, send buffer, 0, send queue, 0, 0, 0).
    pub fn meminfo(&self, fd: i32) -> Result<[u32; 9], Errno> {
        let mut w = self.lock();
        let (id, _) = w.tcp(fd)?;
        let (inq, outq) = w.stack.queues(id)?;
        let rcvbuf = w.stack.option(id, SockOpt::RcvBuf)? as u32;
        let sndbuf = w.stack.option(id, SockOpt::SndBuf)? as u32;
        Ok([inq as u32, rcvbuf, 0, sndbuf, 0, outq as u32, 0, 0, 0])
    }

    /// Whether `fd` is one of this world's descriptors.
    pub fn owns(&self, fd: i32) -> bool {
        self.lock().fds.contains_key(&fd)
    }

    /// The socket's own address and its peer's.
    pub fn addrs(&self, fd: i32) -> Result<(Option<SocketAddr>, Option<SocketAddr>), Errno> {
        let w = self.lock();
        let (id, _) = w.tcp(fd)?;
        w.stack.addrs(id)
    }
}
