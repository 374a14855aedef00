//! The frames crate's `unsafe`, all of it: the frame region and the
//! descriptor rings that move frame ownership between threads, and the
//! clock read from the vDSO. Every `unsafe` block carries a `// SAFETY:`
//! line.

pub mod clock;
pub mod ring;
pub mod umem;
