//! Sending: `tcp_output.c`'s `tcp_write_xmit` (Nagle, the windows, TSO
//! sizing), `tcp_send_ack`, the SYN and SYN-ACK, resets.
//!
//! A segment larger than the MSS leaves as one packet, as the kernel hands
//! a TSO packet to a device that segments (packetdrill's tun sees it so):
//! the device layer below cuts it.

use rxpath_wire::tcp::flags::{ACK, FIN, PSH, RST, SYN};

use crate::conn::{ring_range, Conn, Sent, State, XmitTimer, MS, TCP_DELACK_MAX, TCP_DELACK_MIN};
use crate::ctx::Ctx;
use crate::ctx::Transmit;
use crate::seq::{after, before};
use crate::wire::{build, build_with_tail, OptsOut, SegIn, SegOut};

/// `sk_pacing_shift`: TSO packets hold about 1 ms of the pacing rate.
const PACING_SHIFT: u32 = 10;
/// `sk_gso_max_size` of a device that segments.
const GSO_MAX_SIZE: u64 = 65536;
/// `tcp_tso_rtt_log`.
const TSO_RTT_LOG: u32 = 9;

impl Conn {
    /// The window to advertise, in bytes (`__tcp_select_window`), and
    /// remember it as advertised (`tcp_select_window`).
    pub(crate) fn select_window(&mut self) -> u16 {
        let space = self.free_space();
        let cur = self.receive_window();
        // Never more than the window field can say.
        let mut new = space
            .min(self.rcv_ssthresh)
            .min(self.window_clamp)
            .min(65535 << self.rcv_wscale);
        if self.rcv_wscale > 0 {
            let unit = 1u32 << self.rcv_wscale;
            new = new.div_ceil(unit) * unit;
        }
        // Never shrink the window already offered (RFC 7323 2.4).
        if new < cur {
            new = cur;
        }
        self.rcv_wnd = new;
        self.rcv_wup = self.rcv_nxt;
        (new >> self.rcv_wscale).min(65535) as u16
    }

    /// The window `__tcp_select_window` would offer now, without
    /// advertising it.
    pub(crate) fn window_after_read(&self) -> u32 {
        let mut w = self
            .free_space()
            .min(self.rcv_ssthresh)
            .min(self.window_clamp);
        if self.rcv_wscale > 0 {
            let unit = 1u32 << self.rcv_wscale;
            w = w.div_ceil(unit) * unit;
        }
        w
    }

    fn options(&mut self, now: crate::time::Nanos) -> OptsOut {
        let mut o = OptsOut::default();
        if self.ts_ok {
            o.ts = Some((self.ts_val(now), self.ts_recent));
        }
        if self.sack_ok && self.synchronized() {
            let max = if self.ts_ok { 3 } else { 4 };
            if let Some(d) = self.dsack.take() {
                o.sacks.push(d);
            }
            for s in &self.sacks {
                if o.sacks.len() < max {
                    o.sacks.push(*s);
                }
            }
        }
        o
    }

    /// Write one segment from this connection; false when the device
    /// refused it (`NET_XMIT_DROP`: counted as sent all the same, as
    /// `__tcp_transmit_skb` counts before the queue, and the window
    /// reduced as `tcp_enter_cwr`).
    pub(crate) fn emit(
        &mut self,
        ctx: &mut Ctx<'_>,
        seq: u32,
        fl: u16,
        payload_from: Option<(usize, usize)>,
    ) -> bool {
        let opts = self.options(ctx.now);
        let wnd = if fl & SYN != 0 {
            self.rcv_wnd.min(65535) as u16
        } else {
            self.select_window()
        };
        // The send queue's bytes as the ring holds them: one or two pieces,
        // copied once, into the packet.
        let (head, tail) = match payload_from {
            Some((off, len)) => ring_range(&self.sndbuf, off, len),
            None => (&[][..], &[][..]),
        };
        let data_len = head.len() + tail.len();
        // New data (not a retransmission) goes ECT(0) where ECN was agreed.
        let new_data = data_len > 0 && !before(seq, self.snd_nxt);
        let (ecn_fl, field) = self.ecn.send(new_data);
        let seg = SegOut {
            src: self.local,
            dst: self.remote,
            seq,
            ack: self.rcv_nxt,
            flags: fl | ecn_fl,
            wnd,
            opts,
            payload: head,
            ip_id: ctx.next_ip_id(),
            tos: self.tos_with(field),
        };
        let mss = self.mss_cache as usize;
        let segs = data_len.div_ceil(mss).max(1);
        // The device's segments take the IDs after this one.
        *ctx.ip_id = ctx.ip_id.wrapping_add(segs as u16 - 1);
        let gso_size = if data_len > mss { mss as u16 } else { 0 };
        if !ctx.tx_stopped {
            ctx.out.push_back(Transmit {
                packet: build_with_tail(&seg, tail),
                gso_size,
            });
        }
        ctx.mib.OutSegs += segs as u64;
        self.segs_out = self.segs_out.wrapping_add(segs as u32);
        if data_len > 0 {
            self.data_segs_out = self.data_segs_out.wrapping_add(segs as u32);
            self.bytes_sent += data_len as u64;
        }
        if fl & ACK != 0 {
            self.ack_sent();
        }
        if ctx.tx_stopped {
            self.enter_cwr(ctx);
            return false;
        }
        true
    }

    /// The IP header's TOS byte: the program's `IP_TOS` with the ECN field
    /// TCP chose (a stream socket's `IP_TOS` never sets it).
    fn tos_with(&self, ecn_field: u8) -> u8 {
        (self.tos & !3) | ecn_field
    }

    /// `tcp_event_ack_sent`: any segment with ACK carries the owed ACK.
    fn ack_sent(&mut self) {
        if self.ack.quick > 0 {
            self.ack.quick -= 1;
            if self.ack.quick == 0 {
                self.ack.ato = TCP_DELACK_MIN;
            }
        }
        self.ack.pending = false;
        self.ack.pushed = 0;
        self.ack.timer = None;
    }

    /// `tcp_send_ack`: a pure ACK now.
    pub(crate) fn send_ack(&mut self, ctx: &mut Ctx<'_>) {
        let seq = self.snd_nxt;
        self.emit(ctx, seq, ACK, None);
    }

    /// The SYN or SYN-ACK with this host's options, as
    /// `tcp_syn_options`/`tcp_synack_options` lay them out.
    pub(crate) fn send_syn(&mut self, ctx: &mut Ctx<'_>, with_ack: bool) {
        self.send_syn_with(ctx, with_ack, 0);
    }

    /// [`Conn::send_syn`], a SYN carrying the Fast Open option the
    /// connection holds (taken: only the first SYN carries it) and the
    /// first `data` bytes of the send buffer.
    pub(crate) fn send_syn_with(&mut self, ctx: &mut Ctx<'_>, with_ack: bool, data: usize) {
        let mut o = OptsOut {
            mss: Some(self.advmss as u16),
            sack_ok: self.sack_ok,
            ..OptsOut::default()
        };
        if self.ts_ok {
            o.ts = Some((
                self.ts_val(ctx.now),
                if with_ack { self.ts_recent } else { 0 },
            ));
        }
        if self.rcv_wscale > 0 || self.snd_wscale > 0 || self.wscale_offered(ctx) {
            o.wscale = Some(self.rcv_wscale);
        }
        // A client's first SYN carries its cookie or request; a
        // listener's first SYN-ACK the cookie it made for the peer.
        o.fastopen = self.fo.req.take();
        if !with_ack && o.fastopen.is_some() {
            self.fo.syn_fastopen = true;
            self.fo.syn_fastopen_exp = o.fastopen.is_some_and(|c| c.exp);
        }
        let payload: Vec<u8> = self.sndbuf.range(..data).copied().collect();
        let fl = if with_ack { SYN | ACK } else { SYN } | self.ecn.syn_flags(with_ack);
        let seg = SegOut {
            src: self.local,
            dst: self.remote,
            seq: self.iss,
            ack: self.rcv_nxt,
            flags: fl,
            wnd: self.rcv_wnd.min(65535) as u16,
            opts: o,
            payload: &payload,
            ip_id: 0,
            tos: self.tos_with(crate::ecn::INET_ECN_NOT_ECT),
        };
        if !ctx.tx_stopped {
            ctx.out.push_back(Transmit::one(build(&seg)));
        }
        ctx.mib.OutSegs += 1;
        if data > 0 {
            self.data_segs_out = self.data_segs_out.wrapping_add(1);
            self.bytes_sent += data as u64;
        }
    }

    fn wscale_offered(&self, ctx: &Ctx<'_>) -> bool {
        ctx.cfg.tcp_window_scaling && (self.state == State::SynSent || self.wscale_ok)
    }

    /// A reset from this connection (`tcp_send_active_reset`).
    pub(crate) fn send_active_reset(&mut self, ctx: &mut Ctx<'_>) {
        let seq = self.snd_nxt;
        self.emit(ctx, seq, RST | ACK, None);
        ctx.mib.OutRsts += 1;
    }

    /// `tcp_tso_autosize`: how many MSS one packet may hold, about 1 ms of
    /// the pacing rate, more when the path's RTT is tiny.
    pub(crate) fn tso_segs_now(&self) -> u32 {
        let mss = self.mss_cache as u64;
        let ratio = if self.snd_cwnd < self.snd_ssthresh / 2 {
            200
        } else {
            120
        };
        let srtt = self.srtt_us.max(1);
        let rate =
            mss * 80_000 * ratio / 100 * self.snd_cwnd.max(self.packets_out_all()) as u64 / srtt;
        let mut bytes = rate >> PACING_SHIFT;
        let r = (self.min_rtt_us >> TSO_RTT_LOG) as u32;
        if r < 32 {
            bytes += GSO_MAX_SIZE >> r;
        }
        let bytes = bytes.min(GSO_MAX_SIZE - 1 - 320);
        ((bytes / mss) as u32).max(self.min_tso_segs)
    }

    /// `tcp_nagle_check` with the Minshall rule: hold a partial segment
    /// while corked, or (Nagle on) while a small segment is unacknowledged
    /// (`snd_una < snd_sml <= snd_nxt`).
    fn nagle_holds(&self, partial: bool, nonagle: Nonagle) -> bool {
        if !partial || nonagle == Nonagle::Push {
            return false;
        }
        if nonagle == Nonagle::Cork {
            return true;
        }
        nonagle == Nonagle::Nagle
            && self.packets_out_all() > 0
            && after(self.snd_sml, self.snd_una)
            && !after(self.snd_sml, self.snd_nxt)
    }

    /// The socket's own Nagle mode (`tp->nonagle`).
    pub(crate) fn nonagle(&self) -> Nonagle {
        if self.cork {
            Nonagle::Cork
        } else if self.nodelay {
            Nonagle::Off
        } else {
            Nonagle::Nagle
        }
    }

    /// `tcp_xmit_size_goal`: how large an skb a write builds: one MSS
    /// without segmentation offload, else up to 64 KB bounded by half the
    /// largest window the peer offered.
    pub(crate) fn size_goal(&self) -> u32 {
        let mss = self.mss_cache;
        if !self.gso {
            return mss;
        }
        let mut goal = 65536 - 1 - 320;
        let cutoff = if self.max_window > 536 {
            self.max_window / 2
        } else {
            self.max_window
        };
        if cutoff > 0 && goal > cutoff {
            goal = cutoff.max(68 - 20);
        }
        (goal / mss * mss).max(mss)
    }

    /// `tcp_slow_start_after_idle_check` and `tcp_cwnd_restart`: after
    /// an idle RTO or more, the window halves per RTO idle, down to the
    /// initial window.
    pub(crate) fn slow_start_after_idle_check(&mut self, ctx: &Ctx<'_>) {
        if !ctx.cfg.tcp_slow_start_after_idle || !self.synchronized() {
            return;
        }
        let delta = ctx.now.saturating_sub(self.lsndtime) as i64;
        let rto = self.rto as i64;
        if delta <= rto {
            return;
        }
        self.snd_ssthresh = self.current_ssthresh();
        let restart = crate::conn::TCP_INIT_CWND.min(self.snd_cwnd);
        let mut cwnd = self.snd_cwnd;
        let mut d = delta - rto;
        while d > 0 && cwnd > restart {
            cwnd >>= 1;
            d -= rto;
        }
        self.snd_cwnd = cwnd.max(restart);
    }

    /// The unsent tail skb: where it starts and its length.
    fn tail_skb(&self) -> (u32, u32) {
        let start = match self.skb_ends.back() {
            Some(&b) if after(b, self.snd_nxt) => b,
            _ => self.snd_nxt,
        };
        (start, self.write_seq.wrapping_sub(start))
    }

    /// `tcp_mark_push`.
    fn mark_push(&mut self) {
        if self.push_marks.back() != Some(&self.write_seq) {
            self.push_marks.push_back(self.write_seq);
        }
        self.pushed_seq = self.write_seq;
    }

    /// `forced_push`: more than half the largest window written since the
    /// last push mark.
    fn forced_push(&self) -> bool {
        after(
            self.write_seq,
            self.pushed_seq.wrapping_add(self.max_window >> 1),
        )
    }

    /// A write (`tcp_sendmsg_locked`): data goes into the unsent tail skb
    /// while it has room (and no `MSG_EOR` closed it), else into new skbs
    /// of `size_goal`, each allowed only while the send buffer and
    /// `TCP_NOTSENT_LOWAT` have room; a full skb at the send head leaves
    /// at once (`tcp_push_one`); the end is pushed (`tcp_push`), PSH
    /// marked unless `MSG_MORE`. Returns the bytes taken.
    pub(crate) fn sendmsg(
        &mut self,
        ctx: &mut Ctx<'_>,
        data: &[u8],
        more: bool,
        eor: bool,
    ) -> usize {
        let goal = self.size_goal();
        let mut copied = 0usize;
        if self.rtx.is_empty() && self.unsent() == 0 && !data.is_empty() {
            // `tcp_skb_entail` on an empty queue.
            self.chrono.start(crate::state::ChronoType::Busy, ctx.now);
        }
        while copied < data.len() {
            let (start, tail_len) = self.tail_skb();
            let left = (data.len() - copied) as u32;
            let mut moved_mark = false;
            let take = if self.unsent() > 0 && !self.eor_tail && tail_len < goal {
                let end = self.write_seq;
                let had = self.push_marks.contains(&end);
                self.push_marks.retain(|&m| m != end);
                // A new write appending to an unsent skb takes its PSH away
                // (`if (!copied)`); within one write the mark stays on the
                // skb and moves to its new end.
                moved_mark = had && copied > 0;
                (goal - tail_len).min(left)
            } else {
                if self.sndbuf.len() >= self.sk_sndbuf as usize
                    || self.unsent() >= self.notsent_lowat
                {
                    // `wait_for_space`: SOCK_NOSPACE; the chrono starts only
                    // once the window is not what holds the data back
                    // (`tcp_cwnd_validate`).
                    self.nospace = true;
                    break;
                }
                if self.unsent() > 0 {
                    self.skb_ends.push_back(self.write_seq);
                } else if self.rtx.is_empty() {
                    self.slow_start_after_idle_check(ctx);
                }
                self.eor_tail = false;
                goal.min(left)
            };
            self.sndbuf.extend(&data[copied..copied + take as usize]);
            self.write_seq = self.write_seq.wrapping_add(take);
            copied += take as usize;
            if moved_mark {
                self.push_marks.push_back(self.write_seq);
            }
            if copied == data.len() {
                self.eor_tail = eor;
                break;
            }
            let (start_now, len_now) = self.tail_skb();
            if len_now < goal {
                continue;
            }
            if self.forced_push() {
                self.mark_push();
                self.write_xmit_inner(ctx, Nonagle::Push, false);
            } else if start_now == self.snd_nxt || start == self.snd_nxt {
                self.write_xmit_inner(ctx, Nonagle::Push, true);
            }
        }
        if copied == 0 {
            return 0;
        }
        let full = copied == data.len();
        if !(more && full) || self.forced_push() {
            self.mark_push();
        }
        let nonagle = if !full {
            Nonagle::Push
        } else if more {
            Nonagle::Cork
        } else {
            self.nonagle()
        };
        self.write_xmit(ctx, nonagle);
        copied
    }

    /// `tcp_write_xmit`: send what the congestion and receive windows and
    /// Nagle allow, packet by packet within skb bounds.
    pub(crate) fn write_xmit(&mut self, ctx: &mut Ctx<'_>, nonagle: Nonagle) {
        self.write_xmit_inner(ctx, nonagle, false);
    }

    /// `tcp_write_xmit`; `one` sends at most one packet (`tcp_push_one`).
    fn write_xmit_inner(&mut self, ctx: &mut Ctx<'_>, nonagle: Nonagle, one: bool) {
        // A listener's Fast Open child sends before its handshake ends.
        let open = matches!(
            self.state,
            State::Established
                | State::CloseWait
                | State::FinWait1
                | State::LastAck
                | State::Closing
        ) || (self.state == State::SynRecv && self.fo.passive);
        if !open {
            return;
        }
        let mut sent_any = false;
        loop {
            let unsent = self.unsent();
            let fin_now = self.fin_queued && self.snd_nxt == self.write_seq;
            if unsent == 0 {
                if fin_now {
                    // A bare FIN (`tcp_send_fin` found nothing to ride on);
                    // `tcp_cwnd_test` lets a lone FIN past the window.
                    sent_any |= self.send_data(ctx, 0, true);
                }
                break;
            }
            let skb_len = self
                .skb_ends
                .front()
                .map(|&b| b.wrapping_sub(self.snd_nxt))
                .unwrap_or(unsent);
            let is_tail = skb_len == unsent;
            let Some(len) = self.next_len(skb_len, is_tail, nonagle) else {
                break;
            };
            let fin = self.fin_queued && len == unsent;
            if !self.send_data(ctx, len, fin) {
                break;
            }
            sent_any = true;
            if len < self.mss_cache * len.div_ceil(self.mss_cache) {
                // `tcp_minshall_update`.
                self.snd_sml = self.snd_nxt;
            }
            if one {
                break;
            }
        }
        // `tcp_write_xmit`'s chronograph: held by the peer's window? Only
        // if the congestion window let it try (`tcp_cwnd_test` comes
        // before `tcp_snd_wnd_test`), and the head skb's first segment
        // did not fit (`tcp_snd_wnd_test`).
        let wnd_end = self.snd_una.wrapping_add(self.snd_wnd);
        let in_flight = self.in_flight();
        let unsent = self.unsent();
        let head = self
            .skb_ends
            .front()
            .map_or(unsent, |&b| b.wrapping_sub(self.snd_nxt));
        let rwnd_limited = unsent > 0
            && in_flight < self.snd_cwnd
            && after(self.snd_nxt.wrapping_add(head.min(self.mss_cache)), wnd_end);
        let empty = self.rtx.is_empty() && self.unsent() == 0;
        if rwnd_limited {
            self.chrono
                .start(crate::state::ChronoType::RwndLimited, ctx.now);
        } else {
            self.chrono
                .stop(crate::state::ChronoType::RwndLimited, ctx.now, empty);
        }
        let cwnd_limited = in_flight >= self.snd_cwnd;
        if sent_any || cwnd_limited {
            self.cwnd_validate(cwnd_limited, ctx.now);
        }
        if sent_any {
            self.schedule_loss_probe(ctx, false);
        } else {
            self.check_probe_timer(ctx.now);
        }
    }

    /// How much of the skb at the send head the next packet takes: the
    /// congestion window (`tcp_cwnd_test`), the peer's window on the first
    /// MSS (`tcp_snd_wnd_test`), Nagle for a lone small segment at the
    /// tail (`tcp_nagle_test`), and `tcp_mss_split_point` for a TSO packet.
    fn next_len(&self, skb_len: u32, is_tail: bool, nonagle: Nonagle) -> Option<u32> {
        let mss = self.mss_cache;
        let in_flight = self.in_flight();
        if in_flight >= self.snd_cwnd {
            return None;
        }
        // `tcp_cwnd_test`: at most half the window per TSO packet, so at
        // least two are in flight.
        let cwnd_quota = (self.snd_cwnd - in_flight).min((self.snd_cwnd >> 1).max(1));
        let wnd_end = self.snd_una.wrapping_add(self.snd_wnd);
        if after(self.snd_nxt.wrapping_add(skb_len.min(mss)), wnd_end) {
            return None;
        }
        let nonagle = if is_tail { nonagle } else { Nonagle::Push };
        if skb_len <= mss {
            return (!self.nagle_holds(skb_len < mss, nonagle)).then_some(skb_len);
        }
        let window = wnd_end.wrapping_sub(self.snd_nxt);
        let max_len = mss * cwnd_quota.min(self.tso_segs_now());
        if max_len <= window && !is_tail {
            return Some(max_len.min(skb_len));
        }
        let needed = skb_len.min(window);
        if max_len <= needed {
            return Some(max_len);
        }
        let partial = needed % mss;
        if self.nagle_holds(partial != 0, nonagle) {
            return Some(needed - partial).filter(|&l| l > 0);
        }
        Some(needed)
    }

    /// A loss probe's new segment: one MSS past the congestion window
    /// (`tcp_write_xmit` with `push_one == 2`).
    pub(crate) fn write_probe_segment(&mut self, ctx: &mut Ctx<'_>) {
        let unsent = self.unsent();
        let wnd_end = self.snd_una.wrapping_add(self.snd_wnd);
        let len = unsent
            .min(self.mss_cache)
            .min(wnd_end.wrapping_sub(self.snd_nxt));
        if len == 0 {
            return;
        }
        let fin = self.fin_queued && len == unsent;
        self.send_data(ctx, len, fin);
    }

    /// A zero-window probe (`tcp_write_wakeup`): new data when the window
    /// has room for some, else a bare ACK one below `snd_una`.
    pub(crate) fn write_wakeup(&mut self, ctx: &mut Ctx<'_>) {
        let wnd_end = self.snd_una.wrapping_add(self.snd_wnd);
        ctx.ext.TCPWinProbe += 1;
        if before(self.snd_nxt, wnd_end) && self.unsent() > 0 {
            let len = self
                .unsent()
                .min(self.mss_cache)
                .min(wnd_end.wrapping_sub(self.snd_nxt));
            let fin = self.fin_queued && len == self.unsent();
            // Window probes always carry PSH.
            self.push_marks.push_front(self.snd_nxt.wrapping_add(len));
            self.send_data(ctx, len, fin);
        } else {
            let seq = self.snd_una.wrapping_sub(1);
            self.emit(ctx, seq, ACK, None);
        }
    }

    /// Send `len` bytes (and a FIN) from the send head; false when the
    /// device refused the packet (it stays unsent, `tcp_write_xmit`
    /// stops).
    fn send_data(&mut self, ctx: &mut Ctx<'_>, len: u32, fin: bool) -> bool {
        let prior_out = self.rtx.len();
        if self.in_flight() == 0 {
            // `CA_EVENT_TX_START`: an idle sender's curve resumes.
            let last = self.lsndtime;
            self.cubic.tx_start(ctx.now, last);
        }
        let seq = self.snd_nxt;
        let off = seq.wrapping_sub(self.data_base()) as usize;
        let mut fl = ACK;
        // PSH where a write ended (`tcp_mark_push`), and on every
        // multi-segment packet (`__tcp_transmit_skb`).
        let end = seq.wrapping_add(len);
        let marked = self
            .push_marks
            .iter()
            .any(|&m| after(m, seq) && !after(m, end));
        while self.push_marks.front().is_some_and(|&m| !after(m, end)) {
            self.push_marks.pop_front();
        }
        if len > 0 && (marked || len > self.mss_cache) {
            fl |= PSH;
        }
        if fin {
            fl |= FIN;
        }
        let payload = if len > 0 {
            Some((off, len as usize))
        } else {
            None
        };
        if !self.emit(ctx, seq, fl, payload) {
            return false;
        }
        let end = seq.wrapping_add(len + fin as u32);
        while self.skb_ends.front().is_some_and(|&b| !after(b, end)) {
            self.skb_ends.pop_front();
        }
        self.rtx.push_back(Sent {
            seq,
            end_seq: end,
            syn: false,
            fin,
            psh: marked,
            sent_at: ctx.now,
            retrans: false,
            ever_retrans: false,
            sacked: false,
            lost: false,
        });
        self.snd_nxt = end;
        if matches!(
            self.ca_state,
            crate::state::CaState::Cwr | crate::state::CaState::Recovery
        ) {
            let n = self.pcount(self.rtx.back().expect("just pushed"));
            self.prr_out += n;
        }
        // `tcp_event_new_data_sent`: the first packet out (or one after a
        // probe timer) arms the retransmission timer.
        if prior_out == 0 || self.xmit_timer != XmitTimer::Retrans {
            self.rearm_rto(ctx.now);
        }
        self.data_sent(ctx.now);
        true
    }

    /// `tcp_event_data_sent`: a reply within an ATO of the last arrival
    /// counts towards interactive (ping-pong) mode.
    fn data_sent(&mut self, now: crate::time::Nanos) {
        self.lsndtime = now;
        if now.saturating_sub(self.ack.lrcvtime) < self.ack.ato {
            self.ack.pingpong = self.ack.pingpong.saturating_add(1);
        }
    }

    /// The sequence number of `sndbuf[0]`.
    pub(crate) fn data_base(&self) -> u32 {
        // The SYN occupies iss; data starts after it. (A fixed-point
        // comparison would turn after 2^31 bytes.)
        if self.snd_una == self.iss {
            self.iss.wrapping_add(1)
        } else {
            self.snd_una
        }
    }

    /// `tcp_send_delayed_ack`: arm the delayed-ACK timer, or send now if
    /// the timer already due is close.
    pub(crate) fn send_delayed_ack(&mut self, ctx: &mut Ctx<'_>) {
        let mut ato = self.ack.ato;
        if ato > TCP_DELACK_MIN {
            let mut max_ato = 500 * MS;
            if self.ack.pingpong > 0 || self.ack.pushed & crate::conn::ACK_PUSHED != 0 {
                max_ato = TCP_DELACK_MAX;
            }
            if self.srtt_us > 0 {
                let rtt = ((self.srtt_us >> 3) * 1000).max(TCP_DELACK_MIN);
                max_ato = max_ato.min(rtt);
            }
            ato = ato.min(max_ato);
        }
        ato = ato.min(TCP_DELACK_MAX);
        let mut at = ctx.now + ato;
        if let Some(t) = self.ack.timer {
            if t <= ctx.now + (ato >> 2) {
                self.send_ack(ctx);
                return;
            }
            at = at.min(t);
        }
        self.ack.pending = true;
        self.ack.timer = Some(at);
    }
}

/// How a push treats a partial segment (`TCP_NAGLE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Nonagle {
    /// Nagle's rule (Minshall's variant).
    Nagle,
    /// `TCP_NODELAY`.
    Off,
    /// `TCP_CORK` or `MSG_MORE`: hold partial segments.
    Cork,
    /// One push that sends whatever the windows allow (`TCP_NAGLE_PUSH`).
    Push,
}

/// A reset for a segment no socket took (`tcp_v4_send_reset`): with its
/// ACK number as our sequence if it had ACK, else sequence 0 acknowledging
/// all it occupied.
pub(crate) fn reset_for(ctx: &mut Ctx<'_>, seg: &SegIn<'_>) {
    if seg.has(RST) {
        return;
    }
    let (seq, ack, fl) = if seg.has(ACK) {
        (seg.ack, 0, RST)
    } else {
        (0, seg.end_seq(), RST | ACK)
    };
    let out = SegOut {
        src: seg.dst,
        dst: seg.src,
        seq,
        ack,
        flags: fl,
        wnd: 0,
        opts: OptsOut::default(),
        payload: &[],
        ip_id: 0,
        tos: 0,
    };
    // A device that refuses packets drops the reset too.
    if !ctx.tx_stopped {
        ctx.out.push_back(Transmit::one(build(&out)));
    }
    ctx.mib.OutSegs += 1;
    ctx.mib.OutRsts += 1;
}
