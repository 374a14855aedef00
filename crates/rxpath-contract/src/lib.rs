//! What `rxpath exec` and the preload library it puts into a program
//! (`librxpath_preload.so`) agree on, written once for both sides:
//!
//! - [`options`]: every setting of the preload, each defined once (its
//!   TOML key and `exec` flag, environment variable, default, range and
//!   doc), as Onload's `opts_citp_def.h` defines its `EF_*` options. The
//!   variables `exec` sets, the TOML file both read, `exec`'s checks
//!   before the program starts and the guide's table all come from it.
//! - [`config`]: the [`Config`] the options give, read from variables or
//!   a file and written back as variables; [`values`], the types of
//!   their values.
//! - [`report`]: what the preload writes at exit and `exec` reads.
//! - [`ctl`]: the control socket's requests and replies.
//!
//! No `unsafe`, no symbol of its own in a program: both sides link it.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod config;
pub mod ctl;
pub mod options;
pub mod report;
pub mod values;

pub use config::Config;
pub use options::{Kind, Opt, OptError, OPTIONS};
pub use report::PreloadReport;
pub use values::{Mode, Profile, Protocols, Rule};
