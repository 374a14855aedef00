//! Driving a run: the NAPI threads and workers started, the ticks, the
//! producer stopped, the threads drained and what they return gathered.

use super::*;
use rxpath_dev::sync::lock;

/// The stalls the NAPI threads and the pure workers injected.
pub(super) fn stalls_of<Q: RxQueue>(
    outs: &[ThreadOut<Q>],
    workers: &[crate::steer::WorkerReport],
) -> FaultReport {
    let (n, d) = outs.iter().fold((0, Duration::ZERO), |(n, d), o| {
        (n + o.stalls.0, d + o.stalls.1)
    });
    FaultReport {
        starve_windows: 0,
        stalls: n,
        stalled_ms: d.as_secs_f64() * 1e3,
        worker_stalls: workers.iter().map(|w| w.stalls).sum(),
        worker_stalled_ms: workers.iter().map(|w| w.stalled_ms).sum(),
    }
}

pub(super) type Collected<Q> = (
    Vec<QueueReport>,
    Vec<SoftnetStats>,
    u64,
    Vec<Q>,
    Option<LatencyHist>,
);

/// Gather what the NAPI threads gave back: per-queue reports and the
/// queues themselves, both in queue order.
pub(super) fn collect<Q: RxQueue>(outs: Vec<ThreadOut<Q>>) -> Collected<Q> {
    let (mut queues, mut softnet, mut host, mut received) = (Vec::new(), Vec::new(), Vec::new(), 0);
    let mut latency: Option<LatencyHist> = None;
    for o in outs {
        if let Some(l) = &o.latency {
            latency.get_or_insert_with(LatencyHist::default).merge(l);
        }
        softnet.push(o.softnet);
        received += o.received_at_stop;
        for n in o.napis {
            queues.push(queue_report(&n));
            host.push(n.into_queue());
        }
    }
    host.sort_by_key(|q| q.queue_index());
    queues.sort_by_key(|q| q.queue);
    (queues, softnet, received, host, latency)
}

pub(super) type Outs<Q> = (Vec<ThreadOut<Q>>, Duration, Live, SteerOut);

/// The workers of the bottom half over the queues of `groups` (None:
/// steering off).
pub(super) fn steer_workers<Q: RxQueue>(
    cfg: &RunConfig,
    groups: &[Vec<Napi<Q>>],
    rules: Option<Arc<sim::FlowRules>>,
) -> Option<Arc<Workers>> {
    if cfg.steer.mode == SteerMode::None {
        return None;
    }
    let max_q = groups
        .iter()
        .flatten()
        .map(|n| n.queue().queue_index() as usize)
        .max()
        .unwrap_or(0);
    let mut ports: Vec<Option<Port>> = (0..=max_q).map(|_| None).collect();
    for n in groups.iter().flatten() {
        ports[n.queue().queue_index() as usize] = Some(Port {
            umem: n.queue().umem().clone(),
            ret: Default::default(),
        });
    }
    // The simulated NIC numbers each UDP flow's datagrams.
    let seq = match cfg.producer {
        Producer::Thread { .. } | Producer::Null => SeqSource::TcpAndUdpCounter,
        _ => SeqSource::Tcp,
    };
    let mut w = Workers::new(
        &cfg.steer,
        crate::steer::Ports::Own(ports),
        groups.len(),
        seq,
        cfg.sock_flows.clone(),
    );
    if let Some(k) = &cfg.knobs {
        w.share_rps_mask(&k.rps_cpus);
        if cfg.steer.mode == SteerMode::Rfs {
            w.share_flow_cnt(&k.rps_flow_cnt);
        }
        k.workers.store(w.len(), Ordering::Relaxed);
    }
    Some(Arc::new(match rules {
        Some(r) => {
            let mut queue_worker = vec![None; max_q + 1];
            for (t, g) in groups.iter().enumerate() {
                for n in g {
                    queue_worker[n.queue().queue_index() as usize] = Some(t as Worker);
                }
            }
            w.with_accel(r, &queue_worker)
        }
        None => w,
    }))
}

/// What `drive` knows of the packet source: how to stop it, whether it
/// has ended (a replay of a file), and its ntuple rules (accelerated RFS).
pub(super) struct Source<F> {
    pub(super) stop: Option<F>,
    pub(super) done: Option<Arc<AtomicBool>>,
    pub(super) rules: Option<Arc<sim::FlowRules>>,
}

/// Start the NAPI threads, tick until the duration is over, stop the
/// producer (if any), let the threads drain and collect them.
pub(super) fn drive<Q, F>(
    cfg: &RunConfig,
    groups: Vec<Vec<Napi<Q>>>,
    pin_to: &dyn Fn(usize) -> Option<core_affinity::CoreId>,
    stop_napi: &Arc<AtomicBool>,
    window_over: &Arc<AtomicBool>,
    source: Source<F>,
    on_tick: &mut dyn FnMut(&Tick),
) -> Result<Outs<Q>, RunError>
where
    Q: RxQueue + Send + 'static,
    F: FnOnce(),
{
    let live = Arc::new(Mutex::new(Live::default()));
    let capture = match &cfg.capture {
        Some(p) => Some(Arc::new(Mutex::new(
            rxpath_dev::pcap::Writer::create(p)
                .map_err(|e| RunError::Device(format!("capture: {e}")))?,
        ))),
        None => None,
    };
    // The capture file must outlive every tap: the writer is finished only
    // once all NAPI threads (which own the taps) have been joined.
    // IP input in front of the sink (not of rxdrop, the lowest RX level).
    let ip = match cfg.stack {
        StackKind::Rxdrop => None,
        StackKind::Sink | StackKind::Latency => Some(ip_config(cfg)),
    };
    let Source {
        stop: stop_producer,
        done: source_done,
        rules,
    } = source;
    let workers = steer_workers(cfg, &groups, rules);
    let rest = PathRest {
        kind: cfg.stack,
        cap: if cfg.capture_at == CaptureAt::Delivered {
            capture.clone()
        } else {
            None
        },
        filter: cfg.filter.clone(),
        ip: ip.clone(),
    };
    let pure = match &workers {
        Some(w) => spawn_pure_workers(cfg, w, groups.len(), &rest, pin_to)?,
        None => Vec::new(),
    };
    let mut handles = Vec::new();
    for (t, napis) in groups.into_iter().enumerate() {
        let th = NapiThread {
            t,
            cfg: cfg.clone(),
            core: pin_to(t),
            ip: ip.clone(),
            workers: workers.clone(),
            rest: rest.clone(),
            stop: stop_napi.clone(),
            over: window_over.clone(),
            live: live.clone(),
        };
        handles.push(th.spawn(napis, capture.clone())?);
    }
    let elapsed = run_window(cfg, &live, workers.as_deref(), source_done, on_tick);
    window_over.store(true, Ordering::Release);
    if let Some(f) = stop_producer {
        f();
    }
    // Give the producer's final flush time to land, then drain and stop.
    thread::sleep(Duration::from_millis(20));
    stop_napi.store(true, Ordering::Release);
    let mut outs: Vec<ThreadOut<Q>> = Vec::new();
    for h in handles {
        h.thread().unpark();
        outs.push(
            h.join()
                .map_err(|_| RunError::Thread("NAPI thread panicked".into()))?,
        );
    }
    let steer = match &workers {
        Some(w) => steer_out(w, &outs, pure)?,
        None => SteerOut::default(),
    };
    let l = lock(&live).clone();
    if let Some(w) = capture.and_then(|c| Arc::try_unwrap(c).ok()) {
        w.into_inner()
            .unwrap_or_else(|e| e.into_inner())
            .finish()
            .map_err(|e| RunError::Device(format!("capture: {e}")))?;
    }
    Ok((outs, elapsed, l, steer))
}

/// The fault windows of thread `id` (`--fault stall=MS`), seeded apart.
fn stall_windows(cfg: &RunConfig, id: usize) -> Option<FaultWindows> {
    let f = cfg.sim.faults;
    FaultWindows::new(
        f.stall_ms,
        f.stall_every_ms,
        f.seed ^ (id as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15),
    )
}

/// Workers beyond the NAPI threads (`first..`): threads that only run
/// their backlog.
fn spawn_pure_workers(
    cfg: &RunConfig,
    w: &Arc<Workers>,
    first: usize,
    rest: &PathRest,
    pin_to: &dyn Fn(usize) -> Option<core_affinity::CoreId>,
) -> Result<Vec<(Worker, thread::JoinHandle<crate::steer::WorkerCounters>)>, RunError> {
    let t0 = Instant::now();
    let mut pure = Vec::new();
    for id in first..w.len() {
        let (w, rest) = (w.clone(), rest.clone());
        let core = pin_to(id);
        let idle_poll = cfg.idle_poll;
        let budget = cfg.softnet.netdev_budget;
        let stop_at = cfg
            .stop_worker
            .filter(|&(s, _)| s as usize == id)
            .map(|(_, d)| t0 + d);
        let stall = stall_windows(cfg, id);
        let h = thread::Builder::new()
            .name(format!("rxpath-bh/{id}"))
            .spawn(move || {
                if let Some(c) = core {
                    core_affinity::set_for_current(c);
                }
                let bh = rest.bottom_half(&w, id as Worker, budget);
                pure_worker_thread(bh, idle_poll, stop_at, stall)
            })
            .map_err(|e| RunError::Thread(e.to_string()))?;
        pure.push((id as Worker, h));
    }
    Ok(pure)
}

/// One NAPI thread of a run, before it starts.
struct NapiThread {
    t: usize,
    cfg: RunConfig,
    core: Option<core_affinity::CoreId>,
    ip: Option<rxpath_core::ip::IpConfig>,
    workers: Option<Arc<Workers>>,
    rest: PathRest,
    stop: Arc<AtomicBool>,
    over: Arc<AtomicBool>,
    live: Arc<Mutex<Live>>,
}

impl NapiThread {
    /// Start it on `napis`; the capture taps each NAPI before GRO
    /// (`--capture-at rx`) or the end of the path.
    fn spawn<Q: RxQueue + Send + 'static>(
        self,
        mut napis: Vec<Napi<Q>>,
        mut cap: Option<Arc<Mutex<rxpath_dev::pcap::Writer>>>,
    ) -> Result<thread::JoinHandle<ThreadOut<Q>>, RunError> {
        if self.cfg.capture_at == CaptureAt::Rx {
            // Tap each NAPI before GRO instead of the end of the path.
            if let Some(w) = cap.take() {
                for n in napis.iter_mut() {
                    let w = w.clone();
                    n.set_rx_tap(Some(Box::new(move |bytes: &[u8], now: u64| {
                        let ts = Duration::from_nanos(now);
                        // A write error loses the capture, not the packet.
                        let _ = lock(&w).write(ts, &[bytes]);
                    })));
                }
            }
        }
        thread::Builder::new()
            .name(format!("rxpath-napi/{}", self.t))
            .spawn(move || {
                if let Some(c) = self.core {
                    core_affinity::set_for_current(c);
                }
                self.run(napis, cap)
            })
            .map_err(|e| RunError::Thread(e.to_string()))
    }

    /// The thread's body: the path after GRO as the run asks for it.
    fn run<Q: RxQueue>(
        self,
        napis: Vec<Napi<Q>>,
        cap: Option<Arc<Mutex<rxpath_dev::pcap::Writer>>>,
    ) -> ThreadOut<Q> {
        let cfg = &self.cfg;
        let t = self.t;
        // Null queues have no interrupt line: always polling mode.
        let interrupts = cfg.interrupts && cfg.producer != Producer::Null;
        let (idle_poll, softnet) = (cfg.idle_poll, cfg.softnet);
        let (knobs, stall) = (cfg.knobs.clone(), stall_windows(cfg, t));
        let (stop, over, live) = (&self.stop, &self.over, &self.live);
        if let Some(w) = &self.workers {
            // The NAPI thread is worker t: steering after GRO, its own
            // backlog in its loop.
            let me = t as Worker;
            w.register(me);
            let bh = self.rest.bottom_half(w, me, softnet.netdev_budget);
            let stage = SteerStage::new(w.clone(), me, self.rest.full(w));
            return napi_thread(
                t,
                napis,
                stage,
                softnet,
                interrupts,
                idle_poll,
                stop,
                over,
                live,
                Some(bh),
                knobs,
                stall,
            );
        }
        // The same thread, whatever stack it runs.
        macro_rules! napi_thread_with {
            ($stack:expr) => {
                napi_thread(
                    t, napis, $stack, softnet, interrupts, idle_poll, stop, over, live, None,
                    knobs, stall,
                )
            };
        }
        let ip = self.ip;
        // Without a capture or a filter the common ends are their own
        // types, so the whole stack inlines into the poll loop; the rest
        // goes through the `Sinks` enum behind the tap.
        match (cfg.stack, cap, cfg.filter.clone()) {
            (StackKind::Sink, None, None) => napi_thread_with!(IpStage::new(ip, Sink)),
            (StackKind::Rxdrop, None, None) => napi_thread_with!(RxDrop),
            (StackKind::Sink, None, Some(f)) => {
                napi_thread_with!(IpStage::with_filter(ip, f, Sink))
            }
            (k, w, Some(f)) => napi_thread_with!(IpStage::with_filter(
                ip,
                f,
                Tap {
                    inner: Sinks::of(k),
                    w
                }
            )),
            (k, w, None) => napi_thread_with!(IpStage::new(
                ip,
                Tap {
                    inner: Sinks::of(k),
                    w
                }
            )),
        }
    }
}

/// The measured window: tick every `cfg.tick` until the duration passes,
/// the source is done or a stop is asked for. Returns its length.
fn run_window(
    cfg: &RunConfig,
    live: &Mutex<Live>,
    workers: Option<&Workers>,
    source_done: Option<Arc<AtomicBool>>,
    on_tick: &mut dyn FnMut(&Tick),
) -> Duration {
    let start = Instant::now();
    let mut next = start + cfg.tick;
    let end = start + cfg.duration;
    // Wake at least every 10 ms to see a replay end.
    let poll = Duration::from_millis(10);
    loop {
        let now = Instant::now();
        if now >= end
            || source_done
                .as_ref()
                .is_some_and(|d| d.load(Ordering::Acquire))
            || cfg.stop.as_ref().is_some_and(|d| d.load(Ordering::Acquire))
        {
            break;
        }
        thread::sleep(next.min(end).saturating_duration_since(now).min(poll));
        if Instant::now() >= next {
            next += cfg.tick;
            on_tick(&tick(live, start, workers));
        }
    }
    start.elapsed()
}

/// The workers' reports, the NAPI threads' first, then the pure workers'
/// once joined; the order at delivery and accelerated RFS.
fn steer_out<Q: RxQueue>(
    w: &Workers,
    outs: &[ThreadOut<Q>],
    pure: Vec<(Worker, thread::JoinHandle<crate::steer::WorkerCounters>)>,
) -> Result<SteerOut, RunError> {
    let mut steer = SteerOut::default();
    for (t, o) in outs.iter().enumerate() {
        let c = o.worker.unwrap_or_default();
        steer.workers.push(w.report(t as Worker, &c));
    }
    for (id, h) in pure {
        let c = h
            .join()
            .map_err(|_| RunError::Thread("worker thread panicked".into()))?;
        steer.workers.push(w.report(id, &c));
    }
    steer.order = Some(w.order_report());
    steer.accel = w.accel_report();
    Ok(steer)
}

pub(super) fn tick(live: &Mutex<Live>, start: Instant, workers: Option<&Workers>) -> Tick {
    let l = lock(live);
    let mut napi = NapiStats::default();
    for (_, n, _) in &l.queues {
        napi.merge(n);
    }
    // What the workers share (backlog columns, wakeups); their threads'
    // own counters (time_squeeze, the path's) come with the report.
    let workers = workers.map_or_else(Vec::new, |w| {
        (0..w.len())
            .map(|id| w.report(id as Worker, &Default::default()))
            .collect()
    });
    Tick {
        elapsed: start.elapsed(),
        napi,
        device: sum_device(l.queues.iter().map(|q| q.2)),
        softnet: l.softnet,
        queues: l.queues.clone(),
        workers,
    }
}
