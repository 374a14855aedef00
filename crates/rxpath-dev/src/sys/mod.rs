//! The only place in rxpath where `unsafe` lives: the frame region and the
//! descriptor rings that move frame ownership between threads (and, later,
//! AF_XDP and AF_PACKET sockets). Every `unsafe` block carries a
//! `// SAFETY:` line.

pub mod ring;
pub mod umem;
