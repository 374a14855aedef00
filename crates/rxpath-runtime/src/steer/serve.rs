//! Readers that run their worker's backlog while they wait in `recv` (see
//! `crate::sock::BacklogServer`): the runtime's side.
//!
//! A reader claims the backlog of the worker on its CPU; wakeups for it
//! then unpark the reader ([`Workers::wake`]). Whoever runs a backlog
//! holds its busy flag, so the worker's own thread and a reader never run
//! one at the same time. Each reader thread keeps its own copy of the
//! worker's path (the stacks are not `Send`), built at its first wait
//! and kept while the workers run (it holds the socket layer: a thread's
//! copies of an ended host's paths go at its next wait, or when it ends);
//! what it counts is added to the worker's report.

use super::{lock, BottomHalf, WorkerCounters, Workers};
use rxpath_core::steer::Worker;
use std::cell::RefCell;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

/// Builds a worker's path on the calling thread (`None` once the socket
/// layer it ends in is gone).
pub(crate) type Build = Box<dyn Fn(&Arc<Workers>, Worker) -> Option<BottomHalf> + Send + Sync>;

/// The workers of a host, served by its readers.
pub(crate) struct Server {
    /// Weak: the workers hold the socket layer, which holds this.
    w: Weak<Workers>,
    build: Build,
    /// Tells this server's copies apart in a thread's cache.
    id: usize,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").field("id", &self.id).finish()
    }
}

thread_local! {
    /// This thread's copies of the paths it serves: (server, worker, path).
    static MINE: RefCell<Vec<(usize, Worker, BottomHalf)>> = const { RefCell::new(Vec::new()) };
}

impl Server {
    /// Serve `w` with paths made by `build`. Only modes without a reorder
    /// stage: `spread`'s serial part belongs to whoever completes the next
    /// number, not to one reader.
    pub(crate) fn new(w: &Arc<Workers>, build: Build) -> Option<Self> {
        use std::sync::atomic::AtomicUsize;
        static NEXT: AtomicUsize = AtomicUsize::new(1);
        w.reorder.is_none().then(|| Server {
            w: Arc::downgrade(w),
            build,
            id: NEXT.fetch_add(1, Ordering::Relaxed),
        })
    }

    fn worker(&self, cpu: usize) -> Option<(Arc<Workers>, Worker)> {
        let w = self.w.upgrade()?;
        (cpu < w.ws.len()).then_some((w, cpu as Worker))
    }
}

impl crate::sock::BacklogServer for Server {
    fn claim(&self, cpu: usize) -> bool {
        let Some((w, id)) = self.worker(cpu) else {
            return false;
        };
        // Copies of paths whose workers have ended (an earlier host's) hold
        // its socket layer and frames: let them go.
        MINE.with(|m| {
            m.borrow_mut()
                .retain(|(_, _, bh)| bh.workers().bh_running.load(Ordering::Acquire) > 0)
        });
        let s = &w.ws[id as usize];
        let mut c = lock(&s.claim);
        if c.is_some() || w.bh_running.load(Ordering::Acquire) == 0 {
            return false;
        }
        *c = Some(std::thread::current());
        s.claimed.store(true, Ordering::SeqCst);
        true
    }

    fn run(&self, cpu: usize) -> bool {
        let Some((w, id)) = self.worker(cpu) else {
            return false;
        };
        MINE.with(|m| {
            let mut m = m.borrow_mut();
            let at = match m.iter().position(|(s, i, _)| *s == self.id && *i == id) {
                Some(at) => at,
                None => {
                    let Some(bh) = (self.build)(&w, id) else {
                        return false;
                    };
                    m.push((self.id, id, bh));
                    m.len() - 1
                }
            };
            let bh = &mut m[at].2;
            let more = w.try_run(bh).unwrap_or(false);
            if bh.counters.ran > 0 || bh.counters.time_squeeze > 0 {
                let mut served = lock(&w.ws[id as usize].served);
                served.merge(&bh.counters);
                bh.counters = WorkerCounters::default();
            }
            more
        })
    }

    fn release(&self, cpu: usize) {
        let Some((w, id)) = self.worker(cpu) else {
            return;
        };
        let s = &w.ws[id as usize];
        *lock(&s.claim) = None;
        s.claimed.store(false, Ordering::SeqCst);
        // Packets queued while the claim was going: the worker's thread.
        if !w.idle(id) {
            if let Some(t) = s.thread.get() {
                t.unpark();
            }
        }
        if w.bh_running.load(Ordering::Acquire) == 0 {
            // The workers are ending: let this thread's copy go.
            MINE.with(|m| {
                m.borrow_mut()
                    .retain(|(s, i, _)| !(*s == self.id && *i == id))
            });
        }
    }
}

impl Workers {
    /// Run `bh`'s backlog once if nobody else is running it: `None` if
    /// someone is, else whether work is left.
    pub(crate) fn try_run(&self, bh: &mut BottomHalf) -> Option<bool> {
        let s = &self.ws[bh.id() as usize];
        if s.busy.swap(true, Ordering::Acquire) {
            return None;
        }
        let more = bh.run();
        s.busy.store(false, Ordering::Release);
        Some(more)
    }
}
