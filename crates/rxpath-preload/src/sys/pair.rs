//! A UNIX stream socket pair and the calls a relay makes on one end
//! ([`crate::tcp::relay`]): the kernel's own calls, never the program's
//! interposed ones.

use super::{real, Ours};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// A new pair of connected UNIX stream sockets, close-on-exec.
pub(crate) fn socketpair() -> io::Result<(Ours, Ours)> {
    let mut fds = [-1; 2];
    // SAFETY: socketpair writes two fds into the live two-int array.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both fds were just made and are owned by no one else.
    let (a, b) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    Ok((Ours::new(a), Ours::new(b)))
}

/// Look up the C library's calls [`put_at`] and the child's clean-up
/// make, so that a child never runs `dlsym`.
pub(crate) fn resolve_calls() {
    let _ = (real::dup3(), real::fcntl(), real::close());
}

/// Put `src` at number `dst` (closing what was there), keeping `dst`'s
/// close-on-exec flag and setting `O_NONBLOCK` as `nonblock` says.
pub(crate) fn put_at(src: &Ours, dst: RawFd, nonblock: bool) -> io::Result<()> {
    // SAFETY: F_GETFD takes no argument and only reads the fd's flags.
    let fdfl = unsafe { real::fcntl()(dst, libc::F_GETFD) };
    let cloexec = if fdfl > 0 && fdfl & libc::FD_CLOEXEC != 0 {
        libc::O_CLOEXEC
    } else {
        0
    };
    // SAFETY: duplicates a live fd onto `dst`, which the caller gives up.
    if unsafe { real::dup3()(src.as_raw_fd(), dst, cloexec) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: F_GETFL/F_SETFL read and set the file's status flags.
    unsafe {
        let fl = real::fcntl()(dst, libc::F_GETFL);
        let fl = if nonblock {
            fl | libc::O_NONBLOCK
        } else {
            fl & !libc::O_NONBLOCK
        };
        real::fcntl()(dst, libc::F_SETFL, fl);
    }
    Ok(())
}

/// `recv` into `buf`, waiting (0 at the end of the stream).
pub(crate) fn recv(fd: &Ours, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        // SAFETY: `buf` is live and writable for its length.
        let n = unsafe { real::recv()(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Send all of `buf`, waiting for room (`EPIPE` once the other end is
/// gone, with no `SIGPIPE`).
pub(crate) fn send_all(fd: &Ours, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        // SAFETY: `buf` is live and readable for its length.
        let n = unsafe {
            real::send()(
                fd.as_raw_fd(),
                buf.as_ptr().cast(),
                buf.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        buf = &buf[n as usize..];
    }
    Ok(())
}

/// `shutdown(fd, SHUT_WR)`: the other end reads the end of the stream.
pub(crate) fn shut_write(fd: &Ours) {
    // SAFETY: shutdown on a live fd; an error (already shut) is harmless.
    unsafe { real::shutdown()(fd.as_raw_fd(), libc::SHUT_WR) };
}

/// `shutdown(fd, SHUT_RD)`: the other end's writes fail (`EPIPE`).
pub(crate) fn shut_read(fd: &Ours) {
    // SAFETY: shutdown on a live fd; an error (already shut) is harmless.
    unsafe { real::shutdown()(fd.as_raw_fd(), libc::SHUT_RD) };
}

/// The socket's pending error (`SO_ERROR`, which reading clears), if any.
pub(crate) fn take_error(fd: &Ours) -> Option<i32> {
    super::sockopt_int(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_ERROR).filter(|&e| e != 0)
}

/// What `poll` says of `fd` now: (hung up, readable). A UNIX stream
/// socket is hung up once both directions are shut: the other end
/// closed, or it shut its writing and this end shut its own.
pub(crate) fn state(fd: &Ours) -> (bool, bool) {
    let mut p = [libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    }];
    match super::kpoll(&mut p, 0) {
        Err(_) => (true, false),
        Ok(_) => {
            let r = p[0].revents;
            (r & libc::POLLHUP != 0, r & libc::POLLIN != 0)
        }
    }
}

/// Wait until `fd` is hung up ([`state`]).
pub(crate) fn wait_hangup(fd: &Ours) {
    let mut p = [libc::pollfd {
        fd: fd.as_raw_fd(),
        // Only the hang-up is asked for (POLLHUP is always reported).
        events: 0,
        revents: 0,
    }];
    loop {
        match super::kpoll(&mut p, -1) {
            Ok(0) => continue,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            _ => return,
        }
    }
}

/// The inode of the file behind `fd` (a socket's, shared by its dups).
pub(crate) fn inode(fd: RawFd) -> Option<u64> {
    // SAFETY: all-zero storage is a valid `stat` for fstat to fill.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes into the live `st`.
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some(st.st_ino)
}
