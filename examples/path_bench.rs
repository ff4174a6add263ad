//! How fast datagrams pass between ipmc's sockets and the kernel, without
//! MPI: one sender multicasts MTU-sized ipmc datagrams (each with its
//! keyed BLAKE3 tag, its AES-128-POLYVAL tag with `--auth polyval`, or none with
//! `--auth none`) as fast as its socket
//! takes them, receivers read and verify them; beside it, one TCP connection moves the same bytes. Each side
//! prints what it moved and the CPU time it took (`scripts/path-bench` runs
//! them on the emulated cluster and makes the table).
//!
//!   path_bench send --group ADDR:PORT --interface NAME --seconds S --path offload|single [--auth tag|polyval|none]
//!   path_bench recv --group ADDR:PORT --interface NAME --seconds S --path offload|single [--auth tag|polyval|none]
//!   path_bench tcp-send --to ADDR:PORT --seconds S
//!   path_bench tcp-recv --listen ADDR:PORT --seconds S
//!
//! Each side prints one line, `path_bench: role=R bytes=B datagrams=D
//! seconds=T cpu_s=C` (the receiver's seconds run from its first datagram to
//! its last). Rule zero: it refuses the machine's own network namespace.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use ipmc::base::io::DatagramIo;
use ipmc::base::params::DatagramPath;
use ipmc::group::setup::fitting_fragment;
use ipmc::net::interfaces::{choose, IfList};
use ipmc::net::mcast_socket::{McastSocket, Options};
use ipmc::platform::os::{interface_addresses, interface_mtu, thread_cpu_time};
use ipmc::protocol::datagram::{self, Auth, Header, Key, Protection, KEY_LEN};

/// The flags this program takes, each with a value.
struct Args {
    role: String,
    flags: Vec<(String, String)>,
}

impl Args {
    fn get(&self, name: &str) -> Result<&str, String> {
        self.flags
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .ok_or_else(|| format!("path_bench {}: {name} is required", self.role))
    }

    fn seconds(&self) -> Result<Duration, String> {
        let s: f64 = self
            .get("--seconds")?
            .parse()
            .map_err(|_| "--seconds: a number")?;
        if !(0.1..=600.0).contains(&s) {
            return Err("--seconds: 0.1 to 600".into());
        }
        Ok(Duration::from_secs_f64(s))
    }
}

fn parse() -> Result<Args, String> {
    let mut argv = std::env::args().skip(1);
    let role = argv
        .next()
        .ok_or("path_bench: send, recv, tcp-send or tcp-recv")?;
    let rest: Vec<String> = argv.collect();
    if rest.len() % 2 != 0 {
        return Err("path_bench: every flag takes a value".into());
    }
    let flags = rest
        .chunks(2)
        .map(|p| (p[0].clone(), p[1].clone()))
        .collect();
    Ok(Args { role, flags })
}

fn report(role: &str, bytes: u64, datagrams: u64, seconds: f64, cpu: Duration) {
    println!(
        "path_bench: role={role} bytes={bytes} datagrams={datagrams} seconds={seconds:.4} cpu_s={:.4}",
        cpu.as_secs_f64()
    );
}

/// The multicast socket of `args`, and the datagram length that fits its
/// interface's MTU.
fn socket(args: &Args) -> Result<(McastSocket, usize, Protection), String> {
    let group: SocketAddr = args
        .get("--group")?
        .parse()
        .map_err(|_| "--group: ADDR:PORT")?;
    let name = args.get("--interface")?;
    let addrs = interface_addresses().map_err(|e| e.to_string())?;
    let list = IfList::parse(name)?;
    let iface = choose(&addrs, &list, &IfList::default(), group.is_ipv6())?;
    let mtu = interface_mtu(name).map_err(|e| format!("{name}: {e}"))?;
    let auth = match args.get("--auth").unwrap_or("tag") {
        "tag" => Auth::Tag(Key([7; KEY_LEN])),
        "polyval" => Auth::Polyval(Key([7; KEY_LEN])),
        "none" => Auth::crc(false),
        a => return Err(format!("--auth: tag, polyval or none, not {a}")),
    };
    let fragment = fitting_fragment(65024, mtu, group.is_ipv6(), auth);
    let prot = Protection::new(auth);
    let path = match args.get("--path")? {
        "offload" => DatagramPath::Offload,
        "single" => DatagramPath::Single,
        "mmsg" => DatagramPath::Batched,
        p => return Err(format!("--path: offload, mmsg or single, not {p}")),
    };
    let opts = Options {
        ttl: 1,
        loopback: false,
        rcvbuf: 8 << 20,
        path,
        datagram_len: fragment + prot.overhead(),
    };
    let s = McastSocket::open(group, &iface, opts).map_err(|e| e.to_string())?;
    Ok((s, fragment, prot))
}

fn send(args: &Args) -> Result<(), String> {
    let (mut s, fragment, prot) = socket(args)?;
    let until = Instant::now() + args.seconds()?;
    let payload = vec![0x5au8; fragment];
    let len = fragment + prot.overhead();
    let (mut batch, mut sent, mut k) = (Vec::new(), 0u64, 0u32);
    let (cpu0, t0) = (thread_cpu_time(), Instant::now());
    while Instant::now() < until {
        batch.clear();
        for i in 0..s.batch_limit() as u32 {
            let h = Header {
                comm_id: 1,
                bcast: 0,
                message_len: u64::MAX,
                fragment: k + i,
            };
            datagram::encode_into(&h, &payload, &prot, &mut batch);
        }
        match s.send_batch(&batch, len).map_err(|e| e.to_string())? {
            0 => std::thread::sleep(Duration::from_micros(20)),
            n => {
                sent += n as u64;
                k = k.wrapping_add(n as u32);
            }
        }
    }
    report(
        "send",
        sent * fragment as u64,
        sent,
        t0.elapsed().as_secs_f64(),
        thread_cpu_time() - cpu0,
    );
    Ok(())
}

fn recv(args: &Args) -> Result<(), String> {
    let (mut s, fragment, prot) = socket(args)?;
    let s_datagram_len = fragment + prot.overhead();
    let until = Instant::now() + args.seconds()?;
    let mut buf = vec![0u8; s.receive_buffer(s_datagram_len)];
    let mut places = Vec::new();
    let (mut bytes, mut count, mut first, mut last) = (0u64, 0u64, None, Instant::now());
    let cpu0 = thread_cpu_time();
    while Instant::now() < until {
        places.clear();
        match s
            .recv_batch(&mut buf, &mut places)
            .map_err(|e| e.to_string())?
        {
            0 => std::thread::sleep(Duration::from_micros(20)),
            _ => {
                for p in &places {
                    // Checked as ipmc checks a datagram: its tag, where it lies.
                    if let Ok(d) = datagram::verify(&buf[p.bytes.clone()], &prot) {
                        bytes += d.payload.len() as u64;
                        count += 1;
                    }
                }
                first.get_or_insert_with(Instant::now);
                last = Instant::now();
            }
        }
    }
    let seconds = first.map_or(0.0, |f| (last - f).as_secs_f64());
    report("recv", bytes, count, seconds, thread_cpu_time() - cpu0);
    Ok(())
}

fn tcp_send(args: &Args) -> Result<(), String> {
    let to: SocketAddr = args.get("--to")?.parse().map_err(|_| "--to: ADDR:PORT")?;
    let until = Instant::now() + args.seconds()?;
    let mut stream = TcpStream::connect(to).map_err(|e| format!("connecting to {to}: {e}"))?;
    let block = vec![0x5au8; 1 << 20];
    let (mut bytes, cpu0, t0) = (0u64, thread_cpu_time(), Instant::now());
    while Instant::now() < until {
        stream.write_all(&block).map_err(|e| e.to_string())?;
        bytes += block.len() as u64;
    }
    report(
        "tcp-send",
        bytes,
        0,
        t0.elapsed().as_secs_f64(),
        thread_cpu_time() - cpu0,
    );
    Ok(())
}

fn tcp_recv(args: &Args) -> Result<(), String> {
    let at: SocketAddr = args
        .get("--listen")?
        .parse()
        .map_err(|_| "--listen: ADDR:PORT")?;
    let listener = TcpListener::bind(at).map_err(|e| format!("listening on {at}: {e}"))?;
    let limit = args.seconds()?;
    let (mut stream, _) = listener.accept().map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(limit))
        .map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; 1 << 20];
    let (mut bytes, cpu0, t0) = (0u64, thread_cpu_time(), Instant::now());
    loop {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => bytes += n as u64,
        }
    }
    report(
        "tcp-recv",
        bytes,
        0,
        t0.elapsed().as_secs_f64(),
        thread_cpu_time() - cpu0,
    );
    Ok(())
}

fn main() -> ExitCode {
    let run = || -> Result<(), String> {
        ipmc::net::private_namespace::check("path_bench")?;
        let args = parse()?;
        match args.role.as_str() {
            "send" => send(&args),
            "recv" => recv(&args),
            "tcp-send" => tcp_send(&args),
            "tcp-recv" => tcp_recv(&args),
            r => Err(format!("path_bench: unknown role {r}")),
        }
    };
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
