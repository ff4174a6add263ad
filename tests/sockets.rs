//! ipmc's multicast sockets on a real kernel, inside a private network
//! namespace whose only interface is a loopback that can multicast.
//!
//! The test re-runs its own binary under `unshare -n`; the inner run refuses
//! to send anything unless it sees that namespace (only `lo` exists).

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use ipmc::base::io::DatagramIo;
use ipmc::base::params::DatagramPath;
use ipmc::net::interfaces::{choose, IfList};
use ipmc::net::mcast_socket::{McastSocket, Options};
use ipmc::platform::os::interface_addresses;

const INSIDE: &str = "IPMC_SOCKET_TEST_INSIDE_NETNS";

#[test]
fn multicast_sockets_in_a_private_namespace() {
    if std::env::var_os(INSIDE).is_some() {
        return inside();
    }
    let exe = std::env::current_exe().unwrap();
    let out = Command::new("unshare")
        .args([
            "-n",
            "sh",
            "-c",
            "ip link set lo up && ip link set lo multicast on && \
             ip route add 224.0.0.0/4 dev lo && \
             exec \"$0\" --exact multicast_sockets_in_a_private_namespace --nocapture",
        ])
        .arg(exe)
        .env(INSIDE, "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "inner run failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn inside() {
    // (sysfs may show the namespace that mounted it; getifaddrs shows ours.)
    let addrs = interface_addresses().unwrap();
    assert!(
        addrs.iter().all(|a| a.name == "lo"),
        "not in a private network namespace: {addrs:?}"
    );

    let lo = choose(
        &addrs,
        &IfList::parse("lo").unwrap(),
        &IfList::default(),
        false,
    )
    .unwrap();
    assert_eq!(lo.name, "lo");
    // With both lists empty loopback is skipped, and nothing else exists here.
    let err = choose(&addrs, &IfList::default(), &IfList::default(), false).unwrap_err();
    assert!(err.contains("lo: loopback"), "{err}");

    let opts = Options {
        ttl: 1,
        loopback: true,
        rcvbuf: 1 << 20,
        path: DatagramPath::Single,
        datagram_len: 1000,
    };
    let group_a: SocketAddr = "239.192.10.1:6001".parse().unwrap();
    let group_b: SocketAddr = "239.192.10.2:6001".parse().unwrap();
    // One process's groups that send alike share one send socket, so each
    // group more holds one file more; a socket that sends otherwise (here
    // with another TTL) has its own send socket, as another process has.
    let fds = || std::fs::read_dir("/proc/self/fd").unwrap().count();
    let a1 = McastSocket::open(group_a, &lo, opts).unwrap();
    let other = Options { ttl: 2, ..opts };
    let a2 = McastSocket::open(group_a, &lo, other).unwrap();
    let before = fds();
    let b = McastSocket::open(group_b, &lo, opts).unwrap();
    assert_eq!(fds(), before + 1, "a group more, one file more");
    // The kernel doubles the request (socket(7)), capped by rmem_max.
    assert!(a1.granted_rcvbuf() > 0);

    let mut buf = [0u8; 2000];
    assert_eq!(
        a1.recv(&mut buf).unwrap(),
        None,
        "a fresh socket has nothing"
    );

    assert!(a1.send(b"to group a").unwrap());
    assert!(b.send(b"to group b").unwrap());
    let got = |s: &McastSocket| {
        let mut seen = Vec::new();
        // Loopback delivers at once; the wait is for anything unexpected.
        let deadline = Instant::now() + Duration::from_millis(300);
        while Instant::now() < deadline {
            let mut buf = [0u8; 2000];
            match s.recv(&mut buf).unwrap() {
                Some((n, own)) => seen.push((buf[..n].to_vec(), own)),
                None => std::thread::sleep(Duration::from_millis(5)),
            }
        }
        seen
    };
    // Same port, other group: nothing crosses (bound to the group, and
    // IP_MULTICAST_ALL off). Every socket of the group gets its own copy;
    // only the copies of the sender's send socket are flagged as its own.
    assert_eq!(got(&a1), [(b"to group a".to_vec(), true)]);
    assert_eq!(got(&a2), [(b"to group a".to_vec(), false)]);
    assert_eq!(got(&b), [(b"to group b".to_vec(), true)]);

    // A datagram longer than the buffer shows as filling it, so the decoder
    // sees a wrong length rather than a silently shortened datagram.
    assert!(a2.send(&[7u8; 3000]).unwrap());
    let deadline = Instant::now() + Duration::from_secs(2);
    let n = loop {
        if let Some((n, _)) = a1.recv(&mut buf).unwrap() {
            break n;
        }
        assert!(Instant::now() < deadline, "datagram lost on loopback");
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(n, buf.len());

    // Sockets close and leave the group when dropped.
    drop((a1, a2, b));
    let again = McastSocket::open(group_a, &lo, opts).unwrap();
    assert_eq!(again.group(), group_a);

    // A unicast address is refused before any socket is made.
    let err = McastSocket::open("10.0.0.1:6001".parse().unwrap(), &lo, opts).unwrap_err();
    assert!(err.why.contains("not a multicast address"), "{err}");
    assert!(!err.taken);

    // A port another program holds (without SO_REUSEADDR) is reported as
    // taken, so that setup draws another one.
    let holder = std::net::UdpSocket::bind("0.0.0.0:6005").unwrap();
    let err = McastSocket::open("239.192.10.3:6005".parse().unwrap(), &lo, opts).unwrap_err();
    assert!(err.taken, "{err}");
    assert!(err.why.contains("binding to 239.192.10.3:6005"), "{err}");
    drop(holder);
    McastSocket::open("239.192.10.3:6005".parse().unwrap(), &lo, opts).unwrap();

    batches_cut_into_datagrams(&lo, opts);
}

/// Many datagrams per system call (UDP segmentation and receive offload,
/// or `sendmmsg` and `recvmmsg`): one send of 10 datagrams of 1,000 bytes,
/// the last shorter; the other sockets read them in batches, each datagram
/// at its length, the sender's own copy marked as its own; one datagram per
/// call reads the same bytes.
fn batches_cut_into_datagrams(lo: &ipmc::net::interfaces::Chosen, opts: Options) {
    let group: SocketAddr = "239.192.10.4:6002".parse().unwrap();
    let offload = Options {
        path: DatagramPath::Offload,
        ..opts
    };
    // The sender's send socket is its own, as another process's would be.
    let mut tx = McastSocket::open(group, lo, Options { ttl: 2, ..offload }).unwrap();
    let mut rx = McastSocket::open(group, lo, offload).unwrap();
    let mut single = McastSocket::open(group, lo, opts).unwrap();
    let batched = Options {
        path: DatagramPath::Batched,
        ..opts
    };
    let mut mmsg = McastSocket::open(group, lo, batched).unwrap();
    assert_eq!(tx.path(), "UDP segmentation and receive offload");
    assert_eq!(single.path(), "one datagram per system call");
    assert_eq!(mmsg.path(), "sendmmsg and recvmmsg");
    assert!(tx.batch_limit() >= 10);
    assert!(mmsg.batch_limit() >= 10);
    assert_eq!(single.batch_limit(), 1);
    let mut batch = Vec::new();
    for k in 0..10u8 {
        batch.extend(std::iter::repeat_n(k, if k == 9 { 500 } else { 1000 }));
    }
    assert_eq!(tx.send_batch(&batch, 1000).unwrap(), 10);

    let read = |s: &mut McastSocket| {
        let (mut datagrams, mut calls, mut own) = (Vec::new(), 0, Vec::new());
        let deadline = Instant::now() + Duration::from_secs(2);
        let mut buf = vec![0u8; s.receive_buffer(1000)];
        let mut places = Vec::new();
        while datagrams.len() < 10 && Instant::now() < deadline {
            places.clear();
            match s.recv_batch(&mut buf, &mut places).unwrap() {
                0 => std::thread::sleep(Duration::from_millis(5)),
                _ => {
                    calls += 1;
                    for p in &places {
                        own.push(p.own);
                        datagrams.push(buf[p.bytes.clone()].to_vec());
                    }
                }
            }
        }
        (datagrams, calls, own)
    };
    let (got, calls, own) = read(&mut rx);
    let want: Vec<Vec<u8>> = batch.chunks(1000).map(<[u8]>::to_vec).collect();
    assert_eq!(got, want, "every datagram, in order, at its length");
    assert!(
        calls < 10,
        "receive offload gave {calls} reads for 10 datagrams"
    );
    assert!(own.iter().all(|o| !o), "{own:?}");
    let (got, calls, _) = read(&mut single);
    assert_eq!((got, calls), (want.clone(), 10), "one datagram per read");
    let (got, calls, own) = read(&mut mmsg);
    assert_eq!(got, want, "recvmmsg");
    assert!(calls < 10, "recvmmsg gave {calls} reads for 10 datagrams");
    assert!(own.iter().all(|o| !o), "{own:?}");
    // sendmmsg: the same datagrams, one call.
    assert_eq!(mmsg.send_batch(&batch, 1000).unwrap(), 10);
    let (got, _, _) = read(&mut rx);
    assert_eq!(got, want, "sent by sendmmsg");
    let (got, _, own) = read(&mut mmsg);
    assert_eq!(got, want);
    assert!(own.iter().all(|o| *o), "sendmmsg's own copy: {own:?}");
    let (got, _, own) = read(&mut tx);
    assert_eq!(got, want);
    assert!(own.iter().all(|o| *o), "the sender's own copy: {own:?}");
}
