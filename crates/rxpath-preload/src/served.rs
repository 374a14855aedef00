//! A served socket of either protocol, as `poll`, `select` and `epoll`
//! see it: its readiness and who sleeps on it. UDP's busy polling and
//! device sleep go by protocol ([`Served::udp`], [`Served::tcp`]).

use crate::tcp::sock::TcpSock;
use crate::udp::sock::{readable, Accel};
use crate::watchers::Watchers;
use std::sync::Arc;

/// A served socket behind an fd.
#[derive(Debug, Clone)]
pub(crate) enum Served {
    Udp(Arc<Accel>),
    Tcp(Arc<TcpSock>),
}

impl Served {
    pub(crate) fn watch(&self) -> &Watchers {
        match self {
            Served::Udp(a) => &a.watch,
            Served::Tcp(t) => &t.watch,
        }
    }

    /// The UDP socket, if it is one.
    pub(crate) fn udp(&self) -> Option<&Arc<Accel>> {
        match self {
            Served::Udp(a) => Some(a),
            Served::Tcp(_) => None,
        }
    }

    /// The TCP socket, if it is one.
    pub(crate) fn tcp(&self) -> Option<&Arc<TcpSock>> {
        match self {
            Served::Udp(_) => None,
            Served::Tcp(t) => Some(t),
        }
    }

    /// Its readiness in `epoll`'s bits: a UDP socket is readable while a
    /// datagram waits and always writable (a full TX ring is a counted
    /// drop); a TCP socket's are `tcp_poll`'s.
    pub(crate) fn mask(&self) -> u32 {
        match self {
            Served::Udp(a) => {
                let mut m = (libc::EPOLLOUT | libc::EPOLLWRNORM) as u32;
                if readable(a) {
                    m |= (libc::EPOLLIN | libc::EPOLLRDNORM) as u32;
                }
                if a.sock.is_closed() {
                    m |= libc::EPOLLHUP as u32;
                }
                m
            }
            Served::Tcp(t) => t.events(),
        }
    }
}
