//! CUBIC with HyStart, the kernel's default congestion control
//! (`net/ipv4/tcp_cubic.c`), with its integer arithmetic: the cube root
//! by table and one Newton step, time in jiffies (HZ 1000 here) and in
//! 1/1024 s, the TCP-friendly region, fast convergence.

use crate::seq::after;
use crate::time::Nanos;

/// `BICTCP_BETA_SCALE`.
const BETA_SCALE: u32 = 1024;
/// `beta`: the window after a loss, 717/1024 ≈ 0.7.
const BETA: u32 = 717;
/// `bic_scale`: CUBIC's C, 41/1024 ≈ 0.04 (times 10 below).
const BIC_SCALE: u64 = 41;
/// `BICTCP_HZ`: time in 1/1024 s.
const BICTCP_HZ: u32 = 10;
/// Jiffies per second: rxpath's timers are in milliseconds.
const HZ: u64 = 1000;
/// `hystart_low_window`.
const HYSTART_LOW_WINDOW: u32 = 16;
/// `hystart_ack_delta_us`.
const HYSTART_ACK_DELTA_US: u32 = 2000;
/// `HYSTART_MIN_SAMPLES`.
const HYSTART_MIN_SAMPLES: u32 = 8;
/// `HYSTART_DELAY_MIN`, `HYSTART_DELAY_MAX` (µs).
const HYSTART_DELAY_MIN: u32 = 4000;
const HYSTART_DELAY_MAX: u32 = 16000;

/// `beta_scale`: the TCP-friendly window's growth per ACKed window.
const FRIENDLY_BETA_SCALE: u32 = 8 * (BETA_SCALE + BETA) / 3 / (BETA_SCALE - BETA);
/// `cube_rtt_scale`.
const CUBE_RTT_SCALE: u64 = BIC_SCALE * 10;
/// `cube_factor`: 2^(10 + 3·BICTCP_HZ) / (bic_scale·10).
const CUBE_FACTOR: u64 = (1u64 << (10 + 3 * BICTCP_HZ)) / (BIC_SCALE * 10);

/// One connection's CUBIC state (`struct bictcp`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cubic {
    /// ACKs per window increase (`cnt`).
    pub cnt: u32,
    /// The window before the last reduction (`last_max_cwnd`).
    pub last_max_cwnd: u32,
    last_cwnd: u32,
    last_time: u32,
    origin_point: u32,
    k: u32,
    /// The smallest RTT seen, µs (`delay_min`).
    pub delay_min: u32,
    epoch_start: Option<u32>,
    ack_cnt: u32,
    tcp_cwnd: u32,
    /// HyStart ended slow start (`found`).
    pub found: bool,
    round_start: u32,
    end_seq: u32,
    last_ack: u32,
    curr_rtt: u32,
    sample_cnt: u32,
}

/// The parts of the connection CUBIC reads and writes.
pub struct CaView<'a> {
    /// `snd_cwnd`.
    pub cwnd: &'a mut u32,
    /// `snd_ssthresh`.
    pub ssthresh: &'a mut u32,
    /// `snd_cwnd_cnt`.
    pub cwnd_cnt: &'a mut u32,
    /// `snd_una`, `snd_nxt`.
    pub snd_una: u32,
    /// See `snd_una`.
    pub snd_nxt: u32,
    /// The pacing rate, bytes/s (HyStart's ACK-delay cushion).
    pub pacing_rate: u64,
    /// Now.
    pub now: Nanos,
}

fn jiffies(now: Nanos) -> u32 {
    (now / (1_000_000_000 / HZ)) as u32
}

fn clock_us(now: Nanos) -> u32 {
    (now / 1000) as u32
}

/// `cubic_root`: a table lookup and one Newton-Raphson step, as the
/// kernel computes it (its rounding is part of the behaviour).
pub fn cubic_root(a: u64) -> u32 {
    const V: [u8; 64] = [
        0, 54, 54, 54, 118, 118, 118, 118, 123, 129, 134, 138, 143, 147, 151, 156, 157, 161, 164,
        168, 170, 173, 176, 179, 181, 185, 187, 190, 192, 194, 197, 199, 200, 202, 204, 206, 209,
        211, 213, 215, 217, 219, 221, 222, 224, 225, 227, 229, 231, 232, 234, 236, 237, 239, 240,
        242, 244, 245, 246, 248, 250, 251, 252, 254,
    ];
    let b = 64 - a.leading_zeros();
    if b < 7 {
        return (V[a as usize] as u32 + 35) >> 6;
    }
    let b = ((b * 84) >> 8) - 1;
    let shift = (a >> (b * 3)) as usize;
    let mut x = ((V[shift.min(63)] as u32 + 10) << b) >> 6;
    let d = (x as u64) * (x as u64 - 1);
    x = 2 * x + (a / d.max(1)) as u32;
    (x * 341) >> 10
}

impl Cubic {
    /// `bictcp_reset`.
    pub fn reset(&mut self) {
        *self = Cubic {
            round_start: self.round_start,
            end_seq: self.end_seq,
            last_ack: self.last_ack,
            curr_rtt: self.curr_rtt,
            sample_cnt: self.sample_cnt,
            ..Cubic::default()
        };
    }

    /// `bictcp_hystart_reset`: a new round starts now.
    pub fn hystart_reset(&mut self, now: Nanos, snd_nxt: u32) {
        self.round_start = clock_us(now);
        self.last_ack = self.round_start;
        self.end_seq = snd_nxt;
        self.curr_rtt = u32::MAX;
        self.sample_cnt = 0;
    }

    /// `cubictcp_init`.
    pub fn init(&mut self, now: Nanos, snd_nxt: u32) {
        *self = Cubic::default();
        self.hystart_reset(now, snd_nxt);
    }

    /// `cubictcp_cwnd_event(CA_EVENT_TX_START)`: an idle sender's epoch
    /// moves on by the idle time, so the curve resumes where it was.
    pub fn tx_start(&mut self, now: Nanos, lsndtime: Nanos) {
        let now_j = jiffies(now);
        let delta = now_j.wrapping_sub(jiffies(lsndtime)) as i32;
        if let Some(e) = self.epoch_start {
            if delta > 0 {
                let mut e = e.wrapping_add(delta as u32);
                if after(e, now_j) {
                    e = now_j;
                }
                self.epoch_start = Some(e);
            }
        }
    }

    /// `cubictcp_recalc_ssthresh`: the window after a loss, with fast
    /// convergence.
    pub fn recalc_ssthresh(&mut self, cwnd: u32) -> u32 {
        self.epoch_start = None;
        if cwnd < self.last_max_cwnd {
            self.last_max_cwnd = cwnd * (BETA_SCALE + BETA) / (2 * BETA_SCALE);
        } else {
            self.last_max_cwnd = cwnd;
        }
        (cwnd * BETA / BETA_SCALE).max(2)
    }

    /// `cubictcp_state(TCP_CA_Loss)`.
    pub fn on_loss_state(&mut self, now: Nanos, snd_nxt: u32) {
        self.reset();
        self.hystart_reset(now, snd_nxt);
    }

    /// `cubictcp_acked`: an RTT sample for the minimum delay and HyStart.
    pub fn acked(&mut self, v: &mut CaView<'_>, rtt_us: u64) {
        if let Some(e) = self.epoch_start {
            if (jiffies(v.now).wrapping_sub(e) as i32) < HZ as i32 {
                return;
            }
        }
        let delay = (rtt_us.min(u32::MAX as u64) as u32).max(1);
        if self.delay_min == 0 || self.delay_min > delay {
            self.delay_min = delay;
        }
        if !self.found && *v.cwnd < *v.ssthresh {
            self.hystart_update(v, delay);
        }
    }

    fn hystart_update(&mut self, v: &mut CaView<'_>, delay: u32) {
        if after(v.snd_una, self.end_seq) {
            self.hystart_reset(v.now, v.snd_nxt);
        }
        if *v.cwnd < HYSTART_LOW_WINDOW {
            return;
        }
        let now = clock_us(v.now);
        if (now.wrapping_sub(self.last_ack) as i32) <= HYSTART_ACK_DELTA_US as i32 {
            self.last_ack = now;
            // No pacing: an ACK train past half the minimum delay.
            let threshold = self
                .delay_min
                .saturating_add(hystart_ack_delay(v.pacing_rate))
                >> 1;
            if (now.wrapping_sub(self.round_start) as i32) > threshold as i32 {
                self.found = true;
                *v.ssthresh = *v.cwnd;
            }
        }
        if self.curr_rtt > delay {
            self.curr_rtt = delay;
        }
        if self.sample_cnt < HYSTART_MIN_SAMPLES {
            self.sample_cnt += 1;
        } else {
            let thresh = (self.delay_min >> 3).clamp(HYSTART_DELAY_MIN, HYSTART_DELAY_MAX);
            if self.curr_rtt > self.delay_min.saturating_add(thresh) {
                self.found = true;
                *v.ssthresh = *v.cwnd;
            }
        }
    }

    /// `cubictcp_cong_avoid` after the caller's `tcp_is_cwnd_limited`:
    /// slow start, then the cubic curve.
    pub fn cong_avoid(&mut self, v: &mut CaView<'_>, mut acked: u32) {
        if *v.cwnd < *v.ssthresh {
            acked = slow_start(v, acked);
            if acked == 0 {
                return;
            }
        }
        self.update(*v.cwnd, acked, v.now);
        cong_avoid_ai(v, self.cnt, acked);
    }

    /// `bictcp_update`.
    fn update(&mut self, cwnd: u32, acked: u32, now: Nanos) {
        let now_j = jiffies(now);
        self.ack_cnt = self.ack_cnt.wrapping_add(acked);
        if self.last_cwnd == cwnd && (now_j.wrapping_sub(self.last_time) as i32) <= (HZ / 32) as i32
        {
            return;
        }
        if !(self.epoch_start.is_some() && now_j == self.last_time) {
            self.last_cwnd = cwnd;
            self.last_time = now_j;
            if self.epoch_start.is_none() {
                self.epoch_start = Some(now_j);
                self.ack_cnt = acked;
                self.tcp_cwnd = cwnd;
                if self.last_max_cwnd <= cwnd {
                    self.k = 0;
                    self.origin_point = cwnd;
                } else {
                    self.k = cubic_root(CUBE_FACTOR * (self.last_max_cwnd - cwnd) as u64);
                    self.origin_point = self.last_max_cwnd;
                }
            }
            let epoch = self.epoch_start.unwrap_or(now_j);
            let mut t = now_j.wrapping_sub(epoch) as i32 as i64 as u64;
            t = t.wrapping_add((self.delay_min as u64).div_ceil(1_000_000 / HZ));
            t = t.wrapping_shl(BICTCP_HZ);
            t /= HZ;
            let k = self.k as u64;
            let offs = t.abs_diff(k);
            // u64 arithmetic that wraps as the kernel's does past ~347 s.
            let cube = CUBE_RTT_SCALE
                .wrapping_mul(offs)
                .wrapping_mul(offs)
                .wrapping_mul(offs);
            let delta = (cube >> (10 + 3 * BICTCP_HZ)) as u32;
            let target = if t < k {
                self.origin_point.wrapping_sub(delta)
            } else {
                self.origin_point.wrapping_add(delta)
            };
            self.cnt = if target > cwnd {
                cwnd / (target - cwnd)
            } else {
                100 * cwnd
            };
            if self.last_max_cwnd == 0 && self.cnt > 20 {
                self.cnt = 20;
            }
        }
        // The TCP-friendly region.
        let delta = (cwnd * FRIENDLY_BETA_SCALE) >> 3;
        while delta > 0 && self.ack_cnt > delta {
            self.ack_cnt -= delta;
            self.tcp_cwnd += 1;
        }
        if self.tcp_cwnd > cwnd {
            let max_cnt = cwnd / (self.tcp_cwnd - cwnd);
            if self.cnt > max_cnt {
                self.cnt = max_cnt;
            }
        }
        self.cnt = self.cnt.max(2);
    }
}

/// `hystart_ack_delay`: up to 1 ms for four GSO packets at the pacing rate.
fn hystart_ack_delay(rate: u64) -> u32 {
    if rate == 0 {
        return 0;
    }
    (65536u64 * 4 * 1_000_000 / rate).min(1000) as u32
}

/// `tcp_slow_start`: grow by what was ACKed up to ssthresh; return the
/// ACKs left over for congestion avoidance.
pub fn slow_start(v: &mut CaView<'_>, acked: u32) -> u32 {
    let cwnd = (*v.cwnd + acked).min(*v.ssthresh);
    let left = acked - (cwnd - *v.cwnd);
    *v.cwnd = cwnd;
    left
}

/// `tcp_cong_avoid_ai`: one more segment per `w` ACKed.
pub fn cong_avoid_ai(v: &mut CaView<'_>, w: u32, acked: u32) {
    let w = w.max(1);
    if *v.cwnd_cnt >= w {
        *v.cwnd_cnt = 0;
        *v.cwnd += 1;
    }
    *v.cwnd_cnt += acked;
    if *v.cwnd_cnt >= w {
        let delta = *v.cwnd_cnt / w;
        *v.cwnd_cnt -= delta * w;
        *v.cwnd += delta;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cube_root_rounds_as_the_kernels() {
        assert_eq!(cubic_root(0), 0);
        assert_eq!(cubic_root(8), 2);
        assert_eq!(cubic_root(27), 3);
        assert_eq!(cubic_root(1000), 10);
        // Large values land within the kernel's 0.2 % of the true root.
        for a in [1u64 << 30, 123_456_789_012, CUBE_FACTOR * 10] {
            let r = cubic_root(a) as f64;
            let t = (a as f64).cbrt();
            assert!((r - t).abs() / t < 0.01, "{a}: {r} vs {t}");
        }
    }

    #[test]
    fn a_loss_sets_ssthresh_to_beta_and_remembers_wmax() {
        let mut c = Cubic::default();
        assert_eq!(c.recalc_ssthresh(100), 70);
        assert_eq!(c.last_max_cwnd, 100);
        // Fast convergence: a second loss below Wmax lowers it further.
        assert_eq!(c.recalc_ssthresh(70), 49);
        assert_eq!(c.last_max_cwnd, 70 * (1024 + 717) / 2048);
    }

    #[test]
    fn slow_start_stops_at_ssthresh_and_hands_the_rest_on() {
        let (mut cwnd, mut ss, mut cnt) = (10, 14, 0);
        let mut v = CaView {
            cwnd: &mut cwnd,
            ssthresh: &mut ss,
            cwnd_cnt: &mut cnt,
            snd_una: 0,
            snd_nxt: 0,
            pacing_rate: 0,
            now: 0,
        };
        assert_eq!(slow_start(&mut v, 6), 2);
        assert_eq!(*v.cwnd, 14);
    }
}
