//! Calls into the operating system, with nothing of Open MPI: the interface
//! list (`getifaddrs(3)`), random bytes for keys, the thread's CPU time,
//! UDP's batched paths (segmentation and receive offload; `sendmmsg` and
//! `recvmmsg` where the kernel lacks those), and memory shared with the
//! other processes of a node ([`SharedMapping`]).

use std::ffi::{c_int, CStr};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, RawFd};
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
    let mut out: Vec<IfAddr> = Vec::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is an entry of the list getifaddrs returned, which
        // stays valid until freeifaddrs; its name is NUL-terminated and its
        // address pointers are NULL or point to sockaddrs of their family.
        let (entry, name, addr, mask) = unsafe {
            let entry = &*cur;
            (
                entry,
                CStr::from_ptr(entry.ifa_name),
                ip_of(entry.ifa_addr),
                ip_of(entry.ifa_netmask),
            )
        };
        let name = name.to_string_lossy().into_owned();
        // An interface's index once per listing: each if_nametoindex opens a
        // socket, and an interface has an entry per address.
        let index = match out.iter().find(|a| a.name == name) {
            Some(a) => a.index,
            // SAFETY: as above, the entry's name is NUL-terminated.
            None => unsafe { libc::if_nametoindex(entry.ifa_name) },
        };
        let flags = entry.ifa_flags as libc::c_int;
        out.push(IfAddr {
            name,
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

/// The bytes an unprivileged user may still write to the file system that
/// holds `dir`, and its size (`statvfs(3)`).
pub fn space(dir: &std::path::Path) -> std::io::Result<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| std::io::ErrorKind::InvalidInput)?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `path` is NUL-terminated and `st` is writable; the struct is
    // read only where the call succeeded and so filled it.
    let st = unsafe {
        if libc::statvfs(path.as_ptr(), st.as_mut_ptr()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        st.assume_init()
    };
    let unit = st.f_frsize as u64;
    Ok((
        (st.f_bavail as u64).saturating_mul(unit),
        (st.f_blocks as u64).saturating_mul(unit),
    ))
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

/// The file descriptors this process may have open (`RLIMIT_NOFILE`'s soft
/// limit, `ulimit -n`); `None` where it is unlimited or cannot be read.
pub fn open_file_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid out-pointer for the call.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    #[allow(clippy::unnecessary_cast)] // `rlim_t` is 32 bits on some targets
    (rc == 0 && limit.rlim_cur != libc::RLIM_INFINITY).then_some(limit.rlim_cur as u64)
}

/// `UDP_SEGMENT` and `UDP_GRO` of `linux/udp.h` (Linux 4.18 and 5.0).
const UDP_SEGMENT: c_int = 103;
const UDP_GRO: c_int = 104;

/// Sets an integer option of level `SOL_UDP` on `fd`.
fn set_udp_option(fd: RawFd, option: c_int, value: c_int) -> std::io::Result<()> {
    // SAFETY: `value` is a live c_int and its size is passed with it; the
    // kernel checks `fd` and the option.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_UDP,
            option,
            (&value as *const c_int).cast(),
            std::mem::size_of::<c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Whether this kernel offers UDP generic segmentation offload on UDP
/// socket `fd` (Linux 4.18): an error where it does not. Each send gives its
/// own segment size ([`send_segments`]), so sockets shared by groups of
/// different datagram sizes need none set here.
pub fn check_udp_segment(fd: RawFd) -> std::io::Result<()> {
    set_udp_option(fd, UDP_SEGMENT, 0)
}

/// Lets the kernel hand UDP socket `fd` several datagrams of one sender in
/// one receive (UDP generic receive offload); [`recv_segments`] reads them.
pub fn set_udp_gro(fd: RawFd) -> std::io::Result<()> {
    set_udp_option(fd, UDP_GRO, 1)
}

/// One receive on non-blocking UDP socket `fd` into `buf`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Received {
    /// Bytes in `buf`.
    pub len: usize,
    /// With UDP GRO, the length of each datagram in `buf` (the last one may
    /// be shorter); `len` when it holds one datagram.
    pub segment: usize,
    /// The sender.
    pub from: Option<SocketAddr>,
    /// The datagrams were longer than `buf` (the rest is lost).
    pub truncated: bool,
}

/// Receives what waits on `fd` (`recvmsg(2)`) with the segment size of a UDP
/// GRO receive; `None` when nothing waits.
pub fn recv_segments(fd: RawFd, buf: &mut [u8]) -> std::io::Result<Option<Received>> {
    // SAFETY: all-zero is a valid value of these plain C structs.
    let mut from: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    // Room for one cmsghdr with an int, 8-byte aligned as cmsghdr needs.
    let mut control = [0u64; 8];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: as above.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = (&mut from as *mut libc::sockaddr_storage).cast();
    msg.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control);
    // SAFETY: every pointer in `msg` points to a live buffer of the length
    // given with it, which the kernel fills at most.
    let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_DONTWAIT) };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        return match e.kind() {
            std::io::ErrorKind::WouldBlock => Ok(None),
            _ => Err(e),
        };
    }
    let len = n as usize;
    let mut segment = len;
    // SAFETY: `msg` was filled by recvmsg: its control buffer holds
    // `msg_controllen` bytes of well-formed cmsghdrs, which the CMSG macros
    // walk, and UDP_GRO's data is one int.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_UDP && (*c).cmsg_type == UDP_GRO {
                let size = libc::CMSG_DATA(c).cast::<c_int>().read_unaligned();
                if size > 0 {
                    segment = (size as usize).min(len.max(1));
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    // SAFETY: recvmsg wrote a sockaddr of the family its first field names,
    // within `from`.
    let from = unsafe { socket_address(&from) };
    Ok(Some(Received {
        len: len.min(buf.len()),
        segment,
        from,
        truncated: msg.msg_flags & libc::MSG_TRUNC != 0,
    }))
}

/// Most datagrams one [`send_datagrams`] or [`recv_datagrams`] passes.
pub const MMSG_MAX: usize = 64;

/// Sends `batch` to `to` on non-blocking UDP socket `fd` in one
/// `sendmsg(2)` that the kernel cuts into datagrams of `segment` bytes, the
/// last one shorter (UDP generic segmentation offload, the size given with
/// this send): it takes all of them or none. `Ok(false)` when its buffer is
/// full.
pub fn send_segments(
    fd: RawFd,
    to: &socket2::SockAddr,
    batch: &[u8],
    segment: usize,
) -> std::io::Result<bool> {
    let segment = u16::try_from(segment).map_err(|_| std::io::ErrorKind::InvalidInput)?;
    let mut iov = libc::iovec {
        iov_base: batch.as_ptr().cast_mut().cast(),
        iov_len: batch.len(),
    };
    // Room for one cmsghdr with a u16, 8-byte aligned as cmsghdr needs.
    let mut control = [0u64; 4];
    // SAFETY: all-zero is a valid value of this plain C struct.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = to.as_ptr().cast_mut().cast();
    msg.msg_namelen = to.len();
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE only computes a length.
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(std::mem::size_of::<u16>() as u32) } as usize;
    debug_assert!(msg.msg_controllen <= std::mem::size_of_val(&control));
    // SAFETY: the control buffer is aligned and long enough for the one
    // cmsghdr with a u16 that CMSG_SPACE measured, and the header and its
    // data are written within it (UDP_SEGMENT's data is a u16).
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_UDP;
        (*c).cmsg_type = UDP_SEGMENT;
        (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<u16>() as u32) as usize;
        libc::CMSG_DATA(c).cast::<u16>().write_unaligned(segment);
    }
    // SAFETY: every pointer in `msg` points to a live buffer of the length
    // given with it, which the kernel only reads.
    let n = unsafe { libc::sendmsg(fd, &msg, libc::MSG_DONTWAIT) };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        return match e.kind() {
            std::io::ErrorKind::WouldBlock => Ok(false),
            _ => Err(e),
        };
    }
    Ok(true)
}

/// Sends `batch` to `to` on non-blocking UDP socket `fd` as datagrams of
/// `len` bytes each (the last may be shorter) in one `sendmmsg(2)`: how many
/// the kernel took, from the first; 0 when its buffer is full. An error when
/// the first cannot be sent at all.
pub fn send_datagrams(
    fd: RawFd,
    to: &socket2::SockAddr,
    batch: &[u8],
    len: usize,
) -> std::io::Result<usize> {
    let mut iovs: Vec<libc::iovec> = batch
        .chunks(len.max(1))
        .take(MMSG_MAX)
        .map(|d| libc::iovec {
            iov_base: d.as_ptr().cast_mut().cast(),
            iov_len: d.len(),
        })
        .collect();
    // SAFETY: all-zero is a valid mmsghdr (no name, no control).
    let mut msgs: Vec<libc::mmsghdr> = vec![unsafe { std::mem::zeroed() }; iovs.len()];
    for (m, iov) in msgs.iter_mut().zip(iovs.iter_mut()) {
        m.msg_hdr.msg_name = to.as_ptr().cast_mut().cast();
        m.msg_hdr.msg_namelen = to.len();
        m.msg_hdr.msg_iov = iov;
        m.msg_hdr.msg_iovlen = 1;
    }
    // SAFETY: each mmsghdr points to one iovec of a live slice of `batch`
    // and to `to`, of the lengths given with them, which the kernel only
    // reads.
    let n = unsafe {
        libc::sendmmsg(
            fd,
            msgs.as_mut_ptr(),
            msgs.len() as libc::c_uint,
            libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        return match e.kind() {
            std::io::ErrorKind::WouldBlock => Ok(0),
            _ => Err(e),
        };
    }
    Ok(n as usize)
}

/// One datagram of a [`recv_datagrams`]: where it lies in the buffer, and
/// its sender.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    pub start: usize,
    pub len: usize,
    pub from: Option<SocketAddr>,
}

/// Receives up to [`MMSG_MAX`] waiting datagrams on non-blocking UDP socket
/// `fd` in one `recvmmsg(2)`, the i-th into `buf[i * stride..]` (at most
/// `stride` bytes each; a longer one is cut, so give `stride` one byte more
/// than the longest valid datagram). Appends each to `out`; how many.
pub fn recv_datagrams(
    fd: RawFd,
    buf: &mut [u8],
    stride: usize,
    out: &mut Vec<Slot>,
) -> std::io::Result<usize> {
    let slots = (buf.len() / stride.max(1)).min(MMSG_MAX);
    if slots == 0 {
        return Ok(0);
    }
    // SAFETY: all-zero is a valid value of these plain C structs.
    let mut from: Vec<libc::sockaddr_storage> = vec![unsafe { std::mem::zeroed() }; slots];
    let mut iovs: Vec<libc::iovec> = buf
        .chunks_mut(stride)
        .take(slots)
        .map(|c| libc::iovec {
            iov_base: c.as_mut_ptr().cast(),
            iov_len: c.len(),
        })
        .collect();
    // SAFETY: as above.
    let mut msgs: Vec<libc::mmsghdr> = vec![unsafe { std::mem::zeroed() }; slots];
    for ((m, iov), f) in msgs.iter_mut().zip(iovs.iter_mut()).zip(from.iter_mut()) {
        m.msg_hdr.msg_iov = iov;
        m.msg_hdr.msg_iovlen = 1;
        m.msg_hdr.msg_name = (f as *mut libc::sockaddr_storage).cast();
        m.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    }
    // SAFETY: each mmsghdr points to a live, disjoint slot of `buf` and a
    // sockaddr_storage, of the lengths given with them, which the kernel
    // fills at most; no timeout.
    let n = unsafe {
        libc::recvmmsg(
            fd,
            msgs.as_mut_ptr(),
            slots as libc::c_uint,
            libc::MSG_DONTWAIT,
            ptr::null_mut(),
        )
    };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        return match e.kind() {
            std::io::ErrorKind::WouldBlock => Ok(0),
            _ => Err(e),
        };
    }
    let n = n as usize;
    for (i, (m, f)) in msgs.iter().zip(&from).take(n).enumerate() {
        out.push(Slot {
            start: i * stride,
            len: (m.msg_len as usize).min(stride),
            // SAFETY: recvmmsg wrote a sockaddr of the family its first
            // field names, within `f`.
            from: unsafe { socket_address(f) },
        });
    }
    Ok(n)
}

/// The address in a `sockaddr_storage`, as std's `recv_from` gives it.
///
/// # Safety
/// `sa` holds a sockaddr of the family its `ss_family` names, or another family.
unsafe fn socket_address(sa: &libc::sockaddr_storage) -> Option<SocketAddr> {
    // SAFETY: see the function's contract: the family decides the type.
    unsafe {
        match c_int::from(sa.ss_family) {
            libc::AF_INET => {
                let sin = &*(sa as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>();
                Some(SocketAddr::V4(SocketAddrV4::new(
                    Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)),
                    u16::from_be(sin.sin_port),
                )))
            }
            libc::AF_INET6 => {
                let sin6 = &*(sa as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>();
                Some(SocketAddr::V6(SocketAddrV6::new(
                    Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                    u16::from_be(sin6.sin6_port),
                    sin6.sin6_flowinfo,
                    sin6.sin6_scope_id,
                )))
            }
            _ => None,
        }
    }
}

/// The MTU of interface `name` in this process's network namespace
/// (`SIOCGIFMTU`; sysfs may show another namespace's interfaces).
pub fn interface_mtu(name: &str) -> std::io::Result<u32> {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None)?;
    // SAFETY: all-zero is a valid ifreq.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    if name.len() >= req.ifr_name.len() || name.contains('\0') {
        return Err(std::io::ErrorKind::InvalidInput.into());
    }
    for (dst, src) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *dst = src as libc::c_char;
    }
    // SAFETY: `req` is a live ifreq with a NUL-terminated name, which
    // SIOCGIFMTU reads and whose `ifru_mtu` it writes.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFMTU, &mut req) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: SIOCGIFMTU succeeded, so the union holds the MTU.
    let mtu = unsafe { req.ifr_ifru.ifru_mtu };
    u32::try_from(mtu).map_err(|_| std::io::ErrorKind::InvalidData.into())
}

/// A file's bytes mapped shared (`mmap(2)`, `MAP_SHARED`) into this
/// process, for memory that the ranks of one node share: a file in
/// `/dev/shm`, which each rank maps and the creator then unlinks.
///
/// Other processes write the same bytes at any time, so this hands out no
/// references to them: bytes are copied in and out through raw pointers,
/// and the only shared state read in place is atomics, by which the
/// processes order those copies.
pub struct SharedMapping {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping belongs to no thread; every access goes through an
// atomic or a copy whose order the caller's protocol sets.
unsafe impl Send for SharedMapping {}

impl SharedMapping {
    /// Creates the file at `path` (which must not exist), readable and
    /// writable by this user only, `len` bytes of zeros, and maps it. The
    /// bytes are allocated first: a full file system fails this call, not
    /// a later write into the mapping (which would end the process).
    pub fn create(path: &std::path::Path, len: usize) -> std::io::Result<Self> {
        use std::os::unix::fs::OpenOptionsExt;
        let off_t = libc::off_t::try_from(len).map_err(|_| std::io::ErrorKind::InvalidInput)?;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)?;
        // A signal caught meanwhile may end the call with EINTR
        // (posix_fallocate(3); a program's profiling timer, say): try again.
        let rc = loop {
            // SAFETY: a plain call on an open descriptor; the kernel checks it.
            let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, off_t) };
            if rc != libc::EINTR {
                break rc;
            }
        };
        let mapped = match rc {
            0 => Self::map(&file, len),
            e => Err(std::io::Error::from_raw_os_error(e)),
        };
        if mapped.is_err() {
            let _ = std::fs::remove_file(path);
        }
        mapped
    }

    /// Maps the file at `path`, which another process created with `len`
    /// bytes.
    pub fn open(path: &std::path::Path, len: usize) -> std::io::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)?;
        if file.metadata()?.len() != len as u64 {
            return Err(std::io::ErrorKind::InvalidData.into());
        }
        Self::map(&file, len)
    }

    fn map(file: &std::fs::File, len: usize) -> std::io::Result<Self> {
        if len == 0 {
            return Err(std::io::ErrorKind::InvalidInput.into());
        }
        // SAFETY: a fresh shared mapping of `len` bytes of an open file that
        // holds `len` bytes; the kernel checks the descriptor. The mapping
        // outlives the descriptor, which closes when `file` drops.
        let p = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let ptr = std::ptr::NonNull::new(p.cast()).ok_or(std::io::ErrorKind::Other)?;
        Ok(SharedMapping { ptr, len })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The 8 bytes at `offset` as an atomic. Panics unless they lie in the
    /// mapping, 8-aligned.
    pub fn atomic_u64(&self, offset: usize) -> &std::sync::atomic::AtomicU64 {
        assert!(
            offset % 8 == 0 && offset + 8 <= self.len,
            "an atomic in the mapping"
        );
        // SAFETY: in bounds and aligned (the mapping is page-aligned);
        // `AtomicU64` has `u64`'s layout, every bit pattern is valid, and the
        // mapping lives as long as the borrow of `self`. Other processes
        // touch these bytes only through atomics too.
        unsafe {
            &*self
                .ptr
                .as_ptr()
                .add(offset)
                .cast::<std::sync::atomic::AtomicU64>()
        }
    }

    /// Copies `bytes` into the mapping at `offset`. Panics unless they fit.
    pub fn copy_in(&self, offset: usize, bytes: &[u8]) {
        assert!(offset
            .checked_add(bytes.len())
            .is_some_and(|end| end <= self.len));
        // SAFETY: in bounds (checked above), and `bytes` is this process's
        // memory, not the mapping's; no reference to the mapping's bytes
        // exists (see the type), and the caller's protocol keeps other
        // processes off these bytes meanwhile.
        unsafe {
            ptr::copy_nonoverlapping(bytes.as_ptr(), self.ptr.as_ptr().add(offset), bytes.len())
        };
    }

    /// Copies the mapping's bytes at `offset` into `out`. Panics unless they
    /// lie in the mapping.
    pub fn copy_out(&self, offset: usize, out: &mut [u8]) {
        assert!(offset
            .checked_add(out.len())
            .is_some_and(|end| end <= self.len));
        // SAFETY: as in `copy_in`, the other way round.
        unsafe {
            ptr::copy_nonoverlapping(self.ptr.as_ptr().add(offset), out.as_mut_ptr(), out.len())
        };
    }
}

impl Drop for SharedMapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once; no borrow of it
        // outlives `self`.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// Copies the `out.len()` bytes at address `addr` of process `pid` into
/// `out` (`process_vm_readv(2)`, one copy, from the other process's memory
/// straight into this one's). The kernel allows it where this process may
/// trace the other (the same user, and the Yama security module's rules).
pub fn read_process_memory(pid: i32, addr: u64, out: &mut [u8]) -> std::io::Result<()> {
    let mut done = 0;
    while done < out.len() {
        let rest = &mut out[done..];
        let local = libc::iovec {
            iov_base: rest.as_mut_ptr().cast(),
            iov_len: rest.len(),
        };
        let remote = libc::iovec {
            iov_base: (addr as usize).wrapping_add(done) as *mut libc::c_void,
            iov_len: rest.len(),
        };
        // SAFETY: `local` describes `rest`, this process's writable memory;
        // `remote` is only read, in the other process, by the kernel, which
        // checks it (a bad address fails with EFAULT).
        let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
        match n {
            n if n > 0 => done += n as usize,
            0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            _ => return Err(std::io::Error::last_os_error()),
        }
    }
    Ok(())
}
