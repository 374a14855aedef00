//! Thread placement and scheduling class: what benchmarks and the kernel
//! oracle tests use to control who runs when.

use std::io;

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

/// True when running as root (effective uid 0).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}
