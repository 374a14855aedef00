//! A reader that runs its worker's backlog while it waits: what the
//! kernel gets for free with RFS. There the packet a NAPI steered to the
//! reader's CPU is processed in softirq on that CPU (an IPI, then
//! `process_backlog` on whatever runs there) and the reader is woken once.
//! A worker thread in user space would cost a second wakeup on the same
//! core: the worker's, then the reader's. So a reader about to sleep in
//! `recv` on an empty socket claims the backlog of the worker on its CPU:
//! the next wakeup for that backlog goes to the reader, which runs the
//! bottom half itself (its own copy of the worker's path, built on its
//! thread) and finds its datagram without another switch.
//!
//! ```text
//!  NAPI ─ steer ─► backlog of worker w ── wake(w) ──► claimed? ─ yes ─► the reader in recv runs it
//!                                                              └ no ──► worker w's thread runs it
//! ```
//!
//! One runs a backlog at a time (the runtime's busy flag), so the order
//! RFS keeps per flow (`input_queue_head` after `last_qtail`) holds.

/// The workers of the bottom half, as a waiting reader sees them
/// (the steering workers' server implements it; a [`crate::Host`] with
/// workers gives it to each socket it binds).
pub trait BacklogServer: Send + Sync + std::fmt::Debug {
    /// Claim the backlog of the worker on `cpu` for the calling thread:
    /// until [`Self::release`], wakeups for that backlog unpark this
    /// thread. False if there is no such worker, or it is claimed.
    fn claim(&self, cpu: usize) -> bool;
    /// Run the claimed backlog once (up to a `netdev_budget`) on this
    /// thread, unless another thread is running it. True if work is left.
    fn run(&self, cpu: usize) -> bool;
    /// Give the claim back; the worker's own thread takes over what is
    /// left.
    fn release(&self, cpu: usize);
}
