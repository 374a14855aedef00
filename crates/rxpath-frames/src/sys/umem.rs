//! The frame pool: fixed-size frames in one region, like an AF_XDP UMEM.
//!
//! Ownership is carried by [`Frame`] tokens. A token is not `Clone`; the
//! region hands out exactly one token per frame when it is created, and the
//! only other way to make one is [`Frame::from_raw`] (`unsafe`, used by the
//! descriptor rings that move tokens between threads as integers). So at any
//! moment exactly one party holds each frame: the free list, a fill ring (the
//! device's to write), an RX ring, the stack, or a TX ring. Reading or writing
//! a frame's bytes requires its token, which is what makes the shared region
//! sound without locks.
//!
//! The lifecycle, the same for the simulated NIC and AF_XDP:
//!
//! ```text
//!  free list ──▶ fill ring ──▶ device writes ──▶ RX ring ──▶ NAPI / stack ──┐
//!      ▲                                                                    │
//!      └──────────────────────── recycle (drop or consumed) ◀──────────────┘
//! ```
//!
//! "Every frame comes home": after a run is stopped and its rings drained,
//! [`FramePool::is_home`] holds, and the tests check it.

use std::alloc::{self, Layout};
use std::cell::UnsafeCell;
use std::fmt;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// Default frame size, as AF_XDP's default chunk.
pub const DEFAULT_FRAME_SIZE: usize = 2048;

static NEXT_UMEM_ID: AtomicU32 = AtomicU32::new(1);

/// Errors creating a region.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UmemError {
    /// Frame size not a power of two in 512..=65536, or count 0 / too large.
    #[error("bad UMEM geometry: {frames} frames of {frame_size} bytes (frame size must be a power of two in 512..=65536, count in 1..=2^24)")]
    Geometry {
        /// Requested frames.
        frames: usize,
        /// Requested frame size.
        frame_size: usize,
    },
    /// The allocation failed.
    #[error("cannot allocate {0} bytes for the UMEM")]
    Alloc(usize),
}

/// A region of `frames × frame_size` bytes, page aligned.
pub struct Umem {
    ptr: NonNull<UnsafeCell<u8>>,
    layout: Layout,
    frame_size: usize,
    frames: u32,
    id: u32,
}

// SAFETY: the region is plain memory; all access goes through `data` and
// `data_mut`, which require the frame's unique token (shared access via `&Frame`,
// exclusive via `&mut Frame`), so two threads never alias a frame mutably.
unsafe impl Send for Umem {}
// SAFETY: see `Send`: the token discipline makes `&Umem` usable from many threads.
unsafe impl Sync for Umem {}

impl fmt::Debug for Umem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Umem")
            .field("frames", &self.frames)
            .field("frame_size", &self.frame_size)
            .field("id", &self.id)
            .finish()
    }
}

/// Ownership of one frame of one [`Umem`]. Not `Clone`: whoever holds it owns
/// the frame's bytes.
///
/// One word (the index in the low half, the region's id in the high): a
/// token is copied whole from descriptor to packet to recycle list, and a
/// pair of halves written apart and read back as one word stalls the load
/// (a failed store-to-load forward, per packet).
#[derive(PartialEq, Eq)]
pub struct Frame {
    raw: u64,
}

impl fmt::Debug for Frame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Frame({}@{})", self.index(), self.umem_id())
    }
}

impl Frame {
    #[inline]
    fn new(index: u32, umem: u32) -> Frame {
        Frame {
            raw: index as u64 | (umem as u64) << 32,
        }
    }

    /// Index of the frame in its region.
    #[inline]
    pub fn index(&self) -> u32 {
        self.raw as u32
    }

    /// Identity of the region the frame belongs to.
    #[inline]
    pub fn umem_id(&self) -> u32 {
        (self.raw >> 32) as u32
    }

    /// Give up the token as `(index, umem id)`, e.g. to put it in a ring.
    #[inline]
    pub fn into_raw(self) -> (u32, u32) {
        (self.index(), self.umem_id())
    }

    /// Rebuild a token from [`into_raw`](Self::into_raw)'s output.
    ///
    /// # Safety
    /// The pair must come from `into_raw` of a token that is not alive any
    /// more, and must be used once: two live tokens for one frame would let
    /// two parties write the same bytes.
    #[inline]
    pub unsafe fn from_raw(index: u32, umem: u32) -> Frame {
        Frame::new(index, umem)
    }
}

impl Umem {
    /// Allocate a zeroed region and return it with one token per frame.
    pub fn new(frames: usize, frame_size: usize) -> Result<(Arc<Umem>, Vec<Frame>), UmemError> {
        if !frame_size.is_power_of_two()
            || !(512..=65536).contains(&frame_size)
            || frames == 0
            || frames > 1 << 24
        {
            return Err(UmemError::Geometry { frames, frame_size });
        }
        let size = frames * frame_size;
        let layout = Layout::from_size_align(size, 4096).map_err(|_| UmemError::Alloc(size))?;
        // SAFETY: `layout` has a non-zero size (frames ≥ 1, frame_size ≥ 512).
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw.cast::<UnsafeCell<u8>>()).ok_or(UmemError::Alloc(size))?;
        let id = NEXT_UMEM_ID.fetch_add(1, Ordering::Relaxed);
        let umem = Arc::new(Umem {
            ptr,
            layout,
            frame_size,
            frames: frames as u32,
            id,
        });
        let tokens = (0..frames as u32)
            .map(|index| Frame::new(index, id))
            .collect();
        Ok((umem, tokens))
    }

    #[inline]
    /// Number of frames.
    pub fn frames(&self) -> usize {
        self.frames as usize
    }

    #[inline]
    /// Bytes per frame.
    pub fn frame_size(&self) -> usize {
        self.frame_size
    }

    #[inline]
    /// Identity used to check that tokens belong to this region.
    pub fn id(&self) -> u32 {
        self.id
    }

    #[inline]
    /// Base address and length of the region (for registering it with the
    /// kernel as an AF_XDP UMEM).
    pub fn region(&self) -> (*mut u8, usize) {
        (self.ptr.as_ptr().cast(), self.layout.size())
    }

    /// Offset of a frame in the region (an AF_XDP descriptor address).
    #[inline]
    pub fn addr(&self, f: &Frame) -> u64 {
        f.index() as u64 * self.frame_size as u64
    }

    #[inline(always)]
    fn check(&self, f: &Frame) {
        // A token of another region is a programming error, not bad input.
        if f.umem_id() != self.id || f.index() >= self.frames {
            self.not_mine(f.index(), f.umem_id());
        }
    }

    /// The panic of [`check`](Self::check), out of line and given the
    /// token's fields by value: a panic message that borrowed the token
    /// would make every caller keep its descriptor in memory (read back
    /// through a failed store forward) instead of in registers.
    #[cold]
    #[inline(never)]
    fn not_mine(&self, index: u32, umem: u32) -> ! {
        panic!("Frame({index}@{umem}) is not a frame of {self:?}")
    }

    /// The bytes of a frame.
    #[inline(always)]
    pub fn data<'a>(&'a self, f: &'a Frame) -> &'a [u8] {
        self.check(f);
        // SAFETY: `check` bounds the slice inside the region. `f` is the only
        // token of this frame and is borrowed shared for 'a, so no `&mut` to
        // these bytes can exist for 'a (that needs `&mut Frame`).
        unsafe {
            let p = self.ptr.as_ptr().add(f.index() as usize * self.frame_size);
            std::slice::from_raw_parts(UnsafeCell::raw_get(p), self.frame_size)
        }
    }

    /// The bytes of a frame, writable.
    #[inline]
    pub fn data_mut<'a>(&'a self, f: &'a mut Frame) -> &'a mut [u8] {
        self.check(f);
        // SAFETY: as in `data`; `f` is borrowed exclusively for 'a, so this is
        // the only reference to these bytes for 'a.
        unsafe {
            let p = self.ptr.as_ptr().add(f.index() as usize * self.frame_size);
            std::slice::from_raw_parts_mut(UnsafeCell::raw_get(p), self.frame_size)
        }
    }

    /// Hint the CPU to start loading the first cache line of a frame at
    /// `offset` (the RX bulking seed's `prefetch(skb->data)`). Never faults.
    #[inline(always)]
    pub fn prefetch(&self, f: &Frame, offset: usize) {
        #[cfg(target_arch = "x86_64")]
        {
            // No bounds check on the hot path: the address is formed with
            // wrapping arithmetic (never dereferenced), and a prefetch of
            // any address is harmless.
            let off = f.index() as usize * self.frame_size + (offset & (self.frame_size - 1));
            let p = self.ptr.as_ptr().cast::<i8>().wrapping_add(off);
            // SAFETY: a prefetch reads nothing architecturally and cannot
            // fault, whatever the address.
            unsafe { std::arch::x86_64::_mm_prefetch(p, std::arch::x86_64::_MM_HINT_T0) };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (f, offset);
    }
}

impl Umem {
    /// Hint the CPU to fetch a frame's first cache line for writing (the
    /// simulated NIC does this for frames it is about to fill). Never faults.
    #[inline(always)]
    pub fn prefetch_write(&self, f: &Frame) {
        #[cfg(target_arch = "x86_64")]
        {
            let off = f.index() as usize * self.frame_size;
            if off < self.layout.size() {
                // SAFETY: `off` is inside the region; a prefetch cannot fault.
                unsafe {
                    let p = self.ptr.as_ptr().add(off).cast::<i8>();
                    std::arch::x86_64::_mm_prefetch(p, std::arch::x86_64::_MM_HINT_ET0);
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = f;
    }
}

impl Drop for Umem {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout; `Umem` is only dropped
        // when the last `Arc` goes, so no slice into it is alive.
        unsafe { alloc::dealloc(self.ptr.as_ptr().cast(), self.layout) }
    }
}

/// The consumer side's free list of frames, with the count that says whether
/// every frame has come home.
#[derive(Debug)]
pub struct FramePool {
    umem: Arc<Umem>,
    free: Vec<Frame>,
}

impl FramePool {
    /// A pool over a new region, all frames free.
    pub fn new(frames: usize, frame_size: usize) -> Result<Self, UmemError> {
        let (umem, free) = Umem::new(frames, frame_size)?;
        Ok(FramePool { umem, free })
    }

    /// A pool over an existing region holding `frames` (e.g. gathered back
    /// from a stopped device).
    pub fn from_frames(umem: Arc<Umem>, frames: Vec<Frame>) -> Self {
        for f in &frames {
            assert_eq!(f.umem_id(), umem.id, "{f:?} returned to the wrong pool");
        }
        FramePool { umem, free: frames }
    }

    #[inline]
    /// The region.
    pub fn umem(&self) -> &Arc<Umem> {
        &self.umem
    }

    /// Take a free frame.
    #[inline]
    pub fn alloc(&mut self) -> Option<Frame> {
        self.free.pop()
    }

    /// Return a frame.
    #[inline]
    pub fn free(&mut self, f: Frame) {
        assert_eq!(
            f.umem_id(),
            self.umem.id,
            "{f:?} returned to the wrong pool"
        );
        self.free.push(f);
    }

    #[inline]
    /// Frames currently free.
    pub fn available(&self) -> usize {
        self.free.len()
    }

    #[inline]
    /// True when every frame of the region is back in this pool.
    pub fn is_home(&self) -> bool {
        self.free.len() == self.umem.frames()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_give_distinct_frames() {
        let mut pool = FramePool::new(4, 2048).unwrap();
        let umem = pool.umem().clone();
        let mut a = pool.alloc().unwrap();
        let mut b = pool.alloc().unwrap();
        umem.data_mut(&mut a)[0] = 1;
        umem.data_mut(&mut b)[0] = 2;
        assert_eq!(umem.data(&a)[0], 1);
        assert_eq!(umem.data(&b)[0], 2);
        assert_eq!(umem.addr(&a).abs_diff(umem.addr(&b)), 2048);
        assert!(!pool.is_home());
        pool.free(a);
        pool.free(b);
        assert!(pool.is_home());
    }

    #[test]
    fn geometry_checked() {
        assert!(matches!(
            Umem::new(0, 2048),
            Err(UmemError::Geometry { .. })
        ));
        assert!(matches!(
            Umem::new(8, 1000),
            Err(UmemError::Geometry { .. })
        ));
        assert!(matches!(Umem::new(8, 256), Err(UmemError::Geometry { .. })));
    }

    #[test]
    #[should_panic(expected = "is not a frame of")]
    fn foreign_token_is_refused() {
        let pool_a = FramePool::new(2, 2048).unwrap();
        let mut pool_b = FramePool::new(2, 2048).unwrap();
        let f = pool_b.alloc().unwrap();
        let _ = pool_a.umem().data(&f);
    }
}
