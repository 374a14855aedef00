//! The receive buffer's autotuning, as `tcp_input.c` has it (dynamic
//! right-sizing): the receiver measures its RTT (`tcp_rcv_rtt_measure`,
//! `tcp_rcv_rtt_measure_ts`), counts what the program read in each RTT
//! (`tcp_rcv_space_adjust`), and grows `sk_rcvbuf` and the window clamp
//! so that the sender may double its rate (`tcp_rcvbuf_grow`), up to
//! `tcp_rmem[2]`; the advertised window follows through `rcv_ssthresh`
//! (`tcp_grow_window`). A program that set `SO_RCVBUF` keeps its size.
//!
//! rxpath queues payload bytes without an skb's overhead, so it keeps
//! the kernel's default payload-to-memory ratio (`scaling_ratio` 128 of
//! 256: half the buffer is window) and never re-measures it: windows are
//! what the kernel offers before its first ratio measure.

use crate::conn::{Conn, TCP_INIT_CWND};
use crate::ctx::Ctx;
use crate::seq::before;
use crate::time::Nanos;

/// `TCP_RMEM_TO_WIN_SCALE`.
const RMEM_TO_WIN_SCALE: u32 = 8;
/// `TCP_DEFAULT_SCALING_RATIO`: half of a buffer is window.
const SCALING_RATIO: u64 = 1 << (RMEM_TO_WIN_SCALE - 1);
/// `tcp_app_win`'s default: no share of the window kept for the program.
const TCP_APP_WIN: u32 = 31;
const US: Nanos = 1_000;
const MS: Nanos = 1_000_000;

/// The knobs autotuning reads (`tcp_moderate_rcvbuf`,
/// `tcp_rcvbuf_low_rtt`, `tcp_rmem[2]`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tune {
    moderate: bool,
    low_rtt_us: u32,
    rmem_max: u32,
}

impl Tune {
    pub(crate) fn of(cfg: &crate::config::TcpConfig) -> Self {
        Tune {
            moderate: cfg.tcp_moderate_rcvbuf,
            low_rtt_us: cfg.tcp_rcvbuf_low_rtt,
            rmem_max: cfg.tcp_rmem[2],
        }
    }
}

/// `tcp_win_from_space`.
fn win_from_space(space: u32) -> u32 {
    ((space as u64 * SCALING_RATIO) >> RMEM_TO_WIN_SCALE) as u32
}

/// `tcp_space_from_win`.
fn space_from_win(win: u64) -> u64 {
    (win << RMEM_TO_WIN_SCALE) / SCALING_RATIO
}

impl Conn {
    /// `tp->advmss` as the kernel keeps it once established: less the
    /// timestamp option when one is agreed (what `tcpi_advmss` says).
    fn advmss_ts(&self) -> u32 {
        self.advmss - (self.tcp_header_len() - 20)
    }

    /// Free receive space as a window (`tcp_space`): the buffer's window
    /// less what is queued (payload bytes, which the kernel counts at
    /// twice their size with its default ratio).
    pub(crate) fn free_space(&self) -> u32 {
        let queued = self.rcvq.len() + self.ofo.iter().map(|(_, d)| d.len()).sum::<usize>();
        (win_from_space(self.sk_rcvbuf) as usize).saturating_sub(queued) as u32
    }

    /// `tcp_full_space`.
    fn full_space(&self) -> u32 {
        win_from_space(self.sk_rcvbuf)
    }

    /// `tcp_init_buffer_space`, as the connection becomes established:
    /// the clamp within the buffer less a segment, the first measure.
    pub(crate) fn init_buffer_space(&mut self, now: Nanos) {
        self.rcvq_space.time = now;
        self.rcvq_space.copied = self.copied;
        let maxwin = self.full_space();
        let advmss = self.advmss_ts();
        if self.window_clamp >= maxwin {
            self.window_clamp = maxwin;
            if maxwin > 4 * advmss {
                self.window_clamp = (maxwin - (maxwin >> TCP_APP_WIN)).max(4 * advmss);
            }
        }
        // Force reservation of one segment.
        if self.window_clamp > 2 * advmss && self.window_clamp + advmss > maxwin {
            self.window_clamp = (2 * advmss).max(maxwin.saturating_sub(advmss));
        }
        self.rcv_ssthresh = self.rcv_ssthresh.min(self.window_clamp);
        self.rcvq_space.space = self
            .rcv_ssthresh
            .min(self.rcv_wnd)
            .min(TCP_INIT_CWND * advmss);
    }

    /// `tcp_rcv_rtt_update`: a smaller sample is taken at once; a larger
    /// one only from timestamps (`win_dep` false), smoothed by an
    /// eighth, and only with nothing waiting for the program.
    fn rcv_rtt_update(&mut self, sample_us: u32, win_dep: bool) {
        let old = self.rcv_rtt.rtt_us;
        let m = sample_us.saturating_mul(8);
        let new = if old == 0 || m < old {
            m
        } else {
            if win_dep || !self.rcvq.is_empty() {
                return;
            }
            // A peer chooses the echo a sample comes from: no wrap.
            (old - (old >> 3)).saturating_add(sample_us)
        };
        self.rcv_rtt.rtt_us = new;
    }

    /// `tcp_rcv_rtt_measure`: the time a window takes to arrive, for each
    /// in-order data segment.
    pub(crate) fn rcv_rtt_measure(&mut self, now: Nanos) {
        if self.rcv_rtt.time != 0 {
            if before(self.rcv_nxt, self.rcv_rtt.seq) {
                return;
            }
            let us = (now.saturating_sub(self.rcv_rtt.time) / US).max(1);
            self.rcv_rtt_update(us.min(u32::MAX as u64) as u32, true);
        }
        self.rcv_rtt.seq = self.rcv_nxt.wrapping_add(self.rcv_wnd);
        self.rcv_rtt.time = now.max(1);
    }

    /// `tcp_rcv_rtt_measure_ts`: the echoed timestamp of a full-sized
    /// data segment, once per echo; a millisecond clock's 0 is no sample.
    pub(crate) fn rcv_rtt_measure_ts(&mut self, now: Nanos, seg_len: u32) {
        if self.rcv_tsecr == self.rcv_rtt_last_tsecr {
            return;
        }
        self.rcv_rtt_last_tsecr = self.rcv_tsecr;
        if seg_len < self.ack.rcv_mss {
            return;
        }
        let delta = self.ts_val(now).wrapping_sub(self.rcv_tsecr);
        if delta == 0 || delta >= i32::MAX as u32 / 1000 {
            return;
        }
        self.rcv_rtt_update(delta * (MS / US) as u32, false);
    }

    /// `tcp_grow_window` for an in-order segment of `len` bytes: the
    /// window's soft cap grows by two segments (at least twice the
    /// segment) toward the clamp and the free space. rxpath's queue has
    /// no skb overhead, so check #2 always passes.
    pub(crate) fn grow_window(&mut self, len: u32) {
        if len < 128 {
            return;
        }
        let room = self.window_clamp.min(self.free_space()) as i64 - self.rcv_ssthresh as i64;
        if room <= 0 {
            return;
        }
        let incr = (2 * self.advmss_ts()).max(2 * len);
        self.rcv_ssthresh += (room as u32).min(incr);
        self.ack.quick |= 1;
    }

    /// `tcp_rcv_space_adjust`, after each read: once a receiver RTT has
    /// passed since the last measure, what the program took in it (less
    /// what still waits) grows the buffer if it beat the last RTT's.
    pub(crate) fn rcv_space_adjust(&mut self, tune: Tune, now: Nanos) {
        if self.rcv_rtt.rtt_us == 0 {
            return;
        }
        let time = now.saturating_sub(self.rcvq_space.time);
        if time < (self.rcv_rtt.rtt_us >> 3) as u64 * US {
            return;
        }
        let copied =
            self.copied.wrapping_sub(self.rcvq_space.copied) as i64 - self.rcvq.len() as i64;
        if copied > self.rcvq_space.space as i64 {
            self.rcvbuf_grow(tune, copied.min(u32::MAX as i64) as u32);
        }
        self.rcvq_space.copied = self.copied;
        self.rcvq_space.time = now;
    }

    /// `tcp_rcvbuf_grow`: room for twice what was read in an RTT, plus
    /// what lets a sender in slow start double again (a fraction of it
    /// below `tcp_rcvbuf_low_rtt`), plus the out-of-order span; the
    /// buffer only grows, to `tcp_rmem[2]` at most.
    pub(crate) fn rcvbuf_grow(&mut self, tune: Tune, newval: u32) {
        let old = self.rcvq_space.space;
        self.rcvq_space.space = newval;
        if !tune.moderate || self.rcvbuf_locked {
            return;
        }
        let mut rcvwin = (newval as u64) << 1;
        let rtt_us = (self.rcv_rtt.rtt_us >> 3) as u64;
        let grow = if rtt_us < tune.low_rtt_us as u64 {
            rcvwin * rtt_us / tune.low_rtt_us as u64
        } else {
            (rcvwin << 1).saturating_mul(newval.saturating_sub(old) as u64) / old.max(1) as u64
        };
        rcvwin = rcvwin.saturating_add(grow);
        // The out-of-order span: to the end furthest ahead.
        let span = self
            .ofo
            .iter()
            .map(|(s, d)| s.wrapping_add(d.len() as u32).wrapping_sub(self.rcv_nxt))
            .filter(|&n| n < 1 << 31)
            .max();
        rcvwin = rcvwin.saturating_add(span.unwrap_or(0) as u64);
        let rcvbuf = space_from_win(rcvwin).min(tune.rmem_max as u64) as u32;
        if rcvbuf > self.sk_rcvbuf {
            self.sk_rcvbuf = rcvbuf;
            self.window_clamp = win_from_space(rcvbuf);
        }
    }

    /// `tcp_data_queue_ofo`'s growth after a segment of `len` bytes was
    /// kept: the window (SACK flows), and the buffer for the span out of
    /// order (not for a child not yet accepted, nor a connection the
    /// program let go of: `if (sk->sk_socket)`).
    pub(crate) fn grow_after_ofo(&mut self, ctx: &Ctx<'_>, len: u32) {
        if self.sack_ok {
            self.grow_window(len);
        }
        if self.has_socket() {
            let space = self.rcvq_space.space;
            self.rcvbuf_grow(Tune::of(ctx.cfg), space);
        }
    }
}
