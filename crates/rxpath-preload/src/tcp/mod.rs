//! TCP's room: a served TCP socket (a listener, or a connection it
//! accepted) and what "ready" means for it. The machine itself is
//! `rxpath_tcp`'s, its waiting half `rxpath_runtime`'s; this room holds
//! what the program's fd adds: the kernel socket behind it, the
//! non-blocking flag, who sleeps on it.

pub(crate) mod relay;
pub(crate) mod sock;
