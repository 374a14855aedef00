//! The interface under a running program, watched from the kernel's link
//! notifications (netlink `RTMGRP_LINK`, and a look every second besides,
//! asked of the kernel by ioctl rather than read from `/sys`, which a
//! daemon that chroots no longer sees):
//! deleted, made again (a new index), set down or up, its MTU changed, an
//! address added (`RTMGRP_IPV4_IFADDR`, `RTMGRP_IPV6_IFADDR`: a VIP).
//! Each is said on stderr and kept for the report. The host's addresses
//! are every interface's, as the kernel takes a datagram for any of them
//! on any interface (an anycast address on `lo`): rxpath's IP input takes
//! them all, those there at the start and those added since; loopback
//! addresses and other interfaces' IPv6 link-local ones aside, which the
//! kernel does not take from this interface. An interface deleted or
//! made again takes rxpath's device with it (the AF_XDP or AF_PACKET
//! socket is bound to the old index): every served socket goes back to
//! the kernel socket behind its fd, which the new interface reaches, and
//! sockets bound later stay the kernel's. Down and up again, rxpath
//! carries on (its XDP program and sockets stay bound). Frames longer
//! than rxpath's frames hold go to the kernel socket behind the fd (the
//! XDP program and AF_PACKET's tap filter leave them to it).

use rxpath_dev::sys::iface::{LinkEvents, LinkState};
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// What the watch saw: said and kept by the caller; `gone` when rxpath's
/// device went with it and every socket must go back to the kernel.
pub(crate) type OnEvent = fn(what: &str, gone: bool);

/// The host has address `a` on interface `on`: the caller makes it
/// rxpath's too, and says it if `added` (it came while rxpath ran).
pub(crate) type OnAddress = fn(a: IpAddr, on: &str, added: bool);

/// Watch `iface` (whose device rxpath just opened) on a thread of its own,
/// telling `on_event`.
pub(crate) fn start(iface: &str, on_event: OnEvent, on_addr: OnAddress) {
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
        .spawn(move || watch(events, &name, first, (on_event, on_addr)));
    if let Err(e) = r {
        crate::config::say(&format!(
            "the interface watch did not start ({e}): a deleted {iface} would go unnoticed"
        ));
    }
}

fn watch(
    events: LinkEvents,
    name: &str,
    first: LinkState,
    (on_event, on_addr): (OnEvent, OnAddress),
) {
    let start = Instant::now();
    let mut was = first;
    let mut seen = std::collections::HashSet::new();
    let mut first_look = true;
    // The addresses are read again only after a notification (or an
    // error: one may have been lost): `getifaddrs` opens a socket of its
    // own on the lowest free number, which a program closing a number
    // twice must not find there every second.
    let mut look = true;
    loop {
        if look {
            for (on, a) in host_addresses(name) {
                if seen.insert(a) {
                    on_addr(a, &on, !first_look);
                }
            }
        }
        first_look = false;
        look = !matches!(events.wait(Duration::from_secs(1)), Ok(false));
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

/// The host's addresses a datagram arriving on `name` may be for, each
/// with its interface: every interface's, but loopback addresses (the
/// kernel drops them from another interface as martians) and other
/// interfaces' IPv6 link-local ones (scoped to their link).
pub(crate) fn host_addresses(name: &str) -> Vec<(String, IpAddr)> {
    let all = rxpath_dev::sys::iface::host_addresses().unwrap_or_default();
    all.into_iter()
        .filter(|(on, a)| match a {
            IpAddr::V4(v4) => !v4.is_loopback(),
            IpAddr::V6(v6) => {
                !v6.is_loopback() && (on == name || (v6.segments()[0] & 0xffc0) != 0xfe80)
            }
        })
        .collect()
}
