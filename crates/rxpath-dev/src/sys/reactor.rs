//! A device's descriptor in tokio's reactor (feature `tokio`), so that an
//! application's task is woken by the device itself.

use std::io;
use std::os::fd::OwnedFd;
use tokio::io::unix::AsyncFd;

/// Register `fd` (a queue's AF_XDP or AF_PACKET socket, duplicated) with
/// the current tokio runtime's reactor. Call from within a runtime.
pub fn register(fd: OwnedFd) -> io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: `OwnedFd` owns a valid, open descriptor; the `AsyncFd` takes
    // it by value and nothing else can close or replace it while the
    // `AsyncFd` holds it (it is closed when the `AsyncFd` drops, after
    // deregistration), which is `register`'s contract.
    unsafe { AsyncFd::register(fd) }.map_err(|e| e.into())
}
