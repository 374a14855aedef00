//! Capture files: replay one (classic pcap or pcapng) through the simulated
//! NIC as if it arrived on the wire, and write any point of the path to a
//! file tcpdump and Wireshark open (pcapng when the name ends in
//! `.pcapng`). The formats are the `pcap-file` crate's.

use crate::sim::SimPort;
use pcap_file::pcap::{PcapPacket, PcapReader, PcapWriter};
use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionBlock;
use pcap_file::pcapng::{Block, PcapNgReader, PcapNgWriter};
use pcap_file::DataLink;
use rxpath_wire::toeplitz::Toeplitz;
use std::fs::File;
use std::io::Read;
use std::io::{self, BufReader, BufWriter};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// A pcap file loaded in memory.
#[derive(Debug, Clone, Default)]
pub struct Trace {
    /// (timestamp since the first packet, frame bytes).
    pub packets: Vec<(Duration, Vec<u8>)>,
}

fn pcap_err(e: pcap_file::PcapError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e.to_string())
}

/// The magic number a pcapng file starts with (its Section Header Block).
const PCAPNG_MAGIC: [u8; 4] = [0x0a, 0x0d, 0x0d, 0x0a];

impl Trace {
    /// Read a capture file: classic pcap or pcapng, Ethernet link type
    /// (every pcapng interface is checked). Anything else is an error that
    /// says what the file has.
    pub fn load(path: &Path) -> io::Result<Trace> {
        let named = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", path.display()));
        let f = File::open(path).map_err(named)?;
        Self::read(BufReader::new(f), &path.display().to_string())
    }

    /// [`Trace::load`] from any reader (`name` goes in the errors).
    pub fn read(mut r: impl Read, name: &str) -> io::Result<Trace> {
        let bad =
            |what: String| io::Error::new(io::ErrorKind::InvalidData, format!("{name}: {what}"));
        let mut magic = Vec::with_capacity(4);
        (&mut r)
            .take(4)
            .read_to_end(&mut magic)
            .map_err(|e| io::Error::new(e.kind(), format!("{name}: {e}")))?;
        let r = io::Cursor::new(magic.clone()).chain(r);
        if magic == PCAPNG_MAGIC {
            return Self::read_pcapng(r, &bad);
        }
        let mut r = PcapReader::new(r).map_err(|e| bad(e.to_string()))?;
        let dl = r.header().datalink;
        if dl != DataLink::ETHERNET {
            return Err(bad(format!(
                "link type {dl:?}, not Ethernet: rxpath replays Ethernet frames only"
            )));
        }
        let mut packets = Vec::new();
        let mut first = None;
        while let Some(p) = r.next_packet() {
            let p = p.map_err(|e| bad(e.to_string()))?;
            let t0 = *first.get_or_insert(p.timestamp);
            packets.push((p.timestamp.saturating_sub(t0), p.data.into_owned()));
        }
        Ok(Trace { packets })
    }

    fn read_pcapng(r: impl Read, bad: &dyn Fn(String) -> io::Error) -> io::Result<Trace> {
        let mut r = PcapNgReader::new(r).map_err(|e| bad(e.to_string()))?;
        let mut packets = Vec::new();
        let mut first = None;
        let mut iface = 0u32;
        while let Some(b) = r.next_block() {
            let b = b.map_err(|e| bad(e.to_string()))?;
            let (ts, data) = match b {
                Block::InterfaceDescription(idb) => {
                    if idb.linktype != DataLink::ETHERNET {
                        return Err(bad(format!(
                            "interface {iface} has link type {:?}, not Ethernet: rxpath replays Ethernet frames only",
                            idb.linktype
                        )));
                    }
                    iface += 1;
                    continue;
                }
                Block::EnhancedPacket(p) => (Some(p.timestamp), p.data.into_owned()),
                Block::SimplePacket(p) => (None, p.data.into_owned()),
                // The obsolete Packet Block: its timestamp in µs (the default
                // resolution).
                Block::Packet(p) => (
                    Some(Duration::from_micros(p.timestamp)),
                    p.data.into_owned(),
                ),
                _ => continue,
            };
            // A simple packet block has no time: it follows the last one.
            let ts = ts.unwrap_or_else(|| {
                let last: Option<&(Duration, Vec<u8>)> = packets.last();
                last.map_or(Duration::ZERO, |p| p.0) + first.unwrap_or(Duration::ZERO)
            });
            let t0 = *first.get_or_insert(ts);
            packets.push((ts.saturating_sub(t0), data));
        }
        Ok(Trace { packets })
    }

    /// True if the first TCP/UDP packets of the trace (up to 32, at least
    /// 4) all carry a partial checksum: the pseudo-header sum, as a sender
    /// with checksum offload leaves it and a capture on that host records
    /// it (a veth, or tcpdump on the sender).
    pub fn partial_checksums(&self) -> bool {
        let mut seen = 0;
        for (_, f) in &self.packets {
            let Ok(h) = rxpath_wire::parse(f) else {
                continue;
            };
            let at = match h.l4 {
                rxpath_wire::L4::Tcp { .. } => h.l4_offset as usize + 16,
                rxpath_wire::L4::Udp => h.l4_offset as usize + 6,
                _ => continue,
            };
            if h.fragment {
                continue;
            }
            let Some(b) = f.get(at..at + 2) else { continue };
            let field = u16::from_be_bytes([b[0], b[1]]);
            let l4_len = (h.payload_offset + h.payload_len - h.l4_offset) as u32;
            let proto = if matches!(h.l4, rxpath_wire::L4::Tcp { .. }) {
                6
            } else {
                17
            };
            let pseudo =
                rxpath_wire::checksum::pseudo_header(h.flow.src(), h.flow.dst(), proto, l4_len);
            if field == 0 || field != rxpath_wire::checksum::fold(pseudo) {
                return false;
            }
            seen += 1;
            if seen == 32 {
                break;
            }
        }
        seen >= 4
    }

    /// Write frames to a pcap file, `gap` apart.
    pub fn save(path: &Path, frames: &[Vec<u8>], gap: Duration) -> io::Result<()> {
        let mut w = Writer::create(path)?;
        for (i, f) in frames.iter().enumerate() {
            w.write(gap * i as u32, &[f])?;
        }
        w.finish()
    }
}

/// A capture writer for frames, possibly in several parts (a GRO chain):
/// classic pcap, or pcapng when the file name ends in `.pcapng`.
pub struct Writer {
    w: Format,
    buf: Vec<u8>,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.w {
            Format::Pcap(_) => "pcap",
            Format::PcapNg(_) => "pcapng",
        };
        f.debug_struct("Writer").field("format", &kind).finish()
    }
}

enum Format {
    Pcap(PcapWriter<BufWriter<File>>),
    PcapNg(PcapNgWriter<BufWriter<File>>),
}

impl Writer {
    /// Create (truncate) `path`; pcapng if it ends in `.pcapng`.
    pub fn create(path: &Path) -> io::Result<Writer> {
        let f = File::create(path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        let ng = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("pcapng"));
        let w = if ng {
            let mut w = PcapNgWriter::new(BufWriter::new(f)).map_err(pcap_err)?;
            w.write_pcapng_block(InterfaceDescriptionBlock {
                linktype: DataLink::ETHERNET,
                snaplen: 0xffff,
                options: vec![],
            })
            .map_err(pcap_err)?;
            Format::PcapNg(w)
        } else {
            Format::Pcap(PcapWriter::new(BufWriter::new(f)).map_err(pcap_err)?)
        };
        Ok(Writer { w, buf: Vec::new() })
    }

    /// Write one packet made of `parts`, stamped `ts`.
    pub fn write(&mut self, ts: Duration, parts: &[&[u8]]) -> io::Result<()> {
        self.buf.clear();
        for p in parts {
            self.buf.extend_from_slice(p);
        }
        match &mut self.w {
            Format::Pcap(w) => {
                let pkt = PcapPacket::new(ts, self.buf.len() as u32, &self.buf);
                w.write_packet(&pkt).map_err(pcap_err)?;
            }
            Format::PcapNg(w) => {
                let epb = EnhancedPacketBlock {
                    interface_id: 0,
                    timestamp: ts,
                    original_len: self.buf.len() as u32,
                    data: std::borrow::Cow::Borrowed(&self.buf),
                    options: vec![],
                };
                w.write_pcapng_block(epb).map_err(pcap_err)?;
            }
        }
        Ok(())
    }

    /// Flush and close the file.
    pub fn finish(self) -> io::Result<()> {
        use std::io::Write;
        match self.w {
            Format::Pcap(w) => w.into_writer().flush(),
            Format::PcapNg(w) => w.into_inner().flush(),
        }
    }
}

/// How a replay offers its packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pace {
    /// As fast as the host takes them: wait for ring space and a free
    /// frame (a file is not a wire), so nothing is lost.
    Lossless,
    /// At the recorded timing, dropping as a NIC does when the host lags.
    Recorded,
    /// At this many packets per second, dropping as a NIC does.
    Pps(u64),
}

impl SimPort {
    /// Producer thread body for a replay: inject the trace `loops` times
    /// (0 = until `stop`) as `pace` says. The RX hash is the Toeplitz hash
    /// of the packet's flow, so RSS spreads flows as a NIC would. Returns
    /// the packets offered.
    pub fn run_trace(&mut self, trace: &Trace, loops: u64, pace: Pace, stop: &AtomicBool) -> u64 {
        let tz = Toeplitz::default();
        let hashes: Vec<u32> = trace
            .packets
            .iter()
            .map(|(_, f)| rxpath_wire::parse(f).map_or(0, |h| tz.hash_flow(&h.flow, h.has_ports())))
            .collect();
        let start = Instant::now();
        let span = trace.packets.last().map_or(Duration::ZERO, |p| p.0) + Duration::from_micros(1);
        let mut sent = 0u64;
        let mut round = 0u64;
        'outer: while loops == 0 || round < loops {
            for (i, (ts, f)) in trace.packets.iter().enumerate() {
                if stop.load(Ordering::Relaxed) {
                    break 'outer;
                }
                if pace == Pace::Lossless {
                    // Wait for room: publish what is placed (the host is
                    // interrupted and drains), take back recycled frames.
                    while !self.has_room(hashes[i]) {
                        if stop.load(Ordering::Relaxed) {
                            break 'outer;
                        }
                        self.flush(start.elapsed().as_nanos() as u64 + 1);
                        std::thread::yield_now();
                    }
                }
                if let Pace::Pps(r) = pace {
                    let due = Duration::from_nanos(
                        (sent as u128 * 1_000_000_000 / r.max(1) as u128) as u64,
                    );
                    while start.elapsed() < due {
                        if stop.load(Ordering::Relaxed) {
                            break 'outer;
                        }
                        self.flush(start.elapsed().as_nanos() as u64 + 1);
                        std::hint::spin_loop();
                    }
                }
                let paced = pace == Pace::Recorded;
                if paced {
                    let due = span * round as u32 + *ts;
                    while start.elapsed() < due {
                        if stop.load(Ordering::Relaxed) {
                            break 'outer;
                        }
                        self.flush(start.elapsed().as_nanos() as u64 + 1);
                        std::hint::spin_loop();
                    }
                }
                let _ = self.inject(f, hashes[i]);
                sent += 1;
                if sent.is_multiple_of(32) || pace != Pace::Lossless {
                    self.flush(start.elapsed().as_nanos() as u64 + 1);
                }
            }
            round += 1;
        }
        self.flush(start.elapsed().as_nanos() as u64 + 1);
        sent
    }
}
