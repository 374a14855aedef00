//! The `bpf()` system call as rxpath's programs use it: an object built by
//! clang (checked in beside its C source) read with the `object` crate,
//! its maps' descriptors and its `.rodata` put where its relocations say,
//! maps made and updated, programs loaded with the verifier's words kept
//! for the error.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

pub(in crate::sys) const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_MAP_DELETE_ELEM: libc::c_long = 3;
const BPF_PROG_LOAD: libc::c_long = 5;
pub(in crate::sys) const BPF_LINK_CREATE: libc::c_long = 28;
pub(in crate::sys) const BPF_MAP_TYPE_HASH: u32 = 1;
pub(in crate::sys) const BPF_MAP_TYPE_ARRAY: u32 = 2;
pub(in crate::sys) const BPF_MAP_TYPE_PERCPU_ARRAY: u32 = 6;

/// One BPF instruction.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(in crate::sys) struct Insn {
    pub code: u8,
    pub regs: u8,
    pub off: i16,
    pub imm: i32,
}

pub(in crate::sys) const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        regs: dst | (src << 4),
        off,
        imm,
    }
}

/// `BPF_PSEUDO_MAP_FD`: a 64-bit immediate load of a map.
pub(in crate::sys) const PSEUDO_MAP_FD: u8 = 1;
/// `BPF_PSEUDO_MAP_VALUE`: a 64-bit immediate load of an address in a
/// map's value (the program's `.rodata`).
pub(in crate::sys) const PSEUDO_MAP_VALUE: u8 = 2;

/// A program in an object: its instructions, the object's `.rodata` (with
/// the configuration at `cfg`), and the loads its relocations patch.
#[derive(Debug)]
pub(in crate::sys) struct Object {
    pub insns: Vec<Insn>,
    pub rodata: Vec<u8>,
    /// `cfg`'s offset in `.rodata`.
    pub cfg: usize,
    /// Each 64-bit immediate load to patch: its index and what it loads.
    pub relocs: Vec<(usize, Target)>,
}

/// What a relocated load names.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(in crate::sys) enum Target {
    /// The map of this index in the names given to [`Object::parse`].
    Map(usize),
    /// An address in `.rodata`, this many bytes in.
    Rodata(u32),
}

fn bad(what: impl std::fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("the BPF object: {what}"),
    )
}

impl Object {
    /// Read section `section` of `bytes` (an object built by clang), its
    /// `.rodata`, and its relocations against the maps named `maps` and
    /// against `.rodata`.
    pub fn parse(bytes: &[u8], section: &str, maps: &[&str]) -> io::Result<Object> {
        use object::{Object as _, ObjectSection as _, ObjectSymbol as _};
        let f = object::File::parse(bytes).map_err(bad)?;
        let text = f
            .section_by_name(section)
            .ok_or_else(|| bad(format!("no section {section}")))?;
        let code = text.data().map_err(bad)?;
        let insns = code
            .chunks_exact(8)
            .map(|c| Insn {
                code: c[0],
                regs: c[1],
                off: i16::from_le_bytes([c[2], c[3]]),
                imm: i32::from_le_bytes([c[4], c[5], c[6], c[7]]),
            })
            .collect::<Vec<_>>();
        let ro = f
            .section_by_name(".rodata")
            .ok_or_else(|| bad("no .rodata"))?;
        let rodata = ro.data().map_err(bad)?.to_vec();
        let cfg = f
            .symbols()
            .find(|s| s.name() == Ok("cfg"))
            .ok_or_else(|| bad("no symbol cfg"))?
            .address() as usize;
        if cfg + 8 > rodata.len() {
            return Err(bad("cfg is not in .rodata"));
        }
        let mut relocs = Vec::new();
        for (off, r) in text.relocations() {
            let object::RelocationTarget::Symbol(si) = r.target() else {
                return Err(bad("a relocation not against a symbol"));
            };
            let sym = f.symbol_by_index(si).map_err(bad)?;
            let at = off as usize / 8;
            let name = sym.name().map_err(bad)?;
            let target = match maps.iter().position(|m| *m == name) {
                Some(i) => Target::Map(i),
                None if sym.section_index() == Some(ro.index()) => {
                    let imm = insns
                        .get(at)
                        .ok_or_else(|| bad("a relocation past the code"))?
                        .imm;
                    Target::Rodata(sym.address() as u32 + imm as u32)
                }
                None => return Err(bad(format!("a relocation against {name}"))),
            };
            if insns.get(at).map(|i| i.code) != Some(0x18) || at + 1 >= insns.len() {
                return Err(bad("a relocation not on a 64-bit immediate load"));
            }
            relocs.push((at, target));
        }
        Ok(Object {
            insns,
            rodata,
            cfg,
            relocs,
        })
    }

    /// The instructions with the maps' descriptors (in the order of the
    /// names given to [`Object::parse`]) and `.rodata`'s in their loads.
    pub fn linked(&self, maps: &[RawFd], rodata: RawFd) -> Vec<Insn> {
        let mut p = self.insns.clone();
        for &(at, t) in &self.relocs {
            let (src, fd, off) = match t {
                Target::Map(i) => (PSEUDO_MAP_FD, maps[i], 0),
                Target::Rodata(off) => (PSEUDO_MAP_VALUE, rodata, off as i32),
            };
            p[at].regs = (p[at].regs & 0x0f) | (src << 4);
            p[at].imm = fd;
            p[at + 1].imm = off;
        }
        p
    }
}

/// Load `insns` as a program of type `prog_type` (attached later as
/// `attach`); when the kernel refuses it, the error carries what its
/// verifier said.
pub(in crate::sys) fn load(
    prog_type: u32,
    attach: u32,
    insns: &[Insn],
    what: &str,
) -> io::Result<OwnedFd> {
    let license = b"GPL\0";
    let mut a = [0u64; 16];
    put32(&mut a, 0, prog_type);
    put32(&mut a, 4, insns.len() as u32);
    a[1] = insns.as_ptr() as u64;
    a[2] = license.as_ptr() as u64;
    put32(&mut a, 68, attach);
    prog_load(&mut a).map_err(|e| with_hint(e, &format!("loading {what}{}", verifier_log(a))))
}

/// `BPF_PROG_LOAD`, tried again while the kernel says `EAGAIN`: its
/// verifier gives up with that when a signal arrives while it walks the
/// program (a child's `SIGCHLD`, a timer), which says nothing about the
/// program. libbpf tries five times; a long walk in a busy process may
/// meet more signals than that, so this tries a few more.
fn prog_load(attr: &mut [u64; 16]) -> io::Result<OwnedFd> {
    let mut tries = 16;
    loop {
        match bpf(BPF_PROG_LOAD, attr) {
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) && tries > 1 => tries -= 1,
            done => return done,
        }
    }
}

/// A map of `kind` with `key`- and `value`-byte entries, `entries` of them.
pub(in crate::sys) fn map(kind: u32, key: u32, value: u32, entries: u32) -> io::Result<OwnedFd> {
    let mut a = [0u64; 16];
    put32(&mut a, 0, kind);
    put32(&mut a, 4, key);
    put32(&mut a, 8, value);
    put32(&mut a, 12, entries);
    bpf(BPF_MAP_CREATE, &mut a)
}

/// Set `key` to `value` in `map`.
pub(in crate::sys) fn update(map: RawFd, key: &[u8], value: &[u8]) -> io::Result<()> {
    let mut a = [0u64; 16];
    put32(&mut a, 0, map as u32);
    a[1] = key.as_ptr() as u64;
    a[2] = value.as_ptr() as u64;
    bpf_raw(BPF_MAP_UPDATE_ELEM, &mut a).map(drop)
}

/// Remove `key` from `map`; a key not there is no error.
pub(in crate::sys) fn delete(map: RawFd, key: &[u8]) -> io::Result<()> {
    let mut a = [0u64; 16];
    put32(&mut a, 0, map as u32);
    a[1] = key.as_ptr() as u64;
    match bpf_raw(BPF_MAP_DELETE_ELEM, &mut a) {
        Err(e) if e.raw_os_error() != Some(libc::ENOENT) => Err(e),
        _ => Ok(()),
    }
}

/// A frozen one-entry array map holding `value`, which programs may only
/// read (`BPF_F_RDONLY_PROG`): the verifier then knows its bytes.
pub(in crate::sys) fn rodata_map(value: &[u8]) -> io::Result<OwnedFd> {
    const BPF_F_RDONLY_PROG: u32 = 1 << 7;
    const BPF_MAP_FREEZE: libc::c_long = 22;
    let mut a = [0u64; 16];
    put32(&mut a, 0, BPF_MAP_TYPE_ARRAY);
    put32(&mut a, 4, 4);
    put32(&mut a, 8, value.len() as u32);
    put32(&mut a, 12, 1);
    put32(&mut a, 16, BPF_F_RDONLY_PROG);
    let map = bpf(BPF_MAP_CREATE, &mut a).map_err(|e| with_hint(e, "creating the .rodata map"))?;
    update(map.as_raw_fd(), &0u32.to_ne_bytes(), value)
        .map_err(|e| with_hint(e, "filling the .rodata map"))?;
    let mut a = [0u64; 16];
    put32(&mut a, 0, map.as_raw_fd() as u32);
    bpf_raw(BPF_MAP_FREEZE, &mut a).map_err(|e| with_hint(e, "freezing the .rodata map"))?;
    Ok(map)
}

/// Load the program described by `attr` again with the verifier's log on,
/// for the error: what the verifier said (its last lines), or nothing.
fn verifier_log(mut attr: [u64; 16]) -> String {
    let mut log = vec![0u8; 1 << 16];
    put32(&mut attr, 24, 1); // log_level
    put32(&mut attr, 28, log.len() as u32); // log_size
    attr[4] = log.as_mut_ptr() as u64; // log_buf
    if let Ok(fd) = prog_load(&mut attr) {
        drop(fd);
        return String::new();
    }
    let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
    let text = String::from_utf8_lossy(&log[..end]);
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(12)..].join("\n  ");
    if tail.is_empty() {
        String::new()
    } else {
        format!("; the verifier says:\n  {tail}")
    }
}

pub(in crate::sys) fn bpf_raw(cmd: libc::c_long, attr: &mut [u64; 16]) -> io::Result<libc::c_long> {
    // The attribute block is a live, zero-padded 128-byte buffer, larger
    // than every bpf_attr variant used here.
    syscall!(syscall(
        libc::SYS_bpf,
        cmd,
        attr.as_mut_ptr() as *mut libc::c_void,
        128usize
    ))
}

/// A `bpf()` command that returns a new descriptor.
pub(in crate::sys) fn bpf(cmd: libc::c_long, attr: &mut [u64; 16]) -> io::Result<OwnedFd> {
    let fd = bpf_raw(cmd, attr)?;
    // SAFETY: these commands return a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

pub(in crate::sys) fn put32(attr: &mut [u64; 16], byte_off: usize, v: u32) {
    let w = &mut attr[byte_off / 8];
    let shift = (byte_off % 8) * 8;
    *w = (*w & !(0xffff_ffffu64 << shift)) | (v as u64) << shift;
}

/// `e` with what was being done, and a hint for the errors a user can
/// act on.
pub(in crate::sys) fn with_hint(e: io::Error, what: &str) -> io::Error {
    let hint = match e.raw_os_error() {
        Some(libc::EPERM) => " (needs root or CAP_BPF + CAP_NET_ADMIN)",
        Some(libc::EBUSY) | Some(libc::EEXIST) => {
            " (the interface or queue is held by another XDP program or AF_XDP socket, \
             perhaps another rxpath: `ip link show IF` names the program; a BPF link goes \
             with its process, `ip link set dev IF xdp off` removes a plain attachment)"
        }
        Some(libc::ENOBUFS) | Some(libc::ENOMEM) => {
            " (RLIMIT_MEMLOCK too low to pin the frame region: raise it with `ulimit -l`, \
             LimitMEMLOCK= in a systemd unit, or grant CAP_IPC_LOCK)"
        }
        Some(libc::EOPNOTSUPP) => " (XDP not supported on this device)",
        _ => "",
    };
    io::Error::new(e.kind(), format!("{what}: {e}{hint}"))
}
