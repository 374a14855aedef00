//! Thread placement and scheduling class: what benchmarks and the kernel
//! oracle tests use to control who runs when.

use std::io;
use std::time::Duration;

fn cpu_set(cpu: usize) -> libc::cpu_set_t {
    // SAFETY: cpu_set_t is plain data; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: CPU_SET writes one bit inside `set`; `cpu` is checked below
    // against the set's capacity.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    set
}

/// Pin thread or process `tid` (0: the calling thread) to one CPU.
pub fn pin(tid: i32, cpu: usize) -> io::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "cpu index out of range",
        ));
    }
    let set = cpu_set(cpu);
    // Points to a live cpu_set_t of the size passed.
    syscall!(sched_setaffinity(
        tid,
        std::mem::size_of::<libc::cpu_set_t>(),
        &set as *const libc::cpu_set_t
    ))?;
    Ok(())
}

/// Let the calling thread run on every online CPU again (a process it
/// starts inherits this; a peer started from a pinned bench thread would
/// otherwise share that thread's one core).
pub fn unpin_current() -> io::Result<()> {
    // SAFETY: cpu_set_t is plain data; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    // Online CPUs may be sparse; ask for the whole range the set holds up
    // to a generous bound, the kernel keeps the ones that exist.
    for cpu in 0..(n * 4).clamp(64, libc::CPU_SETSIZE as usize) {
        // SAFETY: CPU_SET writes one bit inside `set`; cpu < CPU_SETSIZE.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // Points to a live cpu_set_t of the size passed.
    syscall!(sched_setaffinity(
        0,
        std::mem::size_of::<libc::cpu_set_t>(),
        &set as *const libc::cpu_set_t
    ))?;
    Ok(())
}

/// Run the calling thread in `SCHED_FIFO` at `priority` (needs
/// CAP_SYS_NICE), or back in `SCHED_OTHER` with `None`.
pub fn set_fifo(priority: Option<i32>) -> io::Result<()> {
    let (policy, prio) = match priority {
        Some(p) => (libc::SCHED_FIFO, p),
        None => (libc::SCHED_OTHER, 0),
    };
    let param = libc::sched_param {
        sched_priority: prio,
    };
    // Points to a live sched_param.
    syscall!(sched_setscheduler(
        0,
        policy,
        &param as *const libc::sched_param
    ))?;
    Ok(())
}

/// Move the calling thread into the network namespace at `path` (e.g.
/// `/run/netns/NAME`, as `ip netns add` makes). Sockets opened afterwards by
/// this thread live in that namespace.
pub fn enter_netns(path: &str) -> io::Result<()> {
    let c = std::ffi::CString::new(path)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path with NUL"))?;
    // The path is a live NUL-terminated string.
    let fd = syscall!(open(c.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC))?;
    let r = syscall!(setns(fd, libc::CLONE_NEWNET));
    // SAFETY: `fd` was opened above and is closed once.
    unsafe { libc::close(fd) };
    r.map(|_| ())
}

/// The CPU the calling thread runs on (`sched_getcpu`).
pub fn current_cpu() -> Option<usize> {
    // SAFETY: sched_getcpu takes no arguments and only reads the caller's
    // CPU number; it returns -1 on failure.
    let c = unsafe { libc::sched_getcpu() };
    usize::try_from(c).ok()
}

/// True when running as root (effective uid 0).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The capabilities opening an interface takes, by number: an AF_XDP or
/// AF_PACKET socket (`CAP_NET_RAW`), loading and attaching the XDP
/// program (`CAP_BPF`, `CAP_NET_ADMIN`, and `CAP_PERFMON`: without it the
/// verifier refuses the program's packet pointer arithmetic), locking the
/// UMEM past `RLIMIT_MEMLOCK` (`CAP_IPC_LOCK`).
pub const NET_CAPS: [(u32, &str); 5] = [
    (12, "CAP_NET_ADMIN"),
    (13, "CAP_NET_RAW"),
    (CAP_BPF, "CAP_BPF"),
    (CAP_PERFMON, "CAP_PERFMON"),
    (14, "CAP_IPC_LOCK"),
];

const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;
const CAP_SYS_ADMIN: u32 = 21;

/// The capabilities of [`NET_CAPS`] that capability mask `set` (as
/// `/proc/PID/status` shows `CapEff`) lacks, by name. On a kernel older
/// than `CAP_BPF` and `CAP_PERFMON` (5.8: `last_cap`,
/// `/proc/sys/kernel/cap_last_cap`, below 39) `CAP_SYS_ADMIN` stands for
/// them (named once).
pub fn missing_caps(set: u64, last_cap: u32) -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for &(n, name) in &NET_CAPS {
        let (n, name) = match n {
            CAP_BPF | CAP_PERFMON if last_cap < CAP_BPF => (CAP_SYS_ADMIN, "CAP_SYS_ADMIN"),
            _ => (n, name),
        };
        if set & (1 << n) == 0 && !out.contains(&name) {
            out.push(name);
        }
    }
    out
}

/// The names of [`NET_CAPS`] on this kernel (`CAP_SYS_ADMIN` for
/// `CAP_BPF` and `CAP_PERFMON` before 5.8, named once).
pub fn net_caps() -> Vec<&'static str> {
    missing_caps(0, cap_last_cap())
}

/// This process's capability set `field` of `/proc/self/status`
/// (`CapEff`, `CapAmb`, `CapBnd`, ...); 0 if it cannot be read.
pub fn cap_set(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0)
}

/// The highest capability this kernel knows
/// (`/proc/sys/kernel/cap_last_cap`); 40 if it cannot be read.
pub fn cap_last_cap() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(40)
}

/// This process's `RLIMIT_MEMLOCK` (soft), bytes; `None`: unlimited.
pub fn memlock_limit() -> Option<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit through a pointer to a live one.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut r) } != 0
        || r.rlim_cur == libc::RLIM_INFINITY
    {
        return None;
    }
    Some(r.rlim_cur)
}

/// Why pinning `bytes` failed, when the memlock limit is the cause: the
/// limit, the size, and what to raise, as one parenthesis-free clause.
pub fn memlock_hint(bytes: usize) -> String {
    let size = |b: u64| match b {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{} GiB", b >> 30),
        b if b >= 1 << 20 => format!("{} MiB", b.div_ceil(1 << 20)),
        b => format!("{} KiB", b.div_ceil(1 << 10)),
    };
    let limit = memlock_limit().map_or("unlimited".to_string(), size);
    format!(
        "RLIMIT_MEMLOCK is {limit} and this pins {}: raise it with `ulimit -l` or \
         `prlimit --memlock`, LimitMEMLOCK= in a systemd unit, or grant CAP_IPC_LOCK",
        size(bytes as u64)
    )
}

/// Send signal `sig` to process `pid` (`kill(2)`).
pub fn signal(pid: u32, sig: i32) -> io::Result<()> {
    let pid =
        libc::pid_t::try_from(pid).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: kill takes two integers; a bad pid or signal is an error.
    if unsafe { libc::kill(pid, sig) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// CPU time (user + system) used so far by the calling process, or by the
/// calling thread with `thread`.
pub fn cpu_time(thread: bool) -> Duration {
    rusage(if thread {
        libc::RUSAGE_THREAD
    } else {
        libc::RUSAGE_SELF
    })
}

/// Give a socket a receive buffer of `bytes` (`SO_RCVBUFFORCE` as root,
/// past `net.core.rmem_max`; else `SO_RCVBUF`, capped by it).
pub fn set_rcvbuf(sock: &std::net::UdpSocket, bytes: usize) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let v = bytes.min(i32::MAX as usize) as libc::c_int;
    let set = |opt| {
        // Points to a live c_int of the size passed; the fd is the live socket.
        syscall!(setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            opt,
            &v as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t
        ))
    };
    set(libc::SO_RCVBUFFORCE)
        .or_else(|_| set(libc::SO_RCVBUF))
        .map(drop)
}

/// Let the program `cmd` starts catch SIGINT and SIGQUIT whatever this
/// process does with them: a process started in the background by a
/// non-interactive shell has them ignored, the child inherits that, and a
/// shell script ignored on entry can never trap them (POSIX), so a peer
/// stopped with SIGINT would never stop.
pub fn default_sigint_in_child(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: runs in the child between fork and exec; it only calls
    // `signal`, which is async-signal-safe, and allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            libc::signal(libc::SIGQUIT, libc::SIG_DFL);
            Ok(())
        });
    }
}

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`): the unit of the
/// utime and stime fields of `/proc/PID/stat`.
pub fn clock_ticks() -> u64 {
    // SAFETY: sysconf reads a constant of the system; no memory is passed.
    let v = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if v > 0 {
        v as u64
    } else {
        100
    }
}

/// CPU time (user + system) of the children waited for so far.
pub fn children_cpu_time() -> Duration {
    rusage(libc::RUSAGE_CHILDREN)
}

fn rusage(who: libc::c_int) -> Duration {
    // SAFETY: rusage is plain data; all-zero is valid.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // Points to a live rusage.
    if syscall!(getrusage(who, &mut ru as *mut libc::rusage)).is_err() {
        return Duration::ZERO;
    }
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Receive UDP datagrams on `sock` with `recvmmsg` (64 at a time) until
/// `deadline`; returns (datagrams, bytes). The kernel socket baseline.
pub fn recvmmsg_until(
    sock: &std::net::UdpSocket,
    deadline: std::time::Instant,
) -> io::Result<(u64, u64)> {
    use std::os::fd::AsRawFd;
    const N: usize = 64;
    let mut bufs = vec![[0u8; 2048]; N];
    // SAFETY: iovec/mmsghdr are plain data; all-zero is valid before we
    // point them at the buffers below.
    let mut iov: Vec<libc::iovec> = bufs
        .iter_mut()
        .map(|b| libc::iovec {
            iov_base: b.as_mut_ptr() as *mut libc::c_void,
            iov_len: b.len(),
        })
        .collect();
    let mut msgs: Vec<libc::mmsghdr> = (0..N)
        // SAFETY: mmsghdr is plain C data (pointers and integers) for
        // which all-zero bytes are a valid, empty value.
        .map(|_| unsafe { std::mem::zeroed() })
        .collect();
    for (m, v) in msgs.iter_mut().zip(iov.iter_mut()) {
        m.msg_hdr.msg_iov = v as *mut libc::iovec;
        m.msg_hdr.msg_iovlen = 1;
    }
    let (mut pkts, mut bytes) = (0u64, 0u64);
    while std::time::Instant::now() < deadline {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 50_000_000,
        };
        // msgs points at N live mmsghdr whose iovecs point at live buffers
        // (`bufs` and `iov` outlive the call); `ts` is a live timespec.
        let r = syscall!(recvmmsg(
            sock.as_raw_fd(),
            msgs.as_mut_ptr(),
            N as u32,
            libc::MSG_WAITFORONE,
            &mut ts as *mut libc::timespec
        ));
        match r {
            Ok(n) => {
                pkts += n as u64;
                bytes += msgs[..n as usize]
                    .iter()
                    .map(|m| m.msg_len as u64)
                    .sum::<u64>();
            }
            Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EINTR)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok((pkts, bytes))
}

/// Does the executable at `path` start with privileges of its own (setuid
/// or setgid, or file capabilities, `security.capability`)? The dynamic
/// linker then runs it without `LD_PRELOAD` (secure-execution mode).
pub fn starts_privileged(path: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let Ok(m) = std::fs::metadata(path) else {
        return false;
    };
    if m.permissions().mode() & 0o6000 != 0 {
        return true;
    }
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // The attribute's size only (a null buffer of length 0).
    let name = c"security.capability";
    matches!(
        syscall!(getxattr(c.as_ptr(), name.as_ptr(), std::ptr::null_mut(), 0)),
        Ok(n) if n > 0
    )
}

#[cfg(test)]
mod cap_tests {
    use super::missing_caps;

    #[test]
    fn the_missing_capabilities_are_named_from_a_mask() {
        // Root's CapEff; the five alone (setpriv --ambient-caps).
        assert!(missing_caps(0x0000_01ff_feff_ffff, 40).is_empty());
        assert!(missing_caps(0x0000_00c0_0000_7000, 40).is_empty());
        assert_eq!(
            missing_caps(1 << 13, 40),
            ["CAP_NET_ADMIN", "CAP_BPF", "CAP_PERFMON", "CAP_IPC_LOCK"]
        );
        // Before 5.8 (no CAP_BPF, CAP_PERFMON) CAP_SYS_ADMIN does both.
        assert_eq!(missing_caps(0x7000, 37), ["CAP_SYS_ADMIN"]);
        assert!(missing_caps(0x7000 | 1 << 21, 37).is_empty());
    }
}
