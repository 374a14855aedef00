//! Classic BPF for `SO_ATTACH_REUSEPORT_CBPF`: the program a reuseport
//! group runs to pick its member (`run_bpf_filter` in
//! net/core/sock_reuseport.c), checked as `bpf_check_classic()` checks it
//! and run as the kernel runs a classic socket filter.
//!
//! The program sees the datagram's payload (the kernel pulls the UDP
//! header off first), its length, the network and link-layer headers
//! through `SKF_NET_OFF` / `SKF_LL_OFF`, and the ancillary words servers
//! use: `SKF_AD_CPU` (the CPU the socket stage runs on), `SKF_AD_QUEUE`
//! (the RX queue), `SKF_AD_RXHASH`, `SKF_AD_PROTOCOL`, `SKF_AD_PKTTYPE`,
//! `SKF_AD_HATYPE`, `SKF_AD_RANDOM` and the rest as an skb without them
//! has them (0). A load past the data ends the program with 0; a division
//! by a zero `X` too. The value it returns is the member's index; one past
//! the group falls back to the hash.

use std::fmt;

/// `BPF_MAXINSNS`.
pub const MAX_INSNS: usize = 4096;
/// `BPF_MEMWORDS`.
const MEMWORDS: usize = 16;

const SKF_AD_OFF: u32 = (-0x1000i32) as u32;
const SKF_NET_OFF: u32 = (-0x100000i32) as u32;
const SKF_LL_OFF: u32 = (-0x200000i32) as u32;
const SKF_AD_PROTOCOL: u32 = 0;
const SKF_AD_QUEUE: u32 = 24;
const SKF_AD_HATYPE: u32 = 28;
const SKF_AD_RXHASH: u32 = 32;
const SKF_AD_CPU: u32 = 36;
const SKF_AD_ALU_XOR_X: u32 = 40;
const SKF_AD_RANDOM: u32 = 56;
const SKF_AD_MAX: u32 = 64;

/// One instruction (`struct sock_filter`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    /// Opcode.
    pub code: u16,
    /// Jump offset if true.
    pub jt: u8,
    /// Jump offset if false.
    pub jf: u8,
    /// The constant.
    pub k: u32,
}

/// Why a program was refused (the kernel's `EINVAL`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused(pub String);

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "classic BPF program refused: {}", self.0)
    }
}

impl std::error::Error for Refused {}

/// What a program runs on: one datagram.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ctx<'a> {
    /// The UDP payload (the data `BPF_ABS`/`BPF_IND` loads read).
    pub payload: &'a [u8],
    /// The packet from its network header (`SKF_NET_OFF`).
    pub net: &'a [u8],
    /// The frame from its Ethernet header (`SKF_LL_OFF`).
    pub link: &'a [u8],
    /// The ethertype (`SKF_AD_PROTOCOL`).
    pub protocol: u16,
    /// The RX queue (`SKF_AD_QUEUE`).
    pub queue: u16,
    /// The device's or the flow's hash (`SKF_AD_RXHASH`).
    pub rxhash: u32,
    /// The CPU the socket stage runs on (`SKF_AD_CPU`).
    pub cpu: u32,
}

/// A checked classic BPF program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cbpf {
    insns: Vec<Insn>,
}

mod op {
    pub const LD: u16 = 0x00;
    pub const LDX: u16 = 0x01;
    pub const ST: u16 = 0x02;
    pub const STX: u16 = 0x03;
    pub const ALU: u16 = 0x04;
    pub const JMP: u16 = 0x05;
    pub const RET: u16 = 0x06;
    pub const MISC: u16 = 0x07;
    pub const W: u16 = 0x00;
    pub const H: u16 = 0x08;
    pub const B: u16 = 0x10;
    pub const IMM: u16 = 0x00;
    pub const ABS: u16 = 0x20;
    pub const IND: u16 = 0x40;
    pub const MEM: u16 = 0x60;
    pub const LEN: u16 = 0x80;
    pub const MSH: u16 = 0xa0;
    pub const X: u16 = 0x08;
    pub const A: u16 = 0x10;
}

impl Cbpf {
    /// `bpf_check_classic()`: 1 to 4096 instructions, known opcodes, no
    /// division by a constant 0, scratch words in range, jumps forward and
    /// inside the program, ancillary offsets known, a return at the end.
    pub fn new(insns: &[Insn]) -> Result<Cbpf, Refused> {
        let bad = |i: usize, why: &str| Err(Refused(format!("instruction {i}: {why}")));
        if insns.is_empty() || insns.len() > MAX_INSNS {
            return Err(Refused(format!(
                "{} instructions (1 to {MAX_INSNS})",
                insns.len()
            )));
        }
        for (i, x) in insns.iter().enumerate() {
            let class = x.code & 7;
            let ok = match class {
                op::LD | op::LDX => {
                    let mode = x.code & 0xe0;
                    let size = x.code & 0x18;
                    match (class, mode) {
                        (_, op::IMM | op::LEN) => true,
                        (_, op::MEM) => (x.k as usize) < MEMWORDS,
                        (op::LD, op::ABS) if x.k >= SKF_AD_OFF => {
                            let ad = x.k - SKF_AD_OFF;
                            size == op::W && ad < SKF_AD_MAX && ad.is_multiple_of(4)
                        }
                        (op::LD, op::ABS | op::IND) => size != 0x18,
                        (op::LDX, op::MSH) => size == op::B,
                        _ => false,
                    }
                }
                op::ST | op::STX => x.code == class && (x.k as usize) < MEMWORDS,
                op::ALU => {
                    let o = x.code & 0xf0;
                    if o > 0xa0 {
                        false
                    } else if (o == 0x30 || o == 0x90) && x.code & op::X == 0 && x.k == 0 {
                        return bad(i, "division by the constant 0");
                    } else {
                        true
                    }
                }
                op::JMP => {
                    let o = x.code & 0xf0;
                    let end = insns.len() - 1 - i;
                    if o == 0x00 {
                        (x.k as usize) < end
                    } else {
                        o <= 0x40 && (x.jt as usize) < end && (x.jf as usize) < end
                    }
                }
                op::RET => matches!(x.code & 0x18, 0x00 | op::A),
                op::MISC => matches!(x.code, 0x07 | 0x87),
                _ => false,
            };
            if !ok {
                return bad(
                    i,
                    &format!("opcode {:#06x} k {:#x} not valid here", x.code, x.k),
                );
            }
        }
        if insns[insns.len() - 1].code & 7 != op::RET {
            return bad(insns.len() - 1, "the program does not end in a return");
        }
        Ok(Cbpf {
            insns: insns.to_vec(),
        })
    }

    /// The instructions.
    pub fn insns(&self) -> &[Insn] {
        &self.insns
    }

    /// Run on `ctx`: the value the program returns (0 if a load falls
    /// outside the data or `X` divides by 0).
    pub fn run(&self, ctx: &Ctx<'_>) -> u32 {
        self.exec(ctx).unwrap_or(0)
    }

    fn exec(&self, ctx: &Ctx<'_>) -> Option<u32> {
        let (mut a, mut x) = (0u32, 0u32);
        let mut mem = [0u32; MEMWORDS];
        let mut pc = 0usize;
        loop {
            let i = *self.insns.get(pc)?;
            pc += 1;
            match i.code & 7 {
                op::LD => a = load(ctx, i, (a, x), &mem)?,
                op::LDX => {
                    x = match i.code & 0xe0 {
                        op::MSH => (*ctx.payload.get(i.k as usize)? as u32 & 0xf) << 2,
                        _ => load(ctx, i, (a, 0), &mem)?,
                    }
                }
                op::ST => mem[i.k as usize] = a,
                op::STX => mem[i.k as usize] = x,
                op::ALU => {
                    let v = if i.code & op::X != 0 { x } else { i.k };
                    a = match i.code & 0xf0 {
                        0x00 => a.wrapping_add(v),
                        0x10 => a.wrapping_sub(v),
                        0x20 => a.wrapping_mul(v),
                        0x30 => a.checked_div(v)?,
                        0x40 => a | v,
                        0x50 => a & v,
                        0x60 => a.checked_shl(v).unwrap_or(0),
                        0x70 => a.checked_shr(v).unwrap_or(0),
                        0x80 => a.wrapping_neg(),
                        0x90 => a.checked_rem(v)?,
                        _ => a ^ v,
                    };
                }
                op::JMP => {
                    let v = if i.code & op::X != 0 { x } else { i.k };
                    let jump = match i.code & 0xf0 {
                        0x00 => {
                            pc += i.k as usize;
                            continue;
                        }
                        0x10 => a == v,
                        0x20 => a > v,
                        0x30 => a >= v,
                        _ => a & v != 0,
                    };
                    pc += if jump { i.jt } else { i.jf } as usize;
                }
                op::RET => {
                    return Some(match i.code & 0x18 {
                        op::A => a,
                        _ => i.k,
                    })
                }
                _ => {
                    if i.code & 0x80 != 0 {
                        a = x;
                    } else {
                        x = a;
                    }
                }
            }
        }
    }
}

/// A load into A (or X): immediate, length, scratch word, ancillary word,
/// or bytes of the payload, the network or the link-layer header.
fn load(ctx: &Ctx<'_>, i: Insn, (a, x): (u32, u32), mem: &[u32; MEMWORDS]) -> Option<u32> {
    let size = match i.code & 0x18 {
        op::W => 4,
        op::H => 2,
        _ => 1,
    };
    let off = match i.code & 0xe0 {
        op::IMM => return Some(i.k),
        op::LEN => return Some(ctx.payload.len() as u32),
        op::MEM => return Some(mem[i.k as usize]),
        op::ABS => i.k,
        _ => i.k.wrapping_add(x),
    };
    if off >= SKF_AD_OFF && i.code & 0xe0 == op::ABS {
        return Some(ancillary(ctx, off - SKF_AD_OFF, a, x));
    }
    let (data, at) = if (SKF_LL_OFF..SKF_NET_OFF).contains(&off) {
        (ctx.link, off - SKF_LL_OFF)
    } else if (SKF_NET_OFF..SKF_AD_OFF).contains(&off) {
        (ctx.net, off - SKF_NET_OFF)
    } else {
        (ctx.payload, off)
    };
    let b = data.get(at as usize..(at as usize).checked_add(size)?)?;
    Some(b.iter().fold(0u32, |v, &x| (v << 8) | x as u32))
}

fn ancillary(ctx: &Ctx<'_>, ad: u32, a: u32, x: u32) -> u32 {
    match ad {
        SKF_AD_PROTOCOL => ctx.protocol as u32,
        SKF_AD_QUEUE => ctx.queue as u32,
        SKF_AD_HATYPE => 1,
        SKF_AD_RXHASH => ctx.rxhash,
        SKF_AD_CPU => ctx.cpu,
        SKF_AD_ALU_XOR_X => a ^ x,
        SKF_AD_RANDOM => {
            use std::hash::{BuildHasher, Hasher};
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u32(ctx.rxhash);
            h.finish() as u32
        }
        // PACKET_HOST, no ifindex, mark, VLAN or payload offset known:
        // what an skb without them reads.
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn i(code: u16, jt: u8, jf: u8, k: u32) -> Insn {
        Insn { code, jt, jf, k }
    }

    /// knotd's `socket-affinity` program: the CPU modulo the workers.
    fn by_cpu(n: u32) -> Vec<Insn> {
        vec![
            i(0x20, 0, 0, SKF_AD_OFF + SKF_AD_CPU), // ld [cpu]
            i(0x94, 0, 0, n),                       // mod #n
            i(0x16, 0, 0, 0),                       // ret a
        ]
    }

    #[test]
    fn knots_program_picks_by_cpu() {
        let p = Cbpf::new(&by_cpu(4)).unwrap();
        for cpu in 0..9 {
            let c = Ctx {
                cpu,
                ..Ctx::default()
            };
            assert_eq!(p.run(&c), cpu % 4);
        }
    }

    #[test]
    fn loads_of_payload_headers_and_ancillary_words() {
        let payload = [0x12, 0x34, 0x56, 0x78, 0x9a];
        let net = [0x45, 0, 0, 28];
        let c = Ctx {
            payload: &payload,
            net: &net,
            queue: 3,
            rxhash: 0xdead_beef,
            protocol: 0x0800,
            ..Ctx::default()
        };
        let run = |prog: Vec<Insn>| Cbpf::new(&prog).unwrap().run(&c);
        assert_eq!(run(vec![i(0x20, 0, 0, 1), i(0x16, 0, 0, 0)]), 0x3456_789a);
        assert_eq!(run(vec![i(0x28, 0, 0, 0), i(0x16, 0, 0, 0)]), 0x1234);
        assert_eq!(run(vec![i(0x80, 0, 0, 0), i(0x16, 0, 0, 0)]), 5);
        assert_eq!(
            run(vec![i(0x30, 0, 0, SKF_NET_OFF + 3), i(0x16, 0, 0, 0)]),
            28
        );
        let ad = |w: u32| run(vec![i(0x20, 0, 0, SKF_AD_OFF + w), i(0x16, 0, 0, 0)]);
        assert_eq!(ad(SKF_AD_QUEUE), 3);
        assert_eq!(ad(SKF_AD_RXHASH), 0xdead_beef);
        assert_eq!(ad(SKF_AD_PROTOCOL), 0x0800);
        // `A ^= X`: ld #6; ldx #3; ld a ^ x.
        let xor = vec![
            i(0x00, 0, 0, 6),
            i(0x01, 0, 0, 3),
            i(0x20, 0, 0, SKF_AD_OFF + SKF_AD_ALU_XOR_X),
            i(0x16, 0, 0, 0),
        ];
        assert_eq!(run(xor), 5);
        // Past the data: the program ends with 0.
        assert_eq!(run(vec![i(0x20, 0, 0, 2), i(0x06, 0, 0, 7)]), 0);
        // ldx 4*([0]&0xf), then ld [x]: an indirect load.
        let ind = vec![i(0xb1, 0, 0, 4), i(0x50, 0, 0, 0), i(0x16, 0, 0, 0)];
        assert_eq!(run(ind), 0);
    }

    #[test]
    fn jumps_alu_and_scratch_words() {
        // if payload[0] == 0x12 then 7 else 9, through a scratch word.
        let prog = vec![
            i(0x30, 0, 0, 0),
            i(0x15, 0, 2, 0x12),
            i(0x00, 0, 0, 7),
            i(0x05, 0, 0, 1),
            i(0x00, 0, 0, 9),
            i(0x02, 0, 0, 3),
            i(0x61, 0, 0, 3),
            i(0x87, 0, 0, 0),
            i(0x04, 0, 0, 1),
            i(0x16, 0, 0, 0),
        ];
        let p = Cbpf::new(&prog).unwrap();
        let run = |b: u8| {
            p.run(&Ctx {
                payload: &[b],
                ..Ctx::default()
            })
        };
        assert_eq!((run(0x12), run(0x13)), (8, 10));
        // A division by a zero X ends with 0.
        let div = vec![i(0x00, 0, 0, 5), i(0x3c, 0, 0, 0), i(0x16, 0, 0, 0)];
        assert_eq!(Cbpf::new(&div).unwrap().run(&Ctx::default()), 0);
    }

    #[test]
    fn the_checker_refuses_what_the_kernel_refuses() {
        let refused = |p: Vec<Insn>| Cbpf::new(&p).is_err();
        assert!(refused(vec![]));
        assert!(refused(vec![i(0x16, 0, 0, 0); MAX_INSNS + 1]));
        assert!(refused(vec![i(0x00, 0, 0, 1)]), "no return at the end");
        assert!(
            refused(vec![i(0x34, 0, 0, 0), i(0x16, 0, 0, 0)]),
            "div by #0"
        );
        assert!(
            refused(vec![i(0x60, 0, 0, 16), i(0x16, 0, 0, 0)]),
            "mem[16]"
        );
        assert!(
            refused(vec![i(0x15, 5, 0, 1), i(0x16, 0, 0, 0)]),
            "jump out"
        );
        assert!(refused(vec![
            i(0x20, 0, 0, SKF_AD_OFF + 200),
            i(0x16, 0, 0, 0)
        ]));
        assert!(refused(vec![i(0xffff, 0, 0, 0), i(0x16, 0, 0, 0)]));
        assert!(!refused(by_cpu(2)));
    }
}
