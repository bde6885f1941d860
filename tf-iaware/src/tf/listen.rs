//! The address a TensorFlow server listens on: its task's own, never every interface.
//!
//! TensorFlow 2.21's gRPC server binds the wildcard address (`GrpcServer::Init` builds
//! `0.0.0.0:PORT` from the port alone, and gRPC opens it as a dual-stack `[::]:PORT`), whatever
//! host TF_CONFIG names. libtensorflow is a shared library and imports `bind(2)` from libc, so the
//! dynamic linker gives it the first `bind` of the process's global scope: the executable's, when
//! the executable exports one. This module defines that `bind`: a wildcard bind of a port that
//! [`narrow`] registered becomes a bind of the task's own address, and every other call goes on,
//! unchanged, to the next `bind` (libc's).
//!
//! The executable must export the symbol (`-Wl,--export-dynamic-symbol=bind` at link time; the
//! build scripts of this workspace add it, a crate of your own adds it in its build script, see
//! the book's "Distributed training: Security"). [`interposed`] says whether it does, and
//! [`wildcard_listeners`] reads back from the kernel what the process listens on.

use std::net::{SocketAddr, SocketAddrV4, SocketAddrV6};
use std::sync::{Mutex, OnceLock};

use libc::{c_int, sockaddr, socklen_t};

/// Ports whose wildcard binds are narrowed, each with the address to bind instead (its port is
/// the port to match).
static NARROWED: Mutex<Vec<SocketAddr>> = Mutex::new(Vec::new());

type BindFn = unsafe extern "C" fn(c_int, *const sockaddr, socklen_t) -> c_int;

/// What a bind becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bind {
    /// Bind this address instead.
    To(SocketAddr),
    /// Refuse: the socket's family cannot hold the task's address (an IPv4 socket and an IPv6
    /// task address); the server's other socket takes it.
    Refuse,
}

/// What a bind of `want` becomes under `rules` (`None`: unchanged). Only a wildcard address on
/// a registered port changes; an IPv6 socket takes an IPv4 task address as its mapped form
/// (`::ffff:a.b.c.d`, which a dual-stack socket accepts IPv4 connections on).
fn narrowed(want: SocketAddr, rules: &[SocketAddr]) -> Option<Bind> {
    if !want.ip().is_unspecified() || want.port() == 0 {
        return None;
    }
    let to = rules.iter().find(|r| r.port() == want.port())?;
    if to.ip().is_unspecified() {
        // TF_CONFIG itself names the wildcard for this task: what it gives is what is bound.
        return None;
    }
    Some(match (want, to) {
        (SocketAddr::V4(_), SocketAddr::V4(_)) => Bind::To(*to),
        (SocketAddr::V4(_), SocketAddr::V6(v6)) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => Bind::To(SocketAddr::V4(SocketAddrV4::new(v4, want.port()))),
            None => Bind::Refuse,
        },
        (SocketAddr::V6(w), SocketAddr::V4(v4)) => Bind::To(SocketAddr::V6(SocketAddrV6::new(
            v4.ip().to_ipv6_mapped(),
            want.port(),
            w.flowinfo(),
            0,
        ))),
        (SocketAddr::V6(w), SocketAddr::V6(v6)) => Bind::To(SocketAddr::V6(SocketAddrV6::new(
            *v6.ip(),
            want.port(),
            w.flowinfo(),
            v6.scope_id(),
        ))),
    })
}

/// From now on, a wildcard bind of `to`'s port in this process binds `to` instead.
pub(crate) fn narrow(to: SocketAddr) {
    let mut rules = NARROWED.lock().unwrap_or_else(|p| p.into_inner());
    rules.retain(|r| r.port() != to.port());
    rules.push(to);
}

/// Whether TensorFlow's calls of `bind` reach this module's: the first `bind` of the global
/// scope (where the dynamic linker resolves libtensorflow's) is this one.
pub(crate) fn interposed() -> bool {
    // SAFETY: a NUL-terminated name; RTLD_DEFAULT searches the global scope.
    let found = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"bind".as_ptr()) };
    found as usize == bind as BindFn as usize
}

/// The `bind` after this one in the lookup order (libc's), found once.
fn next_bind() -> Option<BindFn> {
    static NEXT: OnceLock<Option<BindFn>> = OnceLock::new();
    *NEXT.get_or_init(|| {
        // SAFETY: a NUL-terminated name; RTLD_NEXT searches the objects after this one.
        let f = unsafe { libc::dlsym(libc::RTLD_NEXT, c"bind".as_ptr()) };
        // SAFETY: the symbol is libc's `bind`, whose type BindFn is.
        (!f.is_null()).then(|| unsafe { std::mem::transmute::<*mut libc::c_void, BindFn>(f) })
    })
}

/// `bind(2)` through the next `bind` of the lookup order, else the system call itself.
unsafe fn forward(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    match next_bind() {
        // SAFETY: the caller's arguments, passed on as they came.
        Some(f) => unsafe { f(fd, addr, len) },
        // SAFETY: as above; the raw system call takes the same arguments.
        None => unsafe { libc::syscall(libc::SYS_bind, fd, addr, len) as c_int },
    }
}

/// The address `addr` names, if it is an IPv4 or IPv6 one of a plausible length.
///
/// # Safety
/// `addr` is null or points at `len` readable bytes.
unsafe fn socket_address(addr: *const sockaddr, len: socklen_t) -> Option<SocketAddr> {
    if addr.is_null() || (len as usize) < std::mem::size_of::<libc::sa_family_t>() {
        return None;
    }
    // SAFETY: at least the family is readable (checked above).
    let family = c_int::from(unsafe { (*addr).sa_family });
    match family {
        libc::AF_INET if len as usize >= std::mem::size_of::<libc::sockaddr_in>() => {
            // SAFETY: `len` bytes of a sockaddr_in are readable; unaligned read.
            let a = unsafe { std::ptr::read_unaligned(addr.cast::<libc::sockaddr_in>()) };
            Some(SocketAddr::V4(SocketAddrV4::new(
                u32::from_be(a.sin_addr.s_addr).into(),
                u16::from_be(a.sin_port),
            )))
        }
        libc::AF_INET6 if len as usize >= std::mem::size_of::<libc::sockaddr_in6>() => {
            // SAFETY: as above, for a sockaddr_in6.
            let a = unsafe { std::ptr::read_unaligned(addr.cast::<libc::sockaddr_in6>()) };
            Some(SocketAddr::V6(SocketAddrV6::new(
                a.sin6_addr.s6_addr.into(),
                u16::from_be(a.sin6_port),
                u32::from_be(a.sin6_flowinfo),
                a.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// `to` as a C socket address and its length.
fn raw(to: SocketAddr) -> (libc::sockaddr_storage, socklen_t) {
    // SAFETY: sockaddr_storage is plain data; all zeroes is a valid value.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match to {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*a.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for every sockaddr kind.
            unsafe { std::ptr::write(std::ptr::from_mut(&mut storage).cast(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            // SAFETY: plain data; zeroes are valid (the struct has private padding on some libcs).
            let mut sin6: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = a.port().to_be();
            sin6.sin6_flowinfo = a.flowinfo().to_be();
            sin6.sin6_addr.s6_addr = a.ip().octets();
            sin6.sin6_scope_id = a.scope_id();
            // SAFETY: as above.
            unsafe { std::ptr::write(std::ptr::from_mut(&mut storage).cast(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as socklen_t)
}

/// The process's `bind(2)`: a wildcard bind of a port registered with [`narrow`] binds the
/// task's own address instead; everything else goes on unchanged to libc's `bind`.
///
/// Exported from the executable (`-Wl,--export-dynamic-symbol=bind`), it is also the `bind`
/// libtensorflow calls; within the executable it is every Rust caller's anyway.
///
/// # Safety
/// As `bind(2)`: `addr` is null or points at `len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn bind(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    // SAFETY: the caller's promise about `addr` and `len`.
    let want = unsafe { socket_address(addr, len) };
    let decision = want.and_then(|w| {
        let rules = NARROWED.lock().unwrap_or_else(|p| p.into_inner());
        narrowed(w, &rules)
    });
    match decision {
        None => {
            // SAFETY: the caller's arguments, unchanged.
            unsafe { forward(fd, addr, len) }
        }
        Some(Bind::To(to)) => {
            let (storage, len) = raw(to);
            // SAFETY: storage holds a valid address of `len` bytes and outlives the call.
            unsafe { forward(fd, std::ptr::from_ref(&storage).cast(), len) }
        }
        Some(Bind::Refuse) => {
            // SAFETY: errno is this thread's.
            unsafe { *libc::__errno_location() = libc::EADDRNOTAVAIL };
            -1
        }
    }
}

/// The wildcard addresses this process listens on at `port` (IPv4 and IPv6), read from
/// `/proc/net/tcp{,6}` and this process's open sockets; each with the file descriptor of the
/// listening socket.
///
/// # Errors
/// The text of the failure when `/proc` cannot be read.
pub(crate) fn wildcard_listeners(port: u16) -> Result<Vec<(SocketAddr, i32)>, String> {
    use procfs::process::{FDTarget, Process};
    let ours: std::collections::BTreeMap<u64, i32> = Process::myself()
        .and_then(|p| p.fd())
        .map_err(|e| format!("/proc/self/fd: {e}"))?
        .flatten()
        .filter_map(|fd| match fd.target {
            FDTarget::Socket(inode) => Some((inode, fd.fd)),
            _ => None,
        })
        .collect();
    let mut found = Vec::new();
    for table in [procfs::net::tcp(), procfs::net::tcp6()] {
        // A kernel without IPv6 has no tcp6 table: nothing listens there.
        let Ok(entries) = table else { continue };
        for e in entries {
            let listening = e.state == procfs::net::TcpState::Listen;
            let wildcard = e.local_address.ip().is_unspecified();
            if listening && wildcard && e.local_address.port() == port {
                if let Some(&fd) = ours.get(&e.inode) {
                    found.push((e.local_address, fd));
                }
            }
        }
    }
    Ok(found)
}

/// The first address of `host:port` (a TF_CONFIG task address, with `port` to bind instead of
/// its own) this machine can bind, or why none.
pub(crate) fn own_address(address: &str, port: u16) -> Result<SocketAddr, String> {
    use std::net::ToSocketAddrs;
    let candidates: Vec<SocketAddr> = address
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve it: {e}"))?
        .map(|mut a| {
            a.set_port(port);
            a
        })
        .collect();
    let mut why = Vec::new();
    for a in &candidates {
        if a.ip().is_unspecified() {
            return Ok(*a);
        }
        match std::net::TcpListener::bind(SocketAddr::new(a.ip(), 0)) {
            Ok(_) => return Ok(*a),
            Err(e) => why.push(format!("{}: {e}", a.ip())),
        }
    }
    Err(match why.is_empty() {
        true => "it resolves to no address".into(),
        false => format!(
            "none of its addresses is one of this machine's ({})",
            why.join("; ")
        ),
    })
}

/// What the executable of a crate of your own adds so that TensorFlow binds only the task's
/// address (a line of its build script).
pub(crate) const LINK_ARG: &str = "cargo:rustc-link-arg=-Wl,--export-dynamic-symbol=bind";

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn v4(ip: [u8; 4], port: u16) -> SocketAddr {
        SocketAddr::new(Ipv4Addr::from(ip).into(), port)
    }

    fn v6(ip: Ipv6Addr, port: u16) -> SocketAddr {
        SocketAddr::new(ip.into(), port)
    }

    #[test]
    fn only_wildcard_binds_of_registered_ports_change() {
        let rules = [v4([127, 0, 0, 1], 2222), v6(Ipv6Addr::LOCALHOST, 2223)];
        // The wildcard of a registered port: the task's address, in the socket's family.
        assert_eq!(
            narrowed(v4([0; 4], 2222), &rules),
            Some(Bind::To(v4([127, 0, 0, 1], 2222)))
        );
        assert_eq!(
            narrowed(v6(Ipv6Addr::UNSPECIFIED, 2222), &rules),
            Some(Bind::To(v6("::ffff:127.0.0.1".parse().unwrap(), 2222)))
        );
        assert_eq!(
            narrowed(v6(Ipv6Addr::UNSPECIFIED, 2223), &rules),
            Some(Bind::To(v6(Ipv6Addr::LOCALHOST, 2223)))
        );
        // An IPv4 socket cannot hold ::1: refused, the IPv6 socket takes it.
        assert_eq!(narrowed(v4([0; 4], 2223), &rules), Some(Bind::Refuse));
        // Unchanged: other ports, port 0, specific addresses, TF_CONFIG's own wildcard.
        for want in [
            v4([0; 4], 2224),
            v4([0; 4], 0),
            v4([10, 0, 0, 1], 2222),
            v6(Ipv6Addr::LOCALHOST, 2222),
        ] {
            assert_eq!(narrowed(want, &rules), None, "{want}");
        }
        assert_eq!(narrowed(v4([0; 4], 2222), &[v4([0; 4], 2222)]), None);
    }

    #[test]
    fn socket_addresses_round_trip_through_their_c_form() {
        for a in [
            v4([127, 0, 0, 1], 2222),
            v6("fe80::1".parse().unwrap(), 443),
            SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::LOCALHOST, 80, 7, 3)),
        ] {
            let (storage, len) = raw(a);
            // SAFETY: storage holds `len` bytes of a socket address.
            let back = unsafe { socket_address(std::ptr::from_ref(&storage).cast(), len) };
            assert_eq!(back, Some(a));
        }
        // Too short for its family, or not an IP family: not an address.
        let (storage, _) = raw(v4([127, 0, 0, 1], 1));
        // SAFETY: as above; a shorter length is only read less far.
        assert_eq!(
            unsafe { socket_address(std::ptr::from_ref(&storage).cast(), 4) },
            None
        );
        // SAFETY: a null address is allowed.
        assert_eq!(unsafe { socket_address(std::ptr::null(), 16) }, None);
    }

    #[test]
    fn the_own_address_is_one_this_machine_can_bind() {
        assert_eq!(
            own_address("127.0.0.1:2222", 3333),
            Ok(v4([127, 0, 0, 1], 3333))
        );
        let err = own_address("192.0.2.1:2222", 2222).unwrap_err();
        assert!(
            err.contains("none of its addresses") && err.contains("192.0.2.1"),
            "{err}"
        );
    }

    #[test]
    fn this_test_binary_exports_the_interposer() {
        // tf-iaware's build script links its tests with the export, as a crate of its own must.
        assert!(interposed());
    }
}
