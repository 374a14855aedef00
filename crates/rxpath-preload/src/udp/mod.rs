//! UDP on rxpath, as the preload keeps it: a served socket and who sleeps
//! on it (`sock`), what its queue held at a `fork`, shared with the child
//! (`forkq`), and its multicast memberships (`mcast`). The calls that use
//! them are `crate::ops`'s `udp_*` files; the fd table, readiness and the
//! host are protocol-neutral and sit beside this room.

pub(crate) mod forkq;
pub(crate) mod mcast;
pub(crate) mod sock;
