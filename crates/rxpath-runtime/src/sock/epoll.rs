//! Readiness over many sockets: an `epoll_wait`-like call, level-triggered,
//! with busy polling (the kernel's `ep_busy_loop`).

use super::{busy_loop, lock, UdpSocket};
use rxpath_core::sock::Sockets;
use rxpath_core::NapiId;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug, Default)]
pub(crate) struct EpollShared {
    gen: Mutex<u64>,
    cv: Condvar,
}

impl super::Watch for EpollShared {
    /// A watched socket became readable.
    fn ready(&self) {
        *lock(&self.gen) += 1;
        self.cv.notify_all();
    }
}

/// A set of sockets to wait on.
#[derive(Debug)]
pub struct Epoll {
    shared: Arc<EpollShared>,
    socks: Vec<(usize, UdpSocket)>,
    host: Arc<Sockets>,
    busy_poll_us: u32,
    busy_poll_budget: usize,
}

impl Epoll {
    /// An empty set on `host`.
    pub fn new(host: &Arc<Sockets>) -> Epoll {
        Epoll {
            shared: Arc::default(),
            socks: Vec::new(),
            host: host.clone(),
            busy_poll_us: 0,
            busy_poll_budget: rxpath_core::sock::BUSY_POLL_BUDGET,
        }
    }

    /// Watch `sock`, reported as `token` (a socket is in one set at a time).
    pub fn add(&mut self, sock: &UdpSocket, token: usize) {
        let w: Arc<dyn super::Watch> = self.shared.clone();
        sock.set_watch(Arc::downgrade(&w));
        self.socks.push((token, sock.clone()));
    }

    /// Busy-poll the sockets' NAPIs this long (µs) before sleeping (the
    /// kernel's `EPIOCSPARAMS busy_poll_usecs`); 0 = off.
    pub fn set_busy_poll(&mut self, us: u32) {
        self.busy_poll_us = us;
    }

    /// The packets one busy poll may take (`EPIOCSPARAMS busy_poll_budget`;
    /// 0 = the kernel's `BUSY_POLL_BUDGET`).
    pub fn set_busy_poll_budget(&mut self, budget: u16) {
        self.busy_poll_budget = match budget {
            0 => rxpath_core::sock::BUSY_POLL_BUDGET,
            b => b as usize,
        };
    }

    fn scan(&self, ready: &mut Vec<usize>) -> usize {
        ready.clear();
        for (t, s) in &self.socks {
            if s.queued() > 0 || s.is_closed() {
                ready.push(*t);
            }
        }
        ready.len()
    }

    /// Fill `ready` with the tokens of sockets that have datagrams (or are
    /// closed), waiting up to `timeout` (`None` = forever). Returns how many.
    pub fn wait(&self, ready: &mut Vec<usize>, timeout: Option<Duration>) -> usize {
        let n = self.wait_for(ready, timeout);
        self.suspend_ready(ready);
        n
    }

    /// `ep_suspend_napi_irqs()`: the ready sockets' NAPIs stay deferred for
    /// their IRQ suspension timeout, as this thread is now busy with what
    /// it was handed ([`crate::sock::suspend_irqs`]).
    fn suspend_ready(&self, ready: &[usize]) {
        for (_, s) in self.socks.iter().filter(|(t, _)| ready.contains(t)) {
            let id = s.napi_id();
            if id.0 != 0 {
                super::busy::suspend_irqs(&self.host, &[id]);
            }
        }
    }

    fn wait_for(&self, ready: &mut Vec<usize>, timeout: Option<Duration>) -> usize {
        if self.scan(ready) > 0 {
            return ready.len();
        }
        if self.busy_poll_us > 0 {
            let mut ids: Vec<NapiId> = self.socks.iter().map(|(_, s)| s.napi_id()).collect();
            ids.retain(|i| i.0 != 0);
            ids.sort_unstable();
            ids.dedup();
            let socks = &self.socks;
            busy_loop(
                &self.host,
                &ids,
                self.busy_poll_us,
                self.busy_poll_budget,
                &|| socks.iter().any(|(_, s)| s.queued() > 0),
            );
            if self.scan(ready) > 0 {
                return ready.len();
            }
            self.host.resume_irqs(&ids);
        }
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut g = lock(&self.shared.gen);
        loop {
            // Scanned under the lock: an enqueue after this scan notifies
            // only once we wait, so no wakeup is lost.
            if self.scan(ready) > 0 {
                return ready.len();
            }
            g = match deadline {
                None => self.shared.cv.wait(g).unwrap_or_else(|e| e.into_inner()),
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return 0;
                    }
                    self.shared
                        .cv
                        .wait_timeout(g, left)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
            };
        }
    }
}
