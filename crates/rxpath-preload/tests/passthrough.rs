//! The shared object as a program meets it: loaded into an unmodified
//! program with no interface configured, every socket is the kernel's and
//! behaves as without it (UDP on loopback, select, poll, epoll, a TCP
//! connection, fork); with an interface that does not exist, the first
//! bind says so once and the socket still works on the kernel.

use std::path::PathBuf;
use std::process::Command;

/// `librxpath_preload.so` as cargo built it for this test (in `deps/`,
/// beside the test, or one up after `cargo build`).
fn lib() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let found = [deps.to_path_buf(), deps.parent().unwrap().to_path_buf()]
        .into_iter()
        .map(|d| d.join("librxpath_preload.so"))
        .find(|p| p.exists());
    found.unwrap_or_else(|| panic!("librxpath_preload.so not built near {}", exe.display()))
}

const PROGRAM: &str = r#"
import os, select, socket
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.bind(("127.0.0.1", int(os.environ["PORT"])))
c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
c.sendto(b"ping", u.getsockname())
assert select.select([u], [], [], 2)[0] == [u]
p = select.poll(); p.register(u, select.POLLIN); assert p.poll(2000)
e = select.epoll(); e.register(u.fileno(), select.EPOLLIN); assert e.poll(2)
d, a = u.recvfrom(100)
u.sendto(d.upper(), a)
assert c.recv(100) == b"PING"
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen()
t = socket.create_connection(l.getsockname()); s, _ = l.accept()
t.sendall(b"tcp"); assert s.recv(10) == b"tcp"
pid = os.fork()
if pid == 0:
    u.sendto(b"child", a)
    os._exit(0)
os.waitpid(pid, 0)
assert c.recv(100) == b"child"
print("ok")
"#;

fn run(vars: &[(&str, &str)]) -> std::process::Output {
    // A port free a moment ago: a fixed port, so the bind is one rxpath
    // would take if it could.
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .map(|a| a.port())
        .unwrap();
    Command::new("python3")
        .env("PORT", port.to_string())
        .args(["-c", PROGRAM])
        .env("LD_PRELOAD", lib())
        .env_remove("RXPATH_IFACE")
        .envs(vars.iter().copied())
        .output()
        .expect("python3")
}

#[test]
fn without_an_interface_every_socket_is_the_kernels() {
    if !rxpath_testkit::can_run(&[rxpath_testkit::Need::Tool("python3")]) {
        return;
    }
    let o = run(&[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "ok");
    assert!(!err.contains("rxpath-preload"), "nothing to say: {err}");
}

#[test]
fn an_interface_that_is_not_there_is_said_once_and_the_kernel_serves() {
    if !rxpath_testkit::can_run(&[rxpath_testkit::Need::Tool("python3")]) {
        return;
    }
    // The host cannot start on a missing interface: said once, and every
    // socket is the kernel's.
    let o = run(&[("RXPATH_IFACE", "rxp-none0")]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "ok");
    assert!(err.contains("rxpath on rxp-none0"), "said: {err}");
    assert_eq!(err.matches("rxpath-preload:").count(), 1, "once: {err}");
    let o = run(&[("RXPATH_BUSY_POLL", "fifty")]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("RXPATH_BUSY_POLL"),
        "a bad value is named: {err}"
    );
}
