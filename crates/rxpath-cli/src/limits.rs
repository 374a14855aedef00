//! The kernel's bounds on the knobs the commands set, shared by their
//! flags and `rxpath ctl set`.

/// `net.core.netdev_budget` and `net.core.netdev_budget_usecs` (the
/// flags and `rxpath ctl set`): the kernel's ints, from 1 (0 polls
/// nothing, or makes every net_rx_action a time_squeeze).
pub const NETDEV_BUDGET: std::ops::RangeInclusive<u64> = 1..=i32::MAX as u64;

/// `gro_flush_timeout`, ns (the flag, `--gro-adaptive`'s maximum and
/// `rxpath ctl set`): up to a second; past that it is not a flush
/// timeout, and near 2^64 its deadline overflows.
pub const GRO_FLUSH_TIMEOUT_NS: std::ops::RangeInclusive<u64> = 0..=1_000_000_000;

/// A busy-poll time, µs: `SO_BUSY_POLL` and `net.core.busy_read` are
/// ints of 0 or more.
pub const BUSY_POLL_US: std::ops::RangeInclusive<u64> = 0..=i32::MAX as u64;
