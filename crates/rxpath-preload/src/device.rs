//! Sleeping on the device: while a busy poll left a NAPI's interrupt
//! deferred (prefer busy polling), a waiter that goes to sleep waits on
//! the device's own descriptor (its AF_XDP socket) as well, and polls the
//! NAPI itself when the device has packets: a burst costs one wakeup, the
//! waiter's, instead of the interrupt thread's and then the waiter's. This
//! is the kernel's IRQ suspension (`irq_suspend_timeout`, Linux 6.13) with
//! the device as the alarm clock. If the waiter does not come back within
//! the deferral, the NAPI thread takes the queue back at its deadline, as
//! before.

use crate::sock::Accel;
use rxpath_core::NapiId;
use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};

/// The device descriptors by NAPI, made once each (a NAPI and its queue
/// live as long as the host).
static DEVICES: Mutex<Option<HashMap<NapiId, OwnedFd>>> = Mutex::new(None);

fn device_fd(a: &Accel) -> Option<RawFd> {
    let id = a.sock.napi_id();
    let mut g = DEVICES.lock().unwrap_or_else(|e| e.into_inner());
    let m = g.get_or_insert_with(HashMap::new);
    if let Some(fd) = m.get(&id) {
        return Some(fd.as_raw_fd());
    }
    let fd = a.sock.socket().napi_readiness_fd()?.ok()?;
    let raw = fd.as_raw_fd();
    m.insert(id, fd);
    Some(raw)
}

/// Before a waiter over `socks` sleeps: the device descriptors to sleep on
/// too, one per NAPI of theirs whose interrupt is deferred. A deferred
/// NAPI without one (the simulated NIC) has its interrupt raised again
/// now, as nobody will poll it soon.
pub(crate) fn sleep_devices(socks: &[&Arc<Accel>]) -> Vec<RawFd> {
    let Some(first) = socks.first() else {
        return Vec::new();
    };
    let host = first.sock.host();
    let mut fds = Vec::new();
    let mut seen = Vec::new();
    for a in socks {
        let id = a.sock.napi_id();
        if id.0 == 0 || seen.contains(&id) {
            continue;
        }
        seen.push(id);
        let deferred = host.napi_by_id(id).is_some_and(|n| n.deferred_until() != 0);
        match deferred.then(|| device_fd(a)).flatten() {
            Some(fd) => fds.push(fd),
            None => host.resume_irqs(&[id]),
        }
    }
    fds
}

/// The host stops: its devices' descriptors go.
pub(crate) fn forget() {
    DEVICES.lock().unwrap_or_else(|e| e.into_inner()).take();
}
