//! Sleeping on the device: while a busy poll left a NAPI's interrupt
//! deferred (prefer busy polling), a waiter that goes to sleep waits on
//! the device's own descriptor (its AF_XDP socket) as well, and polls the
//! NAPI itself when the device has packets: a burst costs one wakeup, the
//! waiter's, instead of the interrupt thread's and then the waiter's. This
//! is the kernel's IRQ suspension (`irq_suspend_timeout`, Linux 6.13) with
//! the device as the alarm clock. If the waiter does not come back within
//! the deferral, the NAPI thread takes the queue back at its deadline, as
//! before.

use crate::tcp::sock::TcpSock;
use crate::udp::sock::{readable, Accel};
use rxpath_core::sock::{SharedNapi, Sockets};
use rxpath_core::NapiId;
use rxpath_dev::sync::lock;
use std::collections::HashMap;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Mutex};

/// The device descriptors by NAPI, made once each (a NAPI and its queue
/// live as long as the host).
static DEVICES: Mutex<Option<HashMap<NapiId, crate::sys::Ours>>> = Mutex::new(None);

fn device_fd(host: &Sockets, id: NapiId) -> Option<RawFd> {
    let mut g = lock(&DEVICES);
    let m = g.get_or_insert_with(HashMap::new);
    if let Some(fd) = m.get(&id) {
        return Some(fd.as_raw_fd());
    }
    let fd = host.napi_readiness_fd(id)?.ok()?;
    let fd = crate::sys::Ours::new(fd);
    let raw = fd.as_raw_fd();
    m.insert(id, fd);
    Some(raw)
}

/// The devices a waiter sleeps on, and their NAPIs, each marked as slept
/// on ([`SharedNapi::sleep_on_device`]: the NAPI thread leaves the
/// interrupt to the waiter). When it is dropped (the waiter woke, for
/// whatever reason) the marks go and the waiter polls those NAPIs once,
/// `budget` packets, until `ready()`: that defers their interrupts anew,
/// and a NAPI is never left masked with nobody to poll it.
pub(crate) struct DeviceSleep<'a> {
    /// The device descriptors to sleep on.
    pub(crate) fds: Vec<RawFd>,
    napis: Vec<Arc<SharedNapi>>,
    host: Option<&'a Sockets>,
    budget: usize,
    ready: Box<dyn Fn() -> bool + 'a>,
}

impl Drop for DeviceSleep<'_> {
    fn drop(&mut self) {
        let Some(host) = self.host.filter(|_| !self.napis.is_empty()) else {
            return;
        };
        for n in &self.napis {
            n.wake_from_device();
        }
        let ids: Vec<NapiId> = self.napis.iter().map(|n| n.id).collect();
        rxpath_runtime::sock::busy_loop(host, &ids, 0, self.budget, &*self.ready);
    }
}

/// Before a waiter over `socks` sleeps: the device descriptors to sleep on
/// too, one per NAPI of theirs whose interrupt is deferred. A deferred
/// NAPI without one (the simulated NIC) has its interrupt raised again
/// now, as nobody will poll it soon.
pub(crate) fn sleep_devices<'a>(socks: &'a [&'a Arc<Accel>]) -> DeviceSleep<'a> {
    let Some(first) = socks.first() else {
        return sleep_on(None, &[], 0, Box::new(|| false));
    };
    let ids: Vec<NapiId> = socks.iter().map(|a| a.sock.napi_id()).collect();
    let ready = Box::new(move || socks.iter().any(|a| readable(a)));
    let budget = crate::udp::sock::budget_of(socks);
    sleep_on(Some(first.sock.host()), &ids, budget, ready)
}

/// [`sleep_devices`] for TCP sockets: woken, the waiter polls the
/// devices once until one of `tcp` is touched.
pub(crate) fn sleep_tcp(tcp: &[Arc<TcpSock>]) -> DeviceSleep<'_> {
    let Some(host) = tcp.first().map(|t| t.busy_of().2) else {
        return sleep_on(None, &[], 0, Box::new(|| false));
    };
    let ids: Vec<NapiId> = tcp.iter().map(|t| t.busy_of().1).collect();
    let seen: Vec<u64> = tcp.iter().map(|t| t.watch.edges()).collect();
    let moved = move || tcp.iter().zip(&seen).any(|(t, e)| t.watch.edges() != *e);
    let budget = rxpath_core::sock::BUSY_POLL_BUDGET;
    sleep_on(Some(host), &ids, budget, Box::new(moved))
}

/// [`sleep_devices`] for the NAPIs `ids` of `host` (repeats and 0
/// skipped), polled `budget` packets at a time until `ready()` on waking.
pub(crate) fn sleep_on<'a>(
    host: Option<&'a Sockets>,
    ids: &[NapiId],
    budget: usize,
    ready: Box<dyn Fn() -> bool + 'a>,
) -> DeviceSleep<'a> {
    let mut sleep = DeviceSleep {
        fds: Vec::new(),
        napis: Vec::new(),
        host,
        budget,
        ready,
    };
    let Some(host) = host else {
        return sleep;
    };
    let mut seen = Vec::new();
    for &id in ids {
        if id.0 == 0 || seen.contains(&id) {
            continue;
        }
        seen.push(id);
        let Some(n) = host.napi_by_id(id).filter(|n| n.deferred_until() != 0) else {
            continue;
        };
        match device_fd(host, id) {
            Some(fd) => {
                n.sleep_on_device();
                sleep.fds.push(fd);
                sleep.napis.push(n);
            }
            None => host.resume_irqs(&[id]),
        }
    }
    sleep
}

/// The host stops: its devices' descriptors go.
pub(crate) fn forget() {
    lock(&DEVICES).take();
}
