//! The capture reader (classic pcap and pcapng) on arbitrary files: never
//! a panic or a runaway allocation; an error or a trace, and a trace holds
//! no byte the file did not (its packets together are no larger than the
//! file) and starts at time zero (times are since the first packet).

#![no_main]

use libfuzzer_sys::fuzz_target;
use rxpath_dev::pcap::Trace;

fuzz_target!(|data: &[u8]| {
    let Ok(t) = Trace::read(data, "fuzz") else {
        return;
    };
    let bytes: usize = t.packets.iter().map(|p| p.1.len()).sum();
    assert!(
        bytes <= data.len(),
        "{bytes} packet bytes from a {}-byte file",
        data.len()
    );
    if let Some(first) = t.packets.first() {
        assert_eq!(
            first.0,
            std::time::Duration::ZERO,
            "times since the first packet"
        );
    }
});
