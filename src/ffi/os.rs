//! Calls into the operating system, with nothing of Open MPI: the interface
//! list (`getifaddrs(3)`), random bytes for keys, and the thread's CPU time.

use std::ffi::{c_int, CStr};
use std::ptr;

/// One address of one network interface, as `getifaddrs(3)` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IfAddr {
    pub name: String,
    pub index: u32,
    pub up: bool,
    pub multicast: bool,
    pub loopback: bool,
    /// `None` for entries of other families (the link-layer entry).
    pub addr: Option<std::net::IpAddr>,
    pub prefix_len: u8,
}

/// Every interface address of this host (of this network namespace).
pub fn interface_addresses() -> std::io::Result<Vec<IfAddr>> {
    let mut head: *mut libc::ifaddrs = ptr::null_mut();
    // SAFETY: `head` is a valid out-pointer; on success the list is freed below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is an entry of the list getifaddrs returned, which
        // stays valid until freeifaddrs; its name is NUL-terminated and its
        // address pointers are NULL or point to sockaddrs of their family.
        let (entry, name, index, addr, mask) = unsafe {
            let entry = &*cur;
            (
                entry,
                CStr::from_ptr(entry.ifa_name),
                libc::if_nametoindex(entry.ifa_name),
                ip_of(entry.ifa_addr),
                ip_of(entry.ifa_netmask),
            )
        };
        let flags = entry.ifa_flags as libc::c_int;
        out.push(IfAddr {
            name: name.to_string_lossy().into_owned(),
            index,
            up: flags & libc::IFF_UP != 0,
            multicast: flags & libc::IFF_MULTICAST != 0,
            loopback: flags & libc::IFF_LOOPBACK != 0,
            addr,
            prefix_len: mask.map_or(0, |m| match m {
                std::net::IpAddr::V4(m) => u32::from(m).count_ones() as u8,
                std::net::IpAddr::V6(m) => u128::from(m).count_ones() as u8,
            }),
        });
        cur = entry.ifa_next;
    }
    // SAFETY: `head` came from a successful getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

/// The IP address in a `sockaddr` of family AF_INET or AF_INET6.
///
/// # Safety
/// `sa` is NULL or points to a sockaddr whose family field tells its real type.
unsafe fn ip_of(sa: *const libc::sockaddr) -> Option<std::net::IpAddr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: see the function's contract: the family decides the type.
    unsafe {
        match c_int::from((*sa).sa_family) {
            libc::AF_INET => {
                let sin = &*sa.cast::<libc::sockaddr_in>();
                Some(std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)).into())
            }
            libc::AF_INET6 => {
                let sin6 = &*sa.cast::<libc::sockaddr_in6>();
                Some(std::net::Ipv6Addr::from(sin6.sin6_addr.s6_addr).into())
            }
            _ => None,
        }
    }
}

/// Fills `buf` from the operating system's CSPRNG (`getrandom(2)`, which
/// needs no file descriptor), for secret keys.
pub fn os_random(buf: &mut [u8]) -> std::io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let rest = &mut buf[done..];
        // SAFETY: `rest` is a valid writable region of `rest.len()` bytes.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
        } else {
            done += n as usize;
        }
    }
    Ok(())
}

/// CPU time of the calling thread, for cost figures that other processes
/// on a shared machine do not inflate.
pub fn thread_cpu_time() -> std::time::Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer; this clock exists on every Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}
