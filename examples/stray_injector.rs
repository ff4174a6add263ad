//! Stray datagrams for the fault tests: joins an ipmc job's multicast group
//! and, for every real ipmc datagram it receives, multicasts to the same group
//! and port a datagram of random bytes, a truncated copy, a copy with one bit
//! flipped, and a well-formed copy (valid CRC) with another communicator id;
//! and random garbage at a steady rate even when nothing arrives.
//!
//! With `--mode forge` it attacks instead, as any host that can join the
//! group could: for every real datagram it sends forgeries that name the
//! same communicator, each with a valid CRC-32 (and, when the real one
//! carries a tag, also one with a tag under a key of its own): wrong bytes
//! for the next broadcast numbers (`forged`), the real payload with one bit
//! flipped (`flipped`), and the real payload replayed as the next
//! broadcast's (`replayed`).
//!
//!   stray_injector --group ADDR:PORT --interface NAME --seconds S [--seed N] [--mode strays|forge]
//!
//! Rule zero (no multicast leaves the machine): it refuses to run without an
//! explicit interface, with a group outside 239.0.0.0/8 (IPv4) or ff00::/8
//! (IPv6), or in a network namespace with a default route (the machine's
//! own); its TTL (hop limit) is 1.
//! It stops after S seconds or at SIGTERM/SIGINT, and then prints how many
//! datagrams of each kind it sent.

use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ipmc::net::interfaces::{choose, Chosen, IfList};
use ipmc::platform::os::interface_addresses;
use ipmc::protocol::datagram::{
    encode, header, Auth, Header, Key, Protection, HEADER_LEN, KEY_LEN,
};
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use socket2::{Domain, InterfaceIndexOrAddress, Protocol, Socket, Type};

/// The only TTL (IPv6: hop limit) this program sends with.
const TTL: u32 = 1;
/// Longest datagram it reads (one more than UDP can carry is not needed:
/// it only copies what it sees).
const RECV_BUF: usize = 65536;
/// Interval of the garbage sent whether or not anything arrives.
const GARBAGE_EVERY: Duration = Duration::from_millis(10);
/// Receive timeout: bounds every turn of the loop.
const POLL: Duration = Duration::from_millis(5);

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

struct Args {
    group: SocketAddr,
    interface: String,
    seconds: f64,
    seed: u64,
    forge: bool,
}

fn usage(why: &str) -> String {
    format!(
        "stray_injector: {why}\n\
         usage: stray_injector --group ADDR:PORT --interface NAME --seconds S [--seed N] \
         [--mode strays|forge]"
    )
}

fn parse_args() -> Result<Args, String> {
    let mut group = None;
    let mut interface = None;
    let mut seconds = None;
    let mut seed = 1u64;
    let mut forge = false;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it
            .next()
            .ok_or_else(|| usage(&format!("{flag} needs a value")))?;
        match flag.as_str() {
            "--group" => {
                group = Some(
                    value
                        .parse::<SocketAddr>()
                        .map_err(|_| usage(&format!("{value} is not ADDR:PORT")))?,
                )
            }
            "--interface" => interface = Some(value),
            "--seconds" => {
                seconds = Some(
                    value
                        .parse::<f64>()
                        .ok()
                        .filter(|s| s.is_finite() && *s > 0.0 && *s <= 3600.0)
                        .ok_or_else(|| usage(&format!("{value} is not 0 < S <= 3600")))?,
                )
            }
            "--seed" => {
                seed = value
                    .parse()
                    .map_err(|_| usage(&format!("{value} is not a seed")))?
            }
            "--mode" => {
                forge = match value.as_str() {
                    "strays" => false,
                    "forge" => true,
                    _ => return Err(usage(&format!("{value} is not strays or forge"))),
                }
            }
            _ => return Err(usage(&format!("unknown option {flag}"))),
        }
    }
    let group = group.ok_or_else(|| usage("--group is required"))?;
    let interface = interface
        .filter(|i| !i.is_empty())
        .ok_or_else(|| usage("--interface is required (never a default interface)"))?;
    let seconds = seconds.ok_or_else(|| usage("--seconds is required"))?;
    let scoped = match group.ip() {
        IpAddr::V4(a) => a.octets()[0] == 239,
        IpAddr::V6(a) => a.octets()[0] == 0xff,
    };
    if !scoped {
        return Err(usage(&format!(
            "refusing group {}: only 239.0.0.0/8 or ff00::/8",
            group.ip()
        )));
    }
    if group.port() == 0 {
        return Err(usage("the port must not be 0"));
    }
    Ok(Args {
        group,
        interface,
        seconds,
        seed,
        forge,
    })
}

fn doing<T>(what: &str, r: io::Result<T>) -> Result<T, String> {
    r.map_err(|e| format!("stray_injector: {what}: {e}"))
}

/// The receive socket joined to the group on the interface, and a send
/// socket connected to the group with TTL 1 and no loop-back (so the
/// injector never sees, and never copies, its own datagrams).
fn open(group: SocketAddr, iface: &Chosen) -> Result<(UdpSocket, UdpSocket), String> {
    let domain = Domain::for_address(group);
    let scoped = match group {
        SocketAddr::V6(mut g) => {
            g.set_scope_id(iface.index);
            SocketAddr::V6(g)
        }
        v4 => v4,
    };
    let recv = doing(
        "creating the receive socket",
        Socket::new(domain, Type::DGRAM, Some(Protocol::UDP)),
    )?;
    doing("SO_REUSEADDR", recv.set_reuse_address(true))?;
    doing("SO_REUSEPORT", recv.set_reuse_port(true))?;
    doing("SO_RCVBUF", recv.set_recv_buffer_size(4 << 20))?;
    doing(&format!("binding {scoped}"), recv.bind(&scoped.into()))?;
    match group.ip() {
        IpAddr::V4(g) => {
            let _ = recv.set_multicast_all_v4(false);
            doing(
                &format!("joining {g} on {iface}"),
                recv.join_multicast_v4_n(&g, &InterfaceIndexOrAddress::Index(iface.index)),
            )?
        }
        IpAddr::V6(g) => {
            let _ = recv.set_multicast_all_v6(false);
            doing(
                &format!("joining {g} on {iface}"),
                recv.join_multicast_v6(&g, iface.index),
            )?
        }
    }
    doing("receive timeout", recv.set_read_timeout(Some(POLL)))?;

    let send = doing(
        "creating the send socket",
        Socket::new(domain, Type::DGRAM, Some(Protocol::UDP)),
    )?;
    match (group.ip(), iface.addr) {
        (IpAddr::V4(_), IpAddr::V4(a)) => {
            doing("IP_MULTICAST_IF", send.set_multicast_if_v4(&a))?;
            doing("IP_MULTICAST_TTL", send.set_multicast_ttl_v4(TTL))?;
            doing("IP_MULTICAST_LOOP", send.set_multicast_loop_v4(false))?;
            let ttl = doing("reading the TTL", send.multicast_ttl_v4())?;
            if ttl != TTL {
                return Err(format!("stray_injector: TTL is {ttl}, not {TTL}"));
            }
        }
        (IpAddr::V6(_), IpAddr::V6(_)) => {
            doing("IPV6_MULTICAST_IF", send.set_multicast_if_v6(iface.index))?;
            doing("IPV6_MULTICAST_HOPS", send.set_multicast_hops_v6(TTL))?;
            doing("IPV6_MULTICAST_LOOP", send.set_multicast_loop_v6(false))?;
            let hops = doing("reading the hop limit", send.multicast_hops_v6())?;
            if hops != TTL {
                return Err(format!("stray_injector: hop limit is {hops}, not {TTL}"));
            }
        }
        _ => {
            return Err(format!(
                "stray_injector: {iface} has no address of the group's family"
            ))
        }
    }
    doing(
        &format!("connecting to {scoped}"),
        send.connect(&scoped.into()),
    )?;
    doing("non-blocking send", send.set_nonblocking(true))?;
    Ok((recv.into(), send.into()))
}

/// Datagrams sent, per kind, and those the kernel did not take.
#[derive(Default)]
struct Counts {
    received: u64,
    real: u64,
    random: u64,
    truncated: u64,
    bitflip: u64,
    other_comm: u64,
    garbage: u64,
    forged: u64,
    flipped: u64,
    replayed: u64,
    not_sent: u64,
}

fn send(sock: &UdpSocket, bytes: &[u8], counter: &mut u64, not_sent: &mut u64) {
    match sock.send(bytes) {
        Ok(_) => *counter += 1,
        Err(_) => *not_sent += 1,
    }
}

fn random_bytes(rng: &mut ChaCha8Rng, max: usize, out: &mut Vec<u8>) {
    let len = (rng.next_u64() % (max as u64 + 1)) as usize;
    out.resize(len, 0);
    rng.fill_bytes(out);
}

/// A real datagram: its header, payload and flags byte.
fn real(bytes: &[u8]) -> Option<(Header, &[u8], u8)> {
    let h = header(bytes).ok()?;
    let len = usize::from(u16::from_be_bytes([bytes[32], bytes[33]]));
    let payload = bytes.get(HEADER_LEN..HEADER_LEN + len)?;
    Some((h, payload, bytes[3]))
}

/// The protection a datagram with `flags` claims, under a key of our own
/// (the injector does not know the job's).
fn protection_like(flags: u8, rng: &mut ChaCha8Rng) -> Protection {
    let mut key = [0u8; KEY_LEN];
    rng.fill_bytes(&mut key);
    Protection::new(match flags {
        0 => Auth::crc(false),
        1 => Auth::crc(true),
        f if f & 0x04 != 0 => Auth::Encrypt(Key(key)),
        f if f & 0x10 != 0 => Auth::Polyval(Key(key)),
        _ => Auth::Tag(Key(key)),
    })
}

/// Sends `payload` as `h` under the real datagram's kind of protection and,
/// if that is a tag, also with a valid CRC-32 instead.
fn forge(
    sock: &UdpSocket,
    h: &Header,
    payload: &[u8],
    like: (&Protection, u8),
    out: &mut Vec<u8>,
) -> (u64, u64) {
    let (prot, flags) = like;
    let (mut sent, mut not_sent) = (0, 0);
    encode(h, payload, prot, out);
    send(sock, out, &mut sent, &mut not_sent);
    if flags > 1 {
        encode(h, payload, &Protection::crc(true), out);
        send(sock, out, &mut sent, &mut not_sent);
    }
    (sent, not_sent)
}

/// Broadcast numbers ahead of the one seen that the forgeries aim at.
const AHEAD: u64 = 6;

fn run(args: &Args) -> Result<Counts, String> {
    let addrs = doing("listing interfaces", interface_addresses())?;
    let include = IfList::parse(&args.interface).map_err(|e| format!("stray_injector: {e}"))?;
    let iface = choose(&addrs, &include, &IfList::default(), args.group.is_ipv6())
        .map_err(|e| format!("stray_injector: {e}"))?;
    if iface.name != args.interface {
        return Err(format!(
            "stray_injector: --interface must name an interface, got {}",
            args.interface
        ));
    }
    let (recv, sock) = open(args.group, &iface)?;
    eprintln!(
        "stray_injector: joined {} on {iface}, ttl {TTL}, {} s, seed {}",
        args.group, args.seconds, args.seed
    );

    let mut rng = ChaCha8Rng::seed_from_u64(args.seed);
    let mut c = Counts::default();
    let mut buf = vec![0u8; RECV_BUF];
    let mut out = Vec::with_capacity(RECV_BUF);
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(args.seconds);
    let mut next_garbage = start;
    while !STOP.load(Ordering::Relaxed) {
        let now = Instant::now();
        if now >= end {
            break;
        }
        if now >= next_garbage {
            random_bytes(&mut rng, 1500, &mut out);
            send(&sock, &out, &mut c.garbage, &mut c.not_sent);
            next_garbage += GARBAGE_EVERY;
            if next_garbage < now {
                next_garbage = now + GARBAGE_EVERY;
            }
        }
        let n = match recv.recv(&mut buf) {
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                continue
            }
            Err(e) => return Err(format!("stray_injector: receiving: {e}")),
        };
        c.received += 1;
        let got = &buf[..n];
        let Some((h, payload, flags)) = real(got) else {
            continue;
        };
        c.real += 1;
        let prot = protection_like(flags, &mut rng);

        if args.forge {
            let mut bytes = payload.to_vec();
            for ahead in 1..=AHEAD {
                rng.fill_bytes(&mut bytes);
                let next = Header {
                    bcast: h.bcast + ahead,
                    ..h
                };
                let (sent, lost) = forge(&sock, &next, &bytes, (&prot, flags), &mut out);
                c.forged += sent;
                c.not_sent += lost;
            }
            if !payload.is_empty() {
                bytes.copy_from_slice(payload);
                let bit = (rng.next_u64() % (bytes.len() as u64 * 8)) as usize;
                bytes[bit / 8] ^= 1 << (bit % 8);
                let (sent, lost) = forge(&sock, &h, &bytes, (&prot, flags), &mut out);
                c.flipped += sent;
                c.not_sent += lost;
            }
            let next = Header {
                bcast: h.bcast + 1,
                ..h
            };
            let (sent, lost) = forge(&sock, &next, payload, (&prot, flags), &mut out);
            c.replayed += sent;
            c.not_sent += lost;
            continue;
        }

        // Random bytes of random length (up to a little more than the original).
        random_bytes(&mut rng, n + 64, &mut out);
        send(&sock, &out, &mut c.random, &mut c.not_sent);

        // A truncated copy: 0 .. n-1 bytes of it.
        let cut = (rng.next_u64() % n as u64) as usize;
        send(&sock, &got[..cut], &mut c.truncated, &mut c.not_sent);

        // One bit flipped, anywhere.
        out.clear();
        out.extend_from_slice(got);
        let bit = (rng.next_u64() % (n as u64 * 8)) as usize;
        out[bit / 8] ^= 1 << (bit % 8);
        send(&sock, &out, &mut c.bitflip, &mut c.not_sent);

        // Well formed (valid CRC, or a tag under another key), another
        // communicator: what another job on the group sends.
        let mut other = rng.next_u64();
        if other == h.comm_id {
            other ^= 1;
        }
        let header = Header {
            comm_id: other,
            ..h
        };
        encode(&header, payload, &prot, &mut out);
        send(&sock, &out, &mut c.other_comm, &mut c.not_sent);
    }
    Ok(c)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = ipmc::net::private_namespace::check("stray_injector") {
        eprintln!("{e}");
        return ExitCode::from(2);
    }
    let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGTERM, handler);
        libc::signal(libc::SIGINT, handler);
    }
    match run(&args) {
        Ok(c) => {
            println!(
                "stray_injector: received={} real={} random={} truncated={} bitflip={} \
                 other_comm={} garbage={} forged={} flipped={} replayed={} not_sent={}",
                c.received,
                c.real,
                c.random,
                c.truncated,
                c.bitflip,
                c.other_comm,
                c.garbage,
                c.forged,
                c.flipped,
                c.replayed,
                c.not_sent
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(1)
        }
    }
}
