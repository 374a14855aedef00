//! Watching a real interface while a run uses it: deleted or set down, the
//! run stops as it would at the end of its duration (drained, every frame
//! home, the report so far) and says why, instead of idling on a queue
//! that will never deliver again.

use super::RunConfig;
use rxpath_dev::sync::lock;
use rxpath_dev::sys::af_packet::iface_up;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// A watcher thread for one interface.
pub(crate) struct IfaceWatch {
    quit: Arc<AtomicBool>,
    reason: Arc<Mutex<Option<String>>>,
    handle: Option<JoinHandle<()>>,
}

impl IfaceWatch {
    /// Watch `name` for a run of `cfg`; returns the watcher and the
    /// configuration to run with: its stop flag is the watcher's, which
    /// also follows `cfg`'s own (a signal's).
    pub(crate) fn start(name: &str, cfg: &RunConfig) -> (IfaceWatch, RunConfig) {
        let user_stop = cfg.stop.clone();
        let stop = Arc::new(AtomicBool::new(false));
        let quit = Arc::new(AtomicBool::new(false));
        let reason = Arc::new(Mutex::new(None));
        let (s, q, r, name) = (stop.clone(), quit.clone(), reason.clone(), name.to_string());
        let handle = std::thread::Builder::new()
            .name("rxpath-ifwatch".into())
            .spawn(move || {
                let start = std::time::Instant::now();
                let mut n = 0u32;
                while !q.load(Ordering::Acquire) {
                    if user_stop
                        .as_ref()
                        .is_some_and(|u| u.load(Ordering::Acquire))
                    {
                        s.store(true, Ordering::Release);
                    }
                    // The interface every 100 ms; the signal flag every 20.
                    if n.is_multiple_of(5) {
                        let gone = match iface_up(&name) {
                            Ok(None) => Some("was deleted"),
                            Ok(Some(false)) => Some("went down"),
                            _ => None,
                        };
                        if let Some(what) = gone {
                            let msg = format!(
                                "interface {name} {what} {:.2}s into the run",
                                start.elapsed().as_secs_f64()
                            );
                            *lock(&r) = Some(msg);
                            s.store(true, Ordering::Release);
                            return;
                        }
                    }
                    n = n.wrapping_add(1);
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
            .ok();
        (
            IfaceWatch {
                quit,
                reason,
                handle,
            },
            RunConfig {
                stop: Some(stop),
                ..cfg.clone()
            },
        )
    }

    /// Stop watching; why the run was stopped early, if it was.
    pub(crate) fn finish(mut self) -> Option<String> {
        self.quit.store(true, Ordering::Release);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        lock(&self.reason).take()
    }
}
