//! The SACK scoreboard: `tcp_sacktag_write_queue` (D-SACK included),
//! reordering seen through SACKs, and cutting a sent packet in two.

use super::*;

impl Conn {
    /// `tcp_sacktag_write_queue`: mark what the SACK blocks cover,
    /// cutting TSO packets at MSS boundaries; a first block below the
    /// ACK, or inside the second, is a D-SACK.
    pub(super) fn sacktag(
        &mut self,
        ctx: &mut Ctx<'_>,
        seg: &SegIn<'_>,
        prior_snd_una: u32,
        flag: &mut AckFlags,
    ) {
        let blocks = &seg.opts.sacks;
        let mut first = 0;
        if let Some(&(s0, e0)) = blocks.first() {
            let dsack = before(s0, seg.ack)
                || blocks
                    .get(1)
                    .is_some_and(|&(s1, e1)| !after(e0, e1) && !before(s0, s1));
            if dsack {
                flag.dsack = true;
                first = 1;
                if self.undo_retrans > 0 && !after(e0, seq_max(prior_snd_una, seg.ack)) {
                    self.undo_retrans -= 1;
                }
            }
        }
        let mss = self.mss_cache.max(1);
        let now = ctx.now;
        let mut reord: Option<u32> = None;
        if self.sacked_out() == 0 {
            self.sacked_before = false;
        }
        for &(s, e) in &blocks[first..] {
            if !after(e, s) || !after(e, seq_max(self.snd_una, seg.ack)) || after(e, self.snd_nxt) {
                continue;
            }
            let mut i = 0;
            while i < self.rtx.len() {
                let x = self.rtx[i];
                if x.syn || !after(x.end_seq, s) || !before(x.seq, e) || x.sacked {
                    i += 1;
                    continue;
                }
                let data_end = x.end_seq.wrapping_sub(x.fin as u32);
                // Cut at the block's edges, rounded to whole segments
                // (`tcp_match_skb_to_sack`).
                if after(s, x.seq) {
                    let cut = x
                        .seq
                        .wrapping_add(s.wrapping_sub(x.seq).div_ceil(mss) * mss);
                    if before(cut, data_end) {
                        self.split_at(i, cut);
                        i += 1;
                        continue;
                    }
                    i += 1;
                    continue;
                }
                if before(e, x.end_seq) {
                    let cut = x.seq.wrapping_add(e.wrapping_sub(x.seq) / mss * mss);
                    if after(cut, x.seq) && before(cut, data_end) {
                        self.split_at(i, cut);
                    } else {
                        i += 1;
                        continue;
                    }
                }
                let x = self.rtx[i];
                let n = self.pcount(&x);
                self.rtx[i].sacked = true;
                self.rtx[i].lost = false;
                self.rtx[i].retrans = false;
                self.delivered = self.delivered.wrapping_add(n);
                flag.data_sacked = true;
                if !x.ever_retrans {
                    flag.orig_sack_acked = true;
                }
                if !x.ever_retrans
                    && !x.retrans
                    && self.sacked_before
                    && before(x.seq, self.highest_sack)
                {
                    // SACKed below what was SACKed before.
                    reord = Some(
                        reord.map_or(x.seq, |r: u32| if before(x.seq, r) { x.seq } else { r }),
                    );
                }
                if !self.sacked_before || after(x.end_seq, self.highest_sack) {
                    self.highest_sack = x.end_seq;
                }
                self.sacked_before = true;
                self.rack_advance(x.ever_retrans || x.retrans, x.end_seq, x.sent_at, now);
                i += 1;
            }
        }
        if let Some(low) = reord {
            self.check_sack_reordering(ctx, low);
        }
    }

    /// `tcp_check_sack_reordering`: a SACK below the highest SACKed
    /// sequence raises `reordering` to the distance, in segments.
    pub(super) fn check_sack_reordering(&mut self, ctx: &mut Ctx<'_>, low: u32) {
        let fack = self.highest_sack;
        if !before(low, fack) {
            return;
        }
        let mss = self.mss_cache.max(1);
        let metric = fack.wrapping_sub(low);
        if metric > self.reordering * mss {
            self.reordering = metric.div_ceil(mss).min(ctx.cfg.tcp_max_reordering);
        }
        self.reord_seen = self.reord_seen.wrapping_add(1);
        ctx.ext.TCPSACKReorder += 1;
    }

    /// Cut retransmission-queue entry `i` at `cut` (`tcp_fragment`): both
    /// parts keep its marks, the first loses PSH and FIN.
    pub(crate) fn split_at(&mut self, i: usize, cut: u32) {
        let x = self.rtx[i];
        self.rtx[i] = Sent {
            end_seq: cut,
            fin: false,
            psh: false,
            ..x
        };
        self.rtx.insert(
            i + 1,
            Sent {
                seq: cut,
                syn: false,
                ..x
            },
        );
    }
}
