//! pcap files: replay one through the simulated NIC as if it arrived on the
//! wire, and write any point of the path to a file tcpdump and Wireshark
//! open. The file format is the `pcap-file` crate's.

use crate::sim::SimPort;
use pcap_file::pcap::{PcapPacket, PcapReader, PcapWriter};
use rxpath_wire::toeplitz::Toeplitz;
use std::fs::File;
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

impl Trace {
    /// Read a pcap file (Ethernet link type).
    pub fn load(path: &Path) -> io::Result<Trace> {
        let f = File::open(path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        let mut r = PcapReader::new(BufReader::new(f)).map_err(pcap_err)?;
        let mut packets = Vec::new();
        let mut first = None;
        while let Some(p) = r.next_packet() {
            let p = p.map_err(pcap_err)?;
            let t0 = *first.get_or_insert(p.timestamp);
            packets.push((p.timestamp.saturating_sub(t0), p.data.into_owned()));
        }
        Ok(Trace { packets })
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

/// A pcap writer for frames, possibly in several parts (a GRO chain).
#[derive(Debug)]
pub struct Writer {
    w: PcapWriter<BufWriter<File>>,
    buf: Vec<u8>,
}

impl Writer {
    /// Create (truncate) `path`.
    pub fn create(path: &Path) -> io::Result<Writer> {
        let f = File::create(path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        Ok(Writer {
            w: PcapWriter::new(BufWriter::new(f)).map_err(pcap_err)?,
            buf: Vec::new(),
        })
    }

    /// Write one packet made of `parts`, stamped `ts`.
    pub fn write(&mut self, ts: Duration, parts: &[&[u8]]) -> io::Result<()> {
        self.buf.clear();
        for p in parts {
            self.buf.extend_from_slice(p);
        }
        let pkt = PcapPacket::new(ts, self.buf.len() as u32, &self.buf);
        self.w.write_packet(&pkt).map_err(pcap_err)?;
        Ok(())
    }

    /// Flush and close the file.
    pub fn finish(self) -> io::Result<()> {
        use std::io::Write;
        self.w.into_writer().flush()
    }
}

impl SimPort {
    /// Producer thread body for a pcap replay: inject the trace `loops`
    /// times (0 = until `stop`), at the recorded pacing or as fast as
    /// possible. The RX hash is the Toeplitz hash of the packet's flow, so
    /// RSS spreads flows as a NIC would. Returns the packets offered.
    pub fn run_trace(&mut self, trace: &Trace, loops: u64, paced: bool, stop: &AtomicBool) -> u64 {
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
                if sent.is_multiple_of(32) || paced {
                    self.flush(start.elapsed().as_nanos() as u64 + 1);
                }
            }
            round += 1;
        }
        self.flush(start.elapsed().as_nanos() as u64 + 1);
        sent
    }
}
