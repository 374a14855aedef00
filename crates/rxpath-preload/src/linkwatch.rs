//! The interface under a running program, watched from the kernel's link
//! notifications (netlink `RTMGRP_LINK`, and a look every second besides,
//! asked of the kernel by ioctl rather than read from `/sys`, which a
//! daemon that chroots no longer sees):
//! deleted, made again (a new index), set down or up, its MTU changed.
//! Each is said on stderr and kept for the report. An interface deleted or
//! made again takes rxpath's device with it (the AF_XDP or AF_PACKET
//! socket is bound to the old index): every served socket goes back to
//! the kernel socket behind its fd, which the new interface reaches, and
//! sockets bound later stay the kernel's. Down and up again, rxpath
//! carries on (its XDP program and sockets stay bound). On AF_PACKET an
//! MTU its ring slots cannot carry sends the sockets back too; on AF_XDP
//! the XDP program passes frames too long for its frames to the kernel
//! socket behind the fd.

use rxpath_dev::sys::iface::{LinkEvents, LinkState};
use std::time::{Duration, Instant};

/// What the watch saw: said and kept by the caller; `gone` when rxpath's
/// device went with it and every socket must go back to the kernel.
pub(crate) type OnEvent = fn(what: &str, gone: bool);

/// Watch `iface` (whose device rxpath just opened) on a thread of its own,
/// telling `on_event`.
pub(crate) fn start(iface: &str, on_event: OnEvent) {
    let events = match LinkEvents::open() {
        Ok(ev) => ev,
        Err(e) => {
            return crate::config::say(&format!(
                "no link notifications ({e}): a deleted {iface} would go unnoticed"
            ))
        }
    };
    let Ok(Some(first)) = events.state(iface) else {
        return;
    };
    let name = iface.to_string();
    let r = std::thread::Builder::new()
        .name("rxpath-link".into())
        .spawn(move || watch(events, &name, first, on_event));
    if let Err(e) = r {
        crate::config::say(&format!(
            "the interface watch did not start ({e}): a deleted {iface} would go unnoticed"
        ));
    }
}

fn watch(events: LinkEvents, name: &str, first: LinkState, on_event: OnEvent) {
    let start = Instant::now();
    let mut was = first;
    loop {
        let _ = events.wait(Duration::from_secs(1));
        // Asked of the kernel, not read from /sys: a daemon that chrooted
        // still sees its interface. An error is no news.
        let Ok(now) = events.state(name) else {
            continue;
        };
        let at = format!("{:.2}s into the run", start.elapsed().as_secs_f64());
        let Some(now) = now.filter(|n| n.ifindex == first.ifindex) else {
            let what = match now {
                None => format!("interface {name} was deleted {at}"),
                Some(n) => format!(
                    "interface {name} was deleted {at} and made again (index {} is now {})",
                    first.ifindex, n.ifindex
                ),
            };
            return on_event(&format!("{what}: its sockets go back to the kernel"), true);
        };
        if now.up != was.up {
            let what = if now.up { "came back up" } else { "went down" };
            on_event(&format!("interface {name} {what} {at}"), false);
        }
        if now.mtu != was.mtu {
            let what = format!(
                "interface {name}'s MTU went from {} to {} {at}",
                was.mtu, now.mtu
            );
            on_event(&what, false);
        }
        was = now;
    }
}
