//! The UDP sockets of one communicator's multicast group
//! (`notes/multicast-anchors.md` §3 has the Linux facts behind each option).
//!
//! The receive socket is bound to the group and port, not to the wildcard, and
//! has `IP_MULTICAST_ALL` off, so it sees only its own group even when other
//! communicators or jobs on the host joined others on the same port. The send
//! socket is bound to the interface's address and shared by every group of
//! the process that sends alike (interface, TTL, loop-back): its local
//! address identifies this process's own datagrams when loop-back brings them
//! back, and a process that keeps many communicators holds one file for each
//! and one to send, not two for each. The sockets are non-blocking: a full
//! buffer never stalls Open MPI's progress. Where the
//! kernel offers them, the send socket has UDP segmentation offload (one
//! send, many datagrams) and the receive socket UDP receive offload (one
//! receive, many datagrams of one sender); where it does not, `sendmmsg` and
//! `recvmmsg` still pass many datagrams per call; `docs/datagram.md`,
//! "Between ipmc and the kernel".

use std::io;
use std::net::{IpAddr, SocketAddr, SocketAddrV6, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use socket2::{Domain, InterfaceIndexOrAddress, Protocol, Socket, Type};

use crate::base::io::{send_one_by_one, Place};
use crate::base::params::DatagramPath;
use crate::net::interfaces::Chosen;
use crate::platform::os;

/// Most datagrams the kernel cuts one send into (`UDP_MAX_SEGMENTS`).
const MAX_SEGMENTS: usize = 64;
/// Most bytes of one send: a UDP datagram's largest payload over IPv4.
const MAX_SEND: usize = 65507;

/// Bytes of send buffer requested. The kernel allows twice that, counting
/// each frame with its overhead: fewer than 700 frames of 1,500 bytes.
const SEND_BUFFER: usize = 512 << 10;

/// The part of the process's file descriptors (`ulimit -n`) that ipmc's
/// sockets may hold: a quarter. A program that keeps hundreds of
/// communicators must not run out of files because each of them joined a
/// group; communicators beyond the share leave their broadcasts to Open MPI.
const FD_SHARE_DIVISOR: u64 = 4;

/// The sockets of every group this process holds, receive and send.
static SOCKETS_HELD: AtomicU64 = AtomicU64::new(0);

/// The file descriptor of one socket, counted in `held` (the process's
/// [`SOCKETS_HELD`], or a test's own) from before it is opened until it is
/// closed.
#[derive(Debug)]
struct FdShare {
    held: &'static AtomicU64,
}

impl FdShare {
    /// Counts one socket more in `held`, if it stays within the process's
    /// share of `limit`.
    fn take(held: &'static AtomicU64, limit: Option<u64>) -> Result<FdShare, OpenError> {
        let before = held.fetch_add(1, Ordering::Relaxed);
        match limit {
            Some(limit) if before + 1 > limit / FD_SHARE_DIVISOR => {
                held.fetch_sub(1, Ordering::Relaxed);
                Err(format!(
                    "ipmc holds {before} of the {limit} files this process may open \
                     (ulimit -n) for the multicast groups of other communicators, and \
                     takes no more than a quarter; a higher limit lets more \
                     communicators multicast"
                )
                .into())
            }
            _ => Ok(FdShare { held }),
        }
    }
}

impl Drop for FdShare {
    fn drop(&mut self) {
        self.held.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What makes two groups' send sockets interchangeable: the datagrams leave
/// by the same interface, from the same address, with the same TTL and
/// loop-back. Group and segment size go with each send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct SendKey {
    iface: u32,
    source: IpAddr,
    ttl: u32,
    loopback: bool,
}

/// A send socket, shared by the groups of this process that send alike.
#[derive(Debug)]
struct Sender {
    socket: UdpSocket,
    /// Its address: the source of this process's datagrams.
    own: SocketAddr,
    /// The kernel cuts its sends into datagrams (UDP GSO) where asked.
    segments: bool,
    /// Released after the socket closes (fields drop in order).
    _share: FdShare,
}

/// The send sockets that some group of this process still holds.
static SENDERS: Mutex<Vec<(SendKey, Weak<Sender>)>> = Mutex::new(Vec::new());

/// How the sockets are set up, beyond group and interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// TTL (IPv4) or hop limit (IPv6) of sent datagrams.
    pub ttl: u32,
    /// Whether sent datagrams come back to this host's sockets (needed when
    /// other ranks of the communicator share the host).
    pub loopback: bool,
    /// Receive buffer to request in bytes; 0 keeps the system default.
    pub rcvbuf: usize,
    /// How datagrams pass to and from the kernel.
    pub path: DatagramPath,
    /// The length of every datagram but a message's last, which UDP
    /// segmentation offload cuts a batch into.
    pub datagram_len: usize,
}

/// A joined multicast group.
#[derive(Debug)]
pub struct McastSocket {
    recv: UdpSocket,
    /// The group as the send socket addresses it (with the interface as
    /// scope for IPv6).
    to: SocketAddr,
    sender: Arc<Sender>,
    group: SocketAddr,
    granted_rcvbuf: usize,
    /// Sends are batches the kernel cuts into datagrams (UDP GSO).
    gso: bool,
    /// Receives may hold several datagrams (UDP GRO).
    gro: bool,
    /// Where offload is off: many datagrams per `sendmmsg` and `recvmmsg`.
    mmsg: bool,
    /// Senders of the datagrams of one `recvmmsg`.
    slots: Vec<os::Slot>,
    /// Sent datagrams come back to this host's sockets, this one's too.
    loopback: bool,
    /// The segment size of a batch (see [`Options::datagram_len`]).
    datagram_len: usize,
    /// Released after the receive socket closes (fields drop in order).
    _share: FdShare,
}

/// Why a socket could not be opened, for the user's message; `taken` when
/// the port (or group and port) is held by another program, so that another
/// draw may succeed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenError {
    pub why: String,
    pub taken: bool,
}

impl From<String> for OpenError {
    fn from(why: String) -> Self {
        OpenError { why, taken: false }
    }
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.why)
    }
}

/// Adds what was being done to an error, for the user's message.
fn doing<T>(what: &str, r: io::Result<T>) -> Result<T, String> {
    r.map_err(|e| format!("{what}: {e}"))
}

impl McastSocket {
    /// Joins `group` on `iface` and prepares sending to it, for IPv6 from
    /// `iface.addr` (see [`crate::net::interfaces::ipv6_source`]).
    pub fn open(group: SocketAddr, iface: &Chosen, opts: Options) -> Result<Self, OpenError> {
        if !group.ip().is_multicast() {
            return Err(format!("{} is not a multicast address", group.ip()).into());
        }
        let share = FdShare::take(&SOCKETS_HELD, os::open_file_limit())?;
        if !matches!(
            (group.ip(), iface.addr),
            (IpAddr::V4(_), IpAddr::V4(_)) | (IpAddr::V6(_), IpAddr::V6(_))
        ) {
            return Err(format!("{iface} has no address of the group's family").into());
        }
        let domain = Domain::for_address(group);
        let recv = doing(
            "creating the receive socket",
            Socket::new(domain, Type::DGRAM, Some(Protocol::UDP)),
        )?;
        // Other ranks on this host bind the same group and port; each socket
        // gets its own copy of every datagram.
        doing("setting SO_REUSEADDR", recv.set_reuse_address(true))?;
        doing("setting SO_REUSEPORT", recv.set_reuse_port(true))?;
        // Old kernels lack the option; binding to the group still filters.
        let all_off = match group.ip() {
            IpAddr::V4(_) => recv.set_multicast_all_v4(false),
            IpAddr::V6(_) => recv.set_multicast_all_v6(false),
        };
        if let Err(e) = all_off {
            if e.raw_os_error() != Some(libc::ENOPROTOOPT) {
                return Err(format!("turning IP_MULTICAST_ALL off: {e}").into());
            }
        }
        if opts.rcvbuf > 0 {
            doing(
                "requesting the receive buffer",
                recv.set_recv_buffer_size(opts.rcvbuf),
            )?;
        }
        let granted_rcvbuf = doing("reading the receive buffer size", recv.recv_buffer_size())?;
        // Flow control's window was sized from what `receive_buffer` found.
        if let Err(e) = recv.bind(&bind_address(group, iface).into()) {
            return Err(OpenError {
                why: format!("binding to {group}: {e}"),
                taken: e.kind() == io::ErrorKind::AddrInUse,
            });
        }
        match (group.ip(), iface.addr) {
            (IpAddr::V4(g), _) => doing(
                &format!("joining {g} on {iface}"),
                recv.join_multicast_v4_n(&g, &InterfaceIndexOrAddress::Index(iface.index)),
            )?,
            (IpAddr::V6(g), _) => doing(
                &format!("joining {g} on {iface}"),
                recv.join_multicast_v6(&g, iface.index),
            )?,
        }
        doing(
            "making the receive socket non-blocking",
            recv.set_nonblocking(true),
        )?;

        let sender = Sender::shared(iface, opts)?;
        let gro = receive_offload(&recv, opts)?;
        let gso = match opts.path {
            DatagramPath::Single | DatagramPath::Batched => false,
            DatagramPath::Offload if !sender.segments => {
                return Err(
                    "UDP segmentation offload unavailable (coll_ipmc_datagram_io 1)"
                        .to_string()
                        .into(),
                )
            }
            _ => sender.segments,
        };

        Ok(McastSocket {
            recv: recv.into(),
            to: bind_address(group, iface),
            sender,
            group,
            granted_rcvbuf,
            gso,
            gro,
            mmsg: opts.path != DatagramPath::Single,
            slots: Vec::new(),
            loopback: opts.loopback,
            datagram_len: opts.datagram_len,
            _share: share,
        })
    }

    /// How datagrams pass: "UDP segmentation and receive offload", … (for
    /// messages).
    pub fn path(&self) -> String {
        let send = match (self.gso, self.mmsg) {
            (true, _) => "UDP segmentation offload",
            (false, true) => "sendmmsg",
            (false, false) => "one datagram per send",
        };
        let recv = match (self.gro, self.mmsg) {
            (true, _) => "UDP receive offload",
            (false, true) => "recvmmsg",
            (false, false) => "one datagram per receive",
        };
        match (self.gso, self.gro, self.mmsg) {
            (true, true, _) => "UDP segmentation and receive offload".into(),
            (false, false, true) => "sendmmsg and recvmmsg".into(),
            (false, false, false) => "one datagram per system call".into(),
            _ => format!("{send}, {recv}"),
        }
    }

    /// The group and port this socket is joined to.
    pub fn group(&self) -> SocketAddr {
        self.group
    }

    /// The receive buffer the kernel granted (Linux reports twice the usable
    /// payload, as socket(7) says).
    pub fn granted_rcvbuf(&self) -> usize {
        self.granted_rcvbuf
    }

    /// Sends one datagram to the group. `Ok(false)` when the send buffer is
    /// full and the datagram should be offered again later.
    pub fn send(&self, datagram: &[u8]) -> io::Result<bool> {
        match self.sender.socket.send_to(datagram, self.to) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Receives one datagram into `buf` if one is waiting. `buf` should be
    /// one byte longer than the longest valid datagram, so that a longer one
    /// shows as too long rather than silently truncated to a valid length.
    /// The flag says whether it is this rank's own datagram, looped back.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<Option<(usize, bool)>> {
        match self.recv.recv_from(buf) {
            Ok((n, from)) => Ok(Some((n, from == self.sender.own))),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// Whether a segmented send failed because this path cannot segment: the
/// kernel says EIO where the device cannot checksum the datagrams (or IPsec
/// transforms them) and EINVAL where the segments no longer fit the path's
/// MTU (lowered since the socket was opened); sendmmsg from then on. Any
/// other error (a firewall's EPERM, ENOBUFS, an unreachable network) is
/// this send's own, as it would be one datagram's: offload stays.
fn offload_refused(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EIO | libc::EINVAL))
}

/// Turns UDP receive offload on for `recv` as `opts.path` asks: where the
/// kernel lacks it, the automatic choice goes without it, a forced one fails.
/// Whether it is on.
fn receive_offload(recv: &Socket, opts: Options) -> Result<bool, String> {
    if matches!(opts.path, DatagramPath::Single | DatagramPath::Batched) {
        return Ok(false);
    }
    match os::set_udp_gro(recv.as_raw_fd()) {
        Ok(()) => Ok(true),
        Err(e) if opts.path == DatagramPath::Offload => Err(format!(
            "turning UDP receive offload on (coll_ipmc_datagram_io 1): {e}"
        )),
        Err(e) => {
            log::info!("UDP receive offload unavailable ({e}): recvmmsg instead");
            Ok(false)
        }
    }
}

impl Sender {
    /// The send socket of this process for groups on `iface` with `opts`'
    /// TTL and loop-back: the one some group already holds, or a new one.
    fn shared(iface: &Chosen, opts: Options) -> Result<Arc<Sender>, OpenError> {
        let key = SendKey {
            iface: iface.index,
            source: iface.addr,
            ttl: opts.ttl,
            loopback: opts.loopback,
        };
        // A poisoned list is still a list: a panic elsewhere left it whole.
        let mut senders = SENDERS.lock().unwrap_or_else(PoisonError::into_inner);
        senders.retain(|(_, s)| s.strong_count() > 0);
        if let Some(s) = senders
            .iter()
            .find(|(k, _)| *k == key)
            .and_then(|(_, s)| s.upgrade())
        {
            return Ok(s);
        }
        let sender = Arc::new(Sender::open(iface, key)?);
        senders.push((key, Arc::downgrade(&sender)));
        Ok(sender)
    }

    /// Opens a send socket bound to `iface`'s address, sending by `iface`.
    fn open(iface: &Chosen, key: SendKey) -> Result<Sender, OpenError> {
        let share = FdShare::take(&SOCKETS_HELD, os::open_file_limit())?;
        let source = match iface.addr {
            IpAddr::V4(a) => SocketAddr::from((a, 0)),
            // The source the caller chose for the group's scope; a
            // link-local one is only valid with the interface as scope.
            IpAddr::V6(a) => {
                let scope = if a.segments()[0] & 0xffc0 == 0xfe80 {
                    iface.index
                } else {
                    0
                };
                SocketAddr::V6(SocketAddrV6::new(a, 0, 0, scope))
            }
        };
        let send = doing(
            "creating the send socket",
            Socket::new(
                Domain::for_address(source),
                Type::DGRAM,
                Some(Protocol::UDP),
            ),
        )?;
        match iface.addr {
            IpAddr::V4(a) => {
                doing("choosing the send interface", send.set_multicast_if_v4(&a))?;
                doing("setting the TTL", send.set_multicast_ttl_v4(key.ttl))?;
                doing(
                    "setting loop-back",
                    send.set_multicast_loop_v4(key.loopback),
                )?;
            }
            IpAddr::V6(_) => {
                doing(
                    "choosing the send interface",
                    send.set_multicast_if_v6(iface.index),
                )?;
                doing("setting the hop limit", send.set_multicast_hops_v6(key.ttl))?;
                doing(
                    "setting loop-back",
                    send.set_multicast_loop_v6(key.loopback),
                )?;
            }
        }
        doing(
            &format!("binding the send socket to {source}"),
            send.bind(&source.into()),
        )?;
        // The send buffer bounds what the root hands the kernel at once:
        // the kernel drops without a word what the interface's queue cannot
        // take (a `tbf`'s 2.5 MB at 100 Mbit/s, 1,000 frames by default), so
        // the buffer must stay below that; then a full buffer makes the root
        // wait. Groups that share the socket share its buffer, and so never
        // queue more together than one group would.
        doing(
            "requesting the send buffer",
            send.set_send_buffer_size(SEND_BUFFER),
        )?;
        doing(
            "making the send socket non-blocking",
            send.set_nonblocking(true),
        )?;
        let own = doing("reading the send address", send.local_addr())?
            .as_socket()
            .ok_or_else(|| "the send socket has no IP address".to_string())?;
        let segments = match os::check_udp_segment(send.as_raw_fd()) {
            Ok(()) => true,
            Err(e) => {
                log::info!("UDP segmentation offload unavailable ({e}): sendmmsg instead");
                false
            }
        };
        Ok(Sender {
            socket: send.into(),
            own,
            segments,
            _share: share,
        })
    }
}

/// The group address with the interface as scope for IPv6 (link-local
/// groups need it; it is harmless for wider scopes).
fn bind_address(group: SocketAddr, iface: &Chosen) -> SocketAddr {
    match group {
        SocketAddr::V6(mut g) => {
            g.set_scope_id(iface.index);
            SocketAddr::V6(g)
        }
        v4 => v4,
    }
}

impl crate::base::io::DatagramIo for McastSocket {
    fn send(&mut self, datagram: &[u8]) -> io::Result<bool> {
        McastSocket::send(self, datagram)
    }

    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<(usize, bool)>> {
        McastSocket::recv(self, buf)
    }

    fn group(&self) -> String {
        McastSocket::group(self).to_string()
    }

    fn loops_back(&self) -> bool {
        self.loopback
    }

    fn batch_limit(&self) -> usize {
        if self.gso {
            (MAX_SEND / self.datagram_len.max(1)).clamp(1, MAX_SEGMENTS)
        } else if self.mmsg {
            os::MMSG_MAX
        } else {
            1
        }
    }

    fn send_batch(&mut self, batch: &[u8], len: usize) -> io::Result<usize> {
        let fd = self.sender.socket.as_raw_fd();
        if !self.gso {
            if self.mmsg {
                return os::send_datagrams(fd, &self.to.into(), batch, len);
            }
            return send_one_by_one(self, batch, len);
        }
        // The kernel cuts the batch into datagrams of `len` bytes; it takes
        // all of them or none.
        debug_assert_eq!(len, self.datagram_len);
        match os::send_segments(fd, &self.to.into(), batch, len) {
            Ok(true) => Ok(batch.len().div_ceil(len.max(1))),
            Ok(false) => Ok(0),
            Err(e) if !offload_refused(&e) => Err(e),
            Err(e) => {
                log::info!("UDP segmentation offload failed ({e}): sendmmsg instead");
                self.gso = false;
                self.mmsg = true;
                os::send_datagrams(fd, &self.to.into(), batch, len)
            }
        }
    }

    fn lost_by_error(&self, offered: usize) -> usize {
        // One segmented send is one packet until the kernel cuts it.
        if self.gso {
            offered
        } else {
            offered.min(1)
        }
    }

    fn receive_buffer(&self, datagram_len: usize) -> usize {
        if self.gro {
            // A receive holds at most 64 KiB, and one byte more shows an
            // overlong datagram as such.
            ((64 << 10) + 1).max(datagram_len + 1)
        } else if self.mmsg {
            (datagram_len + 1) * os::MMSG_MAX
        } else {
            datagram_len + 1
        }
    }

    fn recv_batch(&mut self, buf: &mut [u8], out: &mut Vec<Place>) -> io::Result<usize> {
        let fd = self.recv.as_raw_fd();
        if self.gro {
            let Some(r) = os::recv_segments(fd, buf)? else {
                return Ok(0);
            };
            // Datagrams of one sender back to back, the last maybe shorter.
            let own = r.from == Some(self.sender.own);
            let before = out.len();
            let mut at = 0;
            while at < r.len {
                let end = r.len.min(at + r.segment.max(1));
                out.push(Place {
                    bytes: at..end,
                    own,
                });
                at = end;
            }
            return Ok(out.len() - before);
        }
        if self.mmsg {
            let stride = buf.len() / os::MMSG_MAX;
            if stride > self.datagram_len {
                self.slots.clear();
                let n = os::recv_datagrams(fd, buf, stride, &mut self.slots)?;
                out.extend(self.slots.iter().map(|s| Place {
                    bytes: s.start..s.start + s.len,
                    own: s.from == Some(self.sender.own),
                }));
                return Ok(n);
            }
        }
        Ok(match McastSocket::recv(self, buf)? {
            Some((n, own)) => {
                out.push(Place { bytes: 0..n, own });
                1
            }
            None => 0,
        })
    }
}

/// The receive buffer a multicast socket that asks for `requested` bytes
/// (0: the system's default) gets on this host, as the kernel reports it
/// (with its overhead: Linux doubles the request, capped at
/// `net.core.rmem_max`); `None` if no socket can tell.
pub fn receive_buffer(requested: usize) -> Option<usize> {
    let probe = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))
        .or_else(|_| Socket::new(Domain::IPV6, Type::DGRAM, Some(Protocol::UDP)))
        .ok()?;
    if requested > 0 {
        probe.set_recv_buffer_size(requested).ok()?;
    }
    probe.recv_buffer_size().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockets_stay_within_a_quarter_of_the_open_file_limit() {
        // A count of its own: the process-wide one is shared with any test
        // that opens a group.
        static HELD: AtomicU64 = AtomicU64::new(0);
        let taken: Vec<FdShare> = (0..4)
            .map(|_| FdShare::take(&HELD, Some(16)).unwrap())
            .collect();
        let why = FdShare::take(&HELD, Some(16)).unwrap_err().why;
        assert!(why.contains("holds 4 of the 16 files"), "{why}");
        assert!(FdShare::take(&HELD, None).is_ok(), "no limit, no share");
        drop(taken);
        assert!(FdShare::take(&HELD, Some(16)).is_ok());
        assert_eq!(HELD.load(Ordering::Relaxed), 0);
    }
}
