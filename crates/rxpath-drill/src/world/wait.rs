//! The waiting calls of the virtual world: `poll` and the epoll sets.

use super::*;

impl Shared {
    /// `poll`: `fds` as (fd, requested events); the returned events per
    /// entry, waiting up to `timeout_ms` (virtual; negative: forever).
    pub fn poll(&self, fds: &[(i32, u32)], timeout_ms: i32) -> Result<Vec<u32>, Errno> {
        let always = (libc::POLLERR | libc::POLLHUP) as u32 | POLLNVAL;
        let scan = |w: &mut World| -> Vec<u32> {
            fds.iter()
                .map(|&(fd, ev)| w.events(fd) & (ev | always))
                .collect()
        };
        let deadline = {
            let w = self.lock();
            (timeout_ms >= 0).then(|| w.now + timeout_ms as u64 * 1_000_000)
        };
        let r = self.block(timeout_ms == 0, deadline, |w| {
            let r = scan(w);
            if r.iter().any(|&e| e != 0) {
                Ok(r)
            } else {
                Err(libc::EAGAIN)
            }
        });
        match r {
            Ok(Some(v)) => Ok(v),
            Ok(None) | Err(libc::EAGAIN) => Ok(vec![0; fds.len()]),
            Err(e) => Err(e),
        }
    }

    /// `epoll_create`.
    pub fn epoll_create(&self) -> Result<i32, Errno> {
        self.op(|w| {
            w.new_fd(Fd::Epoll {
                interest: BTreeMap::new(),
            })
        })
    }

    /// `epoll_ctl`.
    pub fn epoll_ctl(
        &self,
        epfd: i32,
        op: i32,
        fd: i32,
        events: u32,
        data: u64,
    ) -> Result<(), Errno> {
        self.op(|w| {
            if !w.fds.contains_key(&fd) {
                return Err(libc::EBADF);
            }
            // An epoll set inside another is refused (the kernel nests
            // them and looks for loops; this harness has no need to).
            if fd == epfd || matches!(w.fds.get(&fd), Some(Fd::Epoll { .. })) {
                return Err(libc::EINVAL);
            }
            let Some(Fd::Epoll { interest }) = w.fds.get_mut(&epfd) else {
                return Err(libc::EINVAL);
            };
            let i = Interest {
                events,
                data,
                seen: None,
                disabled: false,
            };
            match op {
                libc::EPOLL_CTL_ADD if interest.contains_key(&fd) => Err(libc::EEXIST),
                libc::EPOLL_CTL_ADD | libc::EPOLL_CTL_MOD
                    if op == libc::EPOLL_CTL_ADD || interest.contains_key(&fd) =>
                {
                    interest.insert(fd, i);
                    Ok(())
                }
                libc::EPOLL_CTL_DEL => interest.remove(&fd).map(|_| ()).ok_or(libc::ENOENT),
                libc::EPOLL_CTL_MOD => Err(libc::ENOENT),
                _ => Err(libc::EINVAL),
            }
        })
    }

    /// `epoll_wait`: up to `max` reports, waiting up to `timeout_ms`.
    pub fn epoll_wait(&self, epfd: i32, max: usize, timeout_ms: i32) -> Result<Vec<Ready>, Errno> {
        if max == 0 {
            return Err(libc::EINVAL);
        }
        let deadline = {
            let w = self.lock();
            (timeout_ms >= 0).then(|| w.now + timeout_ms as u64 * 1_000_000)
        };
        let always = (libc::EPOLLERR | libc::EPOLLHUP) as u32;
        let r = self.block(timeout_ms == 0, deadline, |w| {
            let watched: Vec<(i32, Interest)> = match w.fds.get(&epfd) {
                Some(Fd::Epoll { interest }) => interest
                    .iter()
                    .filter(|(_, i)| !i.disabled)
                    .map(|(&fd, i)| (fd, *i))
                    .collect(),
                _ => return Err(libc::EINVAL),
            };
            let mut out = Vec::new();
            for (fd, i) in watched {
                if out.len() == max {
                    break;
                }
                let ev = w.events(fd) & (i.events | always);
                let wakes = w.wakeups(fd);
                let et = i.events & libc::EPOLLET as u32 != 0;
                // Edge-triggered: only after a wakeup of a kind the
                // interest listens to (`ep_poll_callback`'s key filter).
                let woken = match i.seen {
                    None => true,
                    Some((rd, wr)) => {
                        let wants_in = i.events
                            & (libc::EPOLLIN | libc::EPOLLRDNORM | libc::EPOLLRDHUP) as u32
                            != 0;
                        let wants_out = i.events & (libc::EPOLLOUT | libc::EPOLLWRNORM) as u32 != 0;
                        (wants_in && wakes.0 != rd) || (wants_out && wakes.1 != wr)
                    }
                };
                let Some(Fd::Epoll { interest }) = w.fds.get_mut(&epfd) else {
                    return Err(libc::EINVAL);
                };
                let entry = interest.get_mut(&fd).expect("listed above");
                if et {
                    if !woken {
                        continue;
                    }
                    entry.seen = Some(wakes);
                }
                if ev == 0 {
                    continue;
                }
                if i.events & libc::EPOLLONESHOT as u32 != 0 {
                    entry.disabled = true;
                }
                out.push((i.data, ev));
            }
            if out.is_empty() {
                Err(libc::EAGAIN)
            } else {
                Ok(out)
            }
        });
        match r {
            Ok(Some(v)) => Ok(v),
            Ok(None) | Err(libc::EAGAIN) => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }
}
