//! `rxpath run`: its options, the run configuration they build, and the
//! command (a line per second, then the report: `report`).

use crate::opts::*;
use crate::report::{describe, json_report, say_how_it_ended, summary, tick_line};
use anyhow::{bail, Result};
use clap::{Args, ValueEnum};
use rxpath_core::gro::Adaptive;
use rxpath_core::napi::BundleMode;
use rxpath_core::softnet::SoftnetConfig;
use rxpath_dev::sim::{Coalesce, Mix, SimConfig, TrafficConfig};
use rxpath_runtime::{GroSettings, IfName, Producer, RunConfig, StackKind, Tick};
use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::limits::{BUSY_POLL_US, GRO_FLUSH_TIMEOUT_NS, NETDEV_BUDGET};

/// Options shared by `run` and the benchmarks.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// The INPUT filter.
    #[command(flatten)]
    pub filt: crate::filter::FilterArgs,
    /// Steering to workers (RPS/RFS, spread).
    #[command(flatten)]
    pub steer: crate::steer::SteerArgs,
    /// A prefix IP input takes as local besides the interface's addresses,
    /// as the kernel's `ip route add local PREFIX` (repeatable).
    #[arg(long, value_name = "PREFIX", value_parser = parse_prefix)]
    pub local_route: Vec<(std::net::IpAddr, u8)>,
    /// RX queues: of the simulated NIC (default 2), or of the interface
    /// to open (default: all its RX queues, /sys/class/net/IF/queues/rx-*).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub queues: Option<u16>,
    /// TCP/UDP checksums: auto trusts what the device verified or marked
    /// partial (a local sender's offload; on AF_XDP over veth/tun/bridge a
    /// partial checksum is known by its value) and verifies the rest;
    /// verify checks every one; trust none.
    #[arg(long, value_parser = clap::value_parser!(rxpath_core::ip::CsumPolicy), default_value = "auto")]
    pub csum: rxpath_core::ip::CsumPolicy,
    /// Number of flows.
    #[arg(long, default_value_t = 64)]
    pub flows: usize,
    /// Flow mix: udp, tcp-bulk, tcp-rr or mixed.
    #[arg(long, default_value = "mixed")]
    pub mix: Mix,
    /// Run time: 5, 5s, 500ms, 1m.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub duration: Duration,
    /// RX bulking: descriptors per bundle (1 = per packet).
    #[arg(long, default_value_t = 16)]
    pub bundle: usize,
    /// Also cut bundles where the RX hash changes.
    #[arg(long)]
    pub split_on_hash: bool,
    /// NAPI weight (packets per poll).
    #[arg(long, default_value_t = 64)]
    pub weight: usize,
    /// net.core.netdev_budget: packets per net_rx_action.
    #[arg(long, default_value_t = 300,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(NETDEV_BUDGET))]
    pub netdev_budget: usize,
    /// net.core.netdev_budget_usecs: time per net_rx_action.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(NETDEV_BUDGET))]
    pub netdev_budget_usecs: u64,
    /// NAPI: interrupt (sleep until woken) or poll (never sleep).
    #[arg(long, value_enum, default_value_t = ModeArg::Interrupt)]
    pub napi: ModeArg,
    /// Receive from a real interface instead of the simulated NIC.
    #[arg(long, value_name = "IF")]
    pub iface: Option<String>,
    /// Replay a pcap file through the simulated NIC instead of generated traffic.
    #[arg(long, value_name = "FILE", conflicts_with = "iface")]
    pub pcap: Option<std::path::PathBuf>,
    /// Times to play --pcap (0: until the run ends).
    #[arg(long, default_value_t = 1)]
    pub loops: u64,
    /// Keep the recorded pacing of --pcap (else as fast as possible).
    #[arg(long)]
    pub paced: bool,
    /// Write packets to a pcap file (tcpdump and Wireshark open it).
    #[arg(long, value_name = "FILE")]
    pub capture: Option<std::path::PathBuf>,
    /// Where --capture taps: rx (every frame NAPI takes, before GRO) or delivered (end of the path, after GRO).
    #[arg(long, value_enum, default_value_t = CaptureArg::Delivered)]
    pub capture_at: CaptureArg,
    /// AF_XDP: what the XDP program takes (ip, ipv4, ipv6, udp, tcp); the rest goes to the kernel.
    #[arg(long, value_enum, default_value_t = XdpTake::Ip)]
    pub xdp_take: XdpTake,
    /// AF_XDP: let the kernel busy-poll each queue for US µs (SO_PREFER_BUSY_POLL, SO_BUSY_POLL).
    #[arg(long, value_name = "US", default_value_t = 0,
          value_parser = clap::builder::RangedU64ValueParser::<u32>::new().range(BUSY_POLL_US))]
    pub xdp_busy_poll: u32,
    /// Backend for --iface: xdp (AF_XDP), packet (AF_PACKET), or auto.
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    pub mode: BackendArg,
    /// thread (producer on another core) or null (engine alone).
    #[arg(long, value_enum, default_value_t = ProducerArg::Thread)]
    pub producer: ProducerArg,
    /// What the end of the path does.
    #[arg(long, value_enum, default_value_t = StackArg::Sink)]
    pub stack: StackArg,
    /// Offered rate in packets per second (default: as fast as possible).
    #[arg(long)]
    pub pps: Option<u64>,
    /// With --pps: the producer thread sleeps until its next batch is due
    /// instead of spinning (it leaves its core to a worker).
    #[arg(long)]
    pub producer_sleeps: bool,
    /// Link flow control on the simulated NIC (802.3x PAUSE): the source
    /// waits, asleep, while the RX ring is full instead of sending packets
    /// the NIC drops as rx_missed (a saturating source that loses nothing).
    #[arg(long)]
    pub pause: bool,
    /// Fault injection (a seeded schedule): garbage=P (a share of frames
    /// of random bytes), lying=P (descriptors whose offset or length runs
    /// past their frame), starve=MS (the simulated NIC's fill ring reads
    /// empty for MS ms, every starve-every=MS on average: rx_no_buffer),
    /// stall=MS (each NAPI thread, and with --steer each other worker, stops
    /// for MS ms every stall-every=MS on average: its ring fills, rx_missed;
    /// a worker's backlog fills, backlog_full), seed=N; e.g. `--fault
    /// garbage=0.01,lying=0.001,stall=2,starve=1`. Each is counted.
    #[arg(long, value_name = "SPEC", value_parser = parse_faults)]
    pub fault: Option<rxpath_dev::sim::Faults>,
    /// Interrupt coalescing: µs after the first packet (ethtool rx-usecs).
    #[arg(long, default_value_t = 8)]
    pub rx_usecs: u32,
    /// Interrupt coalescing: packets (ethtool rx-frames).
    #[arg(long, default_value_t = 128)]
    pub rx_frames: u32,
    /// RX ring entries per queue (power of two).
    #[arg(long, default_value_t = 1024)]
    pub ring: usize,
    /// NAPI threads.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// UDP frame size in bytes (60..=1514).
    #[arg(long, default_value_t = 60)]
    pub udp_size: usize,
    /// Seed of the traffic generator.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Segments a bulk TCP flow sends back to back (a TSO chunk); 1 interleaves all flows.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub burst: u16,
    /// Do not pin threads to cores.
    #[arg(long)]
    pub no_pin: bool,
    /// Interrupt mode: wait for interrupts spinning (idle=poll) instead of
    /// sleeping, so an interrupt is taken within a microsecond.
    #[arg(long)]
    pub idle_poll: bool,
    /// Interrupt mode on an interface: wake the NAPI thread through a
    /// separate interrupt thread per queue (the default: a NAPI thread
    /// waits on its queues' sockets itself, one thread hop less).
    #[arg(long)]
    pub irq_thread: bool,
    /// GRO on every queue's NAPI (the kernel's default is on).
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    pub gro: OnOff,
    /// gro_flush_timeout in ns: keep GRO packets across polls while traffic flows.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(GRO_FLUSH_TIMEOUT_NS))]
    pub gro_flush_timeout: u64,
    /// Adaptive flush timeout: use up to NS for bulk traffic, 0 for request/response.
    #[arg(long, value_name = "NS", value_parser = clap::value_parser!(u64).range(GRO_FLUSH_TIMEOUT_NS))]
    pub gro_adaptive: Option<u64>,
    /// Print the final report as JSON on stdout (per-second lines go to stderr).
    #[arg(long)]
    pub json: bool,
    /// Serve Prometheus metrics at http://ADDR/metrics (loopback port 9464
    /// when given without a value; port 0 picks a free one, printed on
    /// stderr).
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "127.0.0.1:9464")]
    pub metrics: Option<std::net::SocketAddr>,
    /// Keep serving the final metrics this long after the run ends.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub metrics_hold: Option<Duration>,
}

/// A switch.
// Variants as values: a doc comment would become their help text and
// turn the one-line `[possible values: ...]` into a list.
#[allow(missing_docs)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

impl RunArgs {
    /// Build and check the run configuration.
    pub fn config(&self) -> Result<RunConfig> {
        if !self.ring.is_power_of_two() || !(64..=16384).contains(&self.ring) {
            bail!(
                "--ring must be a power of two in 64..=16384, got {}",
                self.ring
            );
        }
        if self.pps == Some(0) {
            bail!("--pps must be > 0");
        }
        let traffic = TrafficConfig {
            flows: self.flows,
            mix: self.mix,
            udp_frame: self.udp_size,
            seed: self.seed,
            stamp: matches!(self.stack, StackArg::Latency),
            burst: self.burst as usize,
            ..TrafficConfig::default()
        };
        let queues = match (self.queues, &self.iface) {
            (Some(q), _) => q as usize,
            (None, Some(name)) => {
                rxpath_runtime::check_iface(name)?;
                rxpath_dev::sys::iface::rx_queues(name)
                    .map_err(|e| anyhow::anyhow!("{name}: counting its RX queues: {e}"))?
                    .min(64)
            }
            (None, None) => 2,
        };
        // Before the steering config, whose workers default to the
        // threads: a bad count is the --threads the user typed.
        if self.threads == 0 || self.threads > queues {
            bail!(
                "--threads {}: must be 1..={queues} (a NAPI thread polls one RX queue or more, \
                 and there are {queues})",
                self.threads
            );
        }
        let sim = SimConfig {
            queues,
            ring_size: self.ring,
            frames_per_queue: self.ring * 2,
            coalesce: Coalesce {
                rx_usecs: self.rx_usecs,
                rx_frames: self.rx_frames,
            },
            sleep_pacing: self.producer_sleeps,
            pause: self.pause,
            faults: self.fault.unwrap_or_default(),
            ..SimConfig::default()
        };
        Ok(RunConfig {
            sim,
            traffic,
            idle_poll: self.idle_poll,
            irq_thread: self.irq_thread,
            weight: self.weight,
            bundle: BundleMode {
                size: self.bundle,
                split_on_hash: self.split_on_hash,
            },
            softnet: SoftnetConfig {
                netdev_budget: self.netdev_budget,
                netdev_budget_usecs: self.netdev_budget_usecs,
            },
            interrupts: matches!(self.napi, ModeArg::Interrupt),
            producer: self.producer()?,
            stack: match self.stack {
                StackArg::Sink => StackKind::Sink,
                StackArg::Rxdrop => StackKind::Rxdrop,
                StackArg::Latency => StackKind::Latency,
            },
            threads: self.threads,
            duration: self.duration,
            tick: Duration::from_secs(1),
            pin: !self.no_pin,
            null_frames: 512,
            null_cold: matches!(self.producer, ProducerArg::NullCold),
            gro: (self.gro == OnOff::On).then_some(GroSettings {
                flush_timeout_ns: self.gro_flush_timeout,
                adaptive: self.gro_adaptive.map(|max_ns| Adaptive {
                    max_ns,
                    ..Adaptive::default()
                }),
            }),
            capture: self.capture.clone(),
            csum: self.csum,
            local_routes: self.local_route.clone(),
            filter: None,
            steer: self.steer.config(self.threads)?,
            stop_worker: self.steer.stop_worker,
            sock_flows: None,
            local_traffic: false,
            stop: None,
            knobs: None,
            xdp_busy_poll_us: self.xdp_busy_poll,
            capture_at: match self.capture_at {
                CaptureArg::Rx => rxpath_runtime::CaptureAt::Rx,
                CaptureArg::Delivered => rxpath_runtime::CaptureAt::Delivered,
            },
            xdp_filter: self.xdp_filter(),
        })
    }

    /// Where the packets come from.
    fn producer(&self) -> Result<Producer, rxpath_runtime::RunError> {
        Ok(match (&self.iface, self.producer) {
            (Some(name), _) => {
                let iface = IfName::new(name)?;
                match self.mode {
                    BackendArg::Packet => Producer::Packet { iface },
                    BackendArg::Xdp => Producer::Xdp {
                        iface,
                        fallback: false,
                    },
                    BackendArg::Auto => Producer::Xdp {
                        iface,
                        fallback: true,
                    },
                }
            }
            (None, _) if self.pcap.is_some() => Producer::Pcap {
                path: self.pcap.clone().unwrap_or_default(),
                loops: self.loops,
                paced: self.paced,
                pps: self.pps,
            },
            (None, ProducerArg::Thread) => Producer::Thread { pps: self.pps },
            (None, ProducerArg::Null | ProducerArg::NullCold) => Producer::Null,
        })
    }

    /// What the XDP program takes (`--xdp-take`).
    fn xdp_filter(&self) -> rxpath_dev::sys::xdp::XdpFilter {
        use rxpath_dev::sys::xdp::XdpFilter;
        let ip = XdpFilter::default();
        match self.xdp_take {
            XdpTake::Ip => ip,
            XdpTake::Ipv4 => XdpFilter { ipv6: false, ..ip },
            XdpTake::Ipv6 => XdpFilter { ipv4: false, ..ip },
            XdpTake::Udp => XdpFilter {
                protocol: Some(17),
                ..ip
            },
            XdpTake::Tcp => XdpFilter {
                protocol: Some(6),
                ..ip
            },
        }
    }
}

/// `rxpath run`: run the path and report.
pub fn run(a: RunArgs) -> Result<ExitCode> {
    let mut cfg = a.config()?;
    let json = a.json;
    let filter = crate::filter::Loaded::load(&a.filt, a.iface.as_deref().unwrap_or("sim0"))?;
    cfg.filter = filter.as_ref().map(|f| f.handle.clone());
    // SIGINT/SIGTERM end the run early: it drains, reports and exits as at
    // the end of its duration.
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        let _ = ctrlc::set_handler(move || stop.store(true, Ordering::Release));
    }
    cfg.stop = Some(stop.clone());
    let readers = crate::steer::Readers::start(&a.steer, &cfg)?;
    let metrics = crate::report::start_metrics(a.metrics)?;
    // Live knobs through a control socket (`rxpath ctl`).
    let knobs = rxpath_runtime::run::RunKnobs::new(&cfg);
    cfg.knobs = Some(knobs.clone());
    let control = crate::ctl::Control::start(crate::ctl::RunKnobSet(
        knobs,
        filter.as_ref().map(|f| f.reload_handles()),
    ))?;
    cfg.sock_flows = readers.as_ref().map(|r| r.table.clone());
    let mut last = Tick::default();
    let header = format!(
        "{}; live knobs: rxpath ctl (socket {})",
        describe(&cfg),
        control.path().display()
    );
    if json {
        eprintln!("{header}");
    } else {
        println!("{header}");
    }
    let report = rxpath_runtime::run(&cfg, |t| {
        let l = tick_line(t, &last);
        if json {
            eprintln!("{l}");
        } else {
            println!("{l}");
            let _ = std::io::stdout().flush();
        }
        if let Some(m) = &metrics {
            m.tick(t);
        }
        last = t.clone();
        if let Some(f) = &filter {
            f.poll_reload();
        }
    })?;
    say_how_it_ended(&report, stop.load(Ordering::Acquire));
    if let Some(r) = readers {
        let moves = r.finish();
        if moves > 0 {
            eprintln!("rxpath: readers moved {moves} time(s) during the run");
        }
    }
    if json {
        let mut v = json_report(&report);
        if let Some(f) = &filter {
            v["filter"] = f.json();
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", summary(&report));
    }
    if let Some(f) = &filter {
        f.finish()?;
    }
    if let Some(m) = &metrics {
        m.finish(&report);
        if let Some(d) = a.metrics_hold {
            let _ = std::io::stdout().flush();
            std::thread::sleep(d);
        }
    }
    Ok(if !report.consistent() {
        ExitCode::from(1)
    } else if report.stopped_early.is_some() {
        // The interface went away or down: the report is complete for what
        // ran, but the run is not what was asked for.
        ExitCode::from(4)
    } else {
        ExitCode::SUCCESS
    })
}
