//! sockperf's message framing, as its server answers: what `rxpath echo`
//! (UDP and `--tcp`) and the benches' kernel echoes share.

/// sockperf's message header: sequence (u64), flags (u16), length (u32),
/// network order.
pub const SOCKPERF_HEADER: usize = 14;
/// Set by the client in its messages; the server clears it.
pub const SOCKPERF_CLIENT: u16 = 0x1;
/// The client wants an answer to this message.
pub const SOCKPERF_PONG_REQUEST: u16 = 0x2;

/// The sockperf server's answer to `msg`, in place: `false` if the message
/// gets none (too short to be sockperf's, or no answer requested).
pub fn sockperf_reply(msg: &mut [u8]) -> bool {
    if msg.len() < SOCKPERF_HEADER {
        return false;
    }
    let flags = u16::from_be_bytes([msg[8], msg[9]]);
    if flags & SOCKPERF_PONG_REQUEST == 0 {
        return false;
    }
    msg[8..10].copy_from_slice(&(flags & !SOCKPERF_CLIENT).to_be_bytes());
    true
}
