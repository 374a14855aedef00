//! The capture reader (classic pcap and pcapng) on arbitrary files: never
//! a panic or a runaway allocation; an error or a trace.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rxpath_dev::pcap::Trace;

fuzz_target!(|data: &[u8]| {
    let Ok(t) = Trace::read(data, "fuzz") else {
        return;
    };
    for w in t.packets.windows(2) {
        let _ = w[1].0.checked_sub(w[0].0);
    }
});
