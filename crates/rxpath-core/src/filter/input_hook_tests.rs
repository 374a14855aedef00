//! Tests of the `INPUT` hook as the path runs it: the flow cache's fast
//! path against the walk, from parsed headers and from IP input, and when
//! a hook's counts reach the rule counters.

use super::gen::{generate, Shape};
use super::rule::Family;
use super::tests::same_counters;
use super::*;
use rand::Rng;

/// A frame of one of `pool`'s flows (ICMP for every twentieth), of a
/// length some rules test, TCP with random flags: its index, the flow and
/// the frame.
fn pick(rng: &mut impl Rng, pool: &[gen::Probe], fam: Family) -> (usize, gen::Probe, Vec<u8>) {
    let i = rng.gen_range(0..pool.len());
    let mut p = pool[i];
    if i % 20 == 0 {
        p.proto = 1;
    }
    let len = [0usize, 10, 60, 150, 1200][rng.gen_range(0..5)];
    let mut f = p.frame([2; 6], [4; 6], &vec![0u8; len]);
    if p.proto == 6 {
        let l4 = 14 + if fam == Family::V6 { 40 } else { 20 };
        f[l4 + 13] = [0x02, 0x12, 0x10, 0x09, 0x18][rng.gen_range(0..5)];
    }
    (i, p, f)
}

/// The stage's fast path (a key packed from the parsed headers, a hit in
/// about forty instructions) gives every frame the action and every rule
/// the counts of the plain walk: TCP with any flags, UDP, ICMP, IPv6,
/// fragments, frames with and without a flow hash, lengths that some
/// rules test.
#[test]
fn the_stage_fast_path_judges_frames_as_the_walk() {
    use rand::SeedableRng;
    let mut rng = rand_pcg::Pcg64Mcg::seed_from_u64(23);
    // The linear walk goes through the judge uncached, its counts kept in
    // the thread until a flush like the cache's.
    for (fam, seed, mode) in [
        (Family::V4, 3, FilterMode::Compiled),
        (Family::V4, 4, FilterMode::Compiled),
        (Family::V6, 5, FilterMode::Compiled),
        (Family::V4, 6, FilterMode::Linear),
        (Family::V6, 7, FilterMode::Linear),
    ] {
        let g = generate(Shape::Fw, fam, 300, 400, 0.8, seed);
        let mut texts = vec![("fw".to_string(), g.save.clone())];
        if fam == Family::V4 {
            // Flags, lengths, fragments and ICMP types by hand as well.
            let extra = "*filter\n:INPUT ACCEPT [0:0]\n\
                -A INPUT -f -j DROP\n\
                -A INPUT -p tcp -m tcp --tcp-flags SYN,ACK SYN -j DROP\n\
                -A INPUT -p tcp -m tcp --tcp-flags FIN,PSH FIN,PSH -j REJECT\n\
                -A INPUT -m length --length 100:200 -j DROP\n\
                -A INPUT -p icmp -m icmp --icmp-type 8 -j DROP\n";
            texts[0].1 = g
                .save
                .replacen("*filter\n:INPUT ACCEPT [0:0]\n", extra, 1)
                .replacen("*filter\n:INPUT DROP [0:0]\n", extra, 1);
        }
        let load = |m| Filter::load(&texts, "veth0", m).unwrap();
        let (cached, plain) = (load(mode), load(FilterMode::Compiled));
        let mut j = Judge::new(64);
        let mut n = 0;
        // Flows that come back (hits) and slots they share (evictions).
        let pool: Vec<_> = g.traffic.iter().take(48).cloned().collect();
        for round in 0..4 {
            for _ in 0..1000 {
                let (i, p, mut f) = pick(&mut rng, &pool, fam);
                let l3 = 14;
                if fam == Family::V4 && rng.gen_bool(0.05) {
                    // A later fragment (offset 8 bytes) or a first one.
                    f[l3 + 6] = if rng.gen_bool(0.5) { 0 } else { 0x20 };
                    f[l3 + 7] = 1;
                }
                let Ok(h) = rxpath_wire::parse(&f) else {
                    continue;
                };
                let hash = if round == 3 {
                    0
                } else {
                    (i as u32 * 7) % 32 + 1
                };
                let want = plain
                    .judge_frame(&f, &h)
                    .map_or(Action::Accept, |v| v.action);
                assert_eq!(j.action(&cached, &f, &h, hash), want, "{p:?} {h:?}");
                n += 1;
                if n % 16 == 0 {
                    j.flush(&cached);
                }
            }
        }
        j.flush(&cached);
        if mode == FilterMode::Linear {
            assert_eq!((j.hits, j.misses), (0, n), "the walk is never cached");
        } else {
            assert!(
                j.hits > 200 && j.misses > 500,
                "{} hits, {} walks",
                j.hits,
                j.misses
            );
        }
        for (a, b) in cached.sets().zip(plain.sets()) {
            same_counters(a, b, n, &format!("{fam:?}"));
        }
    }
}

/// A hook's counts reach the rule counters when its set is let go: not
/// while the queue stays busy (for fewer than `HOLD_POLLS` polls), at once
/// when a poll ends with the queue dry, after `HOLD_POLLS` busy polls, at
/// every bundle for a driver without polls, and when the hook is dropped;
/// a swap takes effect at the hook's next load and carries what it
/// counted. Every packet is counted exactly once through all of it.
#[test]
fn a_hooks_counts_are_written_when_it_lets_its_set_go() {
    use crate::packet::PollEnd;
    use rxpath_wire::build::{self, Spec};
    let rules = "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -p udp --dport 7 -j DROP\nCOMMIT\n";
    let load = || Filter::load(&[("t".into(), rules.into())], "x", FilterMode::Compiled).unwrap();
    let handle = std::sync::Arc::new(FilterHandle::new(Some(load())));
    let frame = build::udp(
        &Spec::new(
            "198.18.0.1".parse().unwrap(),
            "198.18.0.2".parse().unwrap(),
            4000,
            7,
        ),
        b"x",
    );
    let h = rxpath_wire::parse(&frame).unwrap();
    let dropped = |hd: &FilterHandle| {
        let f = hd.current().unwrap();
        let st = f.v4.as_ref().unwrap().stats();
        st.iter().find(|r| r.rule == Some(0)).unwrap().packets
    };
    let full = PollEnd::Full;
    let dry = PollEnd::Complete { work_done: 0 };
    let mut hook = InputHook::new(handle.clone());
    // Its driver polls (until the first poll ends, a hook lets go at every
    // bundle).
    hook.poll_done(dry);
    // A busy queue: counted here, not yet there.
    for _ in 0..HOLD_POLLS - 1 {
        for rxhash in [0, 5] {
            assert_eq!(hook.action(&frame, &h, rxhash), Action::Drop);
        }
        hook.bundle_done();
        hook.poll_done(full);
    }
    assert_eq!(dropped(&handle), 0);
    hook.poll_done(full);
    assert_eq!(dropped(&handle), 2 * (HOLD_POLLS as u64 - 1));
    // The queue runs dry: written at once.
    hook.action(&frame, &h, 5);
    hook.poll_done(dry);
    assert_eq!(dropped(&handle), 2 * HOLD_POLLS as u64 - 1);
    // A swap while the hook holds the old set: it judges by the old set
    // until it lets it go, and the swap carries those counts over.
    hook.action(&frame, &h, 5);
    let swapper = {
        let handle = handle.clone();
        std::thread::spawn(move || handle.replace(load(), yield_then_go_on))
    };
    std::thread::sleep(std::time::Duration::from_millis(20));
    hook.action(&frame, &h, 5);
    hook.poll_done(dry);
    swapper.join().unwrap();
    assert_eq!(dropped(&handle), 2 * HOLD_POLLS as u64 + 1);
    // A driver without polls writes at every bundle; a dropped hook
    // writes what it holds.
    let mut worker = InputHook::new(handle.clone());
    worker.action(&frame, &h, 9);
    worker.bundle_done();
    assert_eq!(dropped(&handle), 2 * HOLD_POLLS as u64 + 2);
    hook.action(&frame, &h, 5);
    drop(hook);
    assert_eq!(dropped(&handle), 2 * HOLD_POLLS as u64 + 3);
}

/// A swap's wait: let the holder run, and keep waiting.
fn yield_then_go_on() -> bool {
    std::thread::yield_now();
    true
}

/// IP input hands the hook what it learnt (`LocalIn`), and the hook keys
/// its flow cache from that rather than from the parsed headers: every
/// packet that reaches the hook gets the walk's action and every rule the
/// walk's counts, whichever way a packet came (through IP input, or
/// straight to the hook from the parsed headers, as a GRO chain does),
/// the two ways sharing one cache. TCP with any flags, UDP, ICMP, IPv6,
/// lengths some rules test, frames with and without a flow hash.
#[test]
fn ip_input_and_the_parsed_headers_key_the_cache_alike() {
    use crate::ip::{self, CsumPolicy, CsumStatus, IpConfig, Snmp};
    use rand::SeedableRng;
    let mut rng = rand_pcg::Pcg64Mcg::seed_from_u64(31);
    // No address: every destination is this host's; every protocol goes
    // up (TCP and ICMP reach the hook too).
    let cfg = IpConfig {
        mac: [4; 6],
        addrs: Vec::new(),
        csum: CsumPolicy::Auto,
        local_traffic: false,
        prefixes: Vec::new(),
        default_route: [false; 2],
        deliver_all: true,
        tcp: false,
        any_l2: true,
        local_routes: Vec::new(),
        reasm: Default::default(),
        groups: Default::default(),
        added: Default::default(),
    };
    for (fam, seed) in [(Family::V4, 11), (Family::V4, 12), (Family::V6, 13)] {
        let g = generate(Shape::Fw, fam, 300, 400, 0.8, seed);
        let extra = "*filter\n:INPUT ACCEPT [0:0]\n\
            -A INPUT -p tcp -m tcp --tcp-flags SYN,ACK SYN -j DROP\n\
            -A INPUT -p tcp -m tcp --tcp-flags FIN,PSH FIN,PSH -j REJECT\n\
            -A INPUT -m length --length 100:200 -j DROP\n\
            -A INPUT -p icmp -m icmp --icmp-type 8 -j DROP\n";
        let text = if fam == Family::V4 {
            g.save
                .replacen("*filter\n:INPUT ACCEPT [0:0]\n", extra, 1)
                .replacen("*filter\n:INPUT DROP [0:0]\n", extra, 1)
        } else {
            g.save.clone()
        };
        let texts = vec![("fw".to_string(), text)];
        let load = || Filter::load(&texts, "veth0", FilterMode::Compiled).unwrap();
        let plain = load();
        let handle = std::sync::Arc::new(FilterHandle::new(Some(load())).with_flow_cache(64));
        let mut hook = InputHook::new(handle.clone());
        let (mut through_ip, mut direct) = (0u64, 0u64);
        let pool: Vec<_> = g.traffic.iter().take(48).cloned().collect();
        for k in 0..6000 {
            let (i, p, f) = pick(&mut rng, &pool, fam);
            let Ok(h) = rxpath_wire::parse(&f) else {
                continue;
            };
            let hash = if k % 7 == 0 {
                0
            } else {
                (i as u32 * 7) % 32 + 1
            };
            if rng.gen_bool(0.7) {
                let mut snmp = Snmp::default();
                let mut judged = None;
                let r = ip::input_any_hooked(&f, CsumStatus::None, &cfg, &mut snmp, |fr, at| {
                    let a = hook.action_in(fr, &h, hash, at);
                    judged = Some(a);
                    a.drop_reason()
                });
                // The hook saw every packet IP input let through.
                let a = judged.unwrap_or_else(|| panic!("{r:?}: not judged {p:?}"));
                let want = plain
                    .judge_frame(&f, &h)
                    .map_or(Action::Accept, |v| v.action);
                assert_eq!(a, want, "through IP input: {p:?} {h:?}");
                through_ip += 1;
            } else {
                let want = plain
                    .judge_frame(&f, &h)
                    .map_or(Action::Accept, |v| v.action);
                assert_eq!(hook.action(&f, &h, hash), want, "direct: {p:?} {h:?}");
                direct += 1;
            }
            if k % 16 == 0 {
                hook.release();
            }
        }
        hook.release();
        let (hits, walks) = hook.cache_stats();
        assert!(through_ip > 3000 && direct > 1000);
        assert!(hits > 300 && walks > 500, "{hits} hits, {walks} walks");
        if fam == Family::V4 {
            // A few UDP flows through IP input alone: all but their first
            // packets hit.
            let udp: Vec<_> = pool.iter().filter(|p| p.proto == 17).take(4).collect();
            assert_eq!(udp.len(), 4);
            for k in 0..1000 {
                let p = udp[k % 4];
                let f = p.frame([2; 6], [4; 6], b"payload");
                let h = rxpath_wire::parse(&f).unwrap();
                let want = plain
                    .judge_frame(&f, &h)
                    .map_or(Action::Accept, |v| v.action);
                let mut snmp = Snmp::default();
                let mut judged = None;
                let _ = ip::input_any_hooked(&f, CsumStatus::None, &cfg, &mut snmp, |fr, at| {
                    judged = Some(hook.action_in(fr, &h, k as u32 % 4 + 100, at));
                    None
                });
                assert_eq!(judged, Some(want));
                through_ip += 1;
            }
            hook.release();
            let (h2, w2) = hook.cache_stats();
            assert!(
                h2 - hits >= 990 && w2 - walks <= 10,
                "{} hits, {} walks",
                h2 - hits,
                w2 - walks
            );
        }
        let f = handle.current().unwrap();
        for (a, b) in f.sets().zip(plain.sets()) {
            same_counters(a, b, through_ip + direct, &format!("{fam:?}"));
        }
    }
}
