//! The machine's clock: whatever the driver passes in.

/// Time in nanoseconds from an origin the driver chooses (the machine
/// only compares and subtracts).
pub type Nanos = u64;
