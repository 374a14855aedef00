//! The packet parsers on arbitrary frames: never a panic; the fast path and
//! the general walk agree; every offset a parse returns lies inside the
//! frame; the filter's key and the flow hash read only what was parsed.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rxpath_wire::parse::{parse, parse_general};

fuzz_target!(|frame: &[u8]| {
    let fast = parse(frame);
    let general = parse_general(frame);
    assert_eq!(fast, general, "fast path and general walk disagree");
    let Ok(h) = fast else { return };
    let len = frame.len();
    assert!(h.l3_offset as usize <= len, "l3 offset past the frame");
    assert!(h.l4_offset as usize <= len, "l4 offset past the frame");
    assert!(h.l3_offset <= h.l4_offset && h.l4_offset <= h.payload_offset);
    assert!(
        h.payload_offset as usize + h.payload_len as usize <= len,
        "payload past the frame: {h:?}, {len} bytes"
    );
    let hash = rxpath_wire::hash::flow_hash(&h.flow);
    assert_ne!(hash, 0, "a flow hash is never 0");
    if let Some(k) = rxpath_core::filter::key(frame, &h) {
        assert_eq!(k.proto, h.flow.protocol);
    }
});
