//! Sequence-number arithmetic modulo 2³², as `before()`/`after()` in
//! `include/net/tcp.h`.

/// `a` comes before `b` in sequence space.
#[inline]
pub fn before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// `a` comes after `b` in sequence space.
#[inline]
pub fn after(a: u32, b: u32) -> bool {
    before(b, a)
}

/// `lo <= x <= hi` in sequence space (`between()` in the kernel).
#[inline]
pub fn between(x: u32, lo: u32, hi: u32) -> bool {
    hi.wrapping_sub(lo) >= x.wrapping_sub(lo)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_around() {
        assert!(before(u32::MAX, 0));
        assert!(after(0, u32::MAX));
        assert!(!before(5, 5));
        assert!(between(1, u32::MAX, 3));
        assert!(!between(4, u32::MAX, 3));
    }
}
