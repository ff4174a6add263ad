//! Setting up a communicator's multicast group, agreed by all its ranks
//! (thesis §3.5, DESIGN §6).
//!
//! Rank 0 draws the group, the port and the communicator id and announces
//! them with the parameters the protocol depends on. Every rank then opens
//! and joins, and reports to rank 0, which tells everyone the verdict: if any
//! rank failed, all of them fall back for this communicator. A first round
//! tells rank 0 every rank's address families ([`group_range`]). Only
//! point-to-point messages of the communicator itself are used (four rounds
//! through rank 0), never a collective.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use crate::algorithms::transport::P2pResult;
use crate::component::config::Config;
use crate::driver::io::MessageIo;
use crate::group::groups::{self, GroupRanges, PortRange};
use crate::net::mcast_socket::OpenError;
use crate::protocol::datagram::{Auth, Key, KEY_LEN};

/// Layout version of the setup messages.
const VERSION: u8 = 2;
pub const ANNOUNCE_LEN: usize = 1 + 1 + 16 + 2 + 8 + 8 + 1 + 8 + KEY_LEN;
pub const VERDICT_LEN: usize = 1 + 4;
/// Most bytes of the reason a rank reports with its failure.
const REASON_MAX: usize = 400;
/// Draws of group and port, at most, when the drawn port is taken by
/// another program on some rank's host.
pub const DRAWS: usize = 16;
/// A rank's report and the verdict: joined / every rank joined.
const OK: u8 = 1;
/// A rank's report and the verdict: failed for good.
const FAILED: u8 = 0;
/// A rank's report: the port is taken here; the verdict: draw again.
const TAKEN: u8 = 2;

/// What rank 0 tells every rank before they open their sockets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Announce {
    pub group: SocketAddr,
    pub comm_id: u64,
    pub fragment_size: u64,
    /// The datagrams' protection, with the communicator's secret key.
    pub auth: Auth,
    /// The other parameters every rank must share (see [`fingerprint`]).
    pub fingerprint: u64,
}

impl Announce {
    /// Rank 0's draw (thesis §3.3–§3.4) from `group_range` (see
    /// [`group_range`]): collected entropy, stretched by Blum-Blum-Shub into
    /// the seed of the generator that draws. The secret key comes from the
    /// operating system's CSPRNG instead: that generator is statistical, not
    /// cryptographic.
    pub fn draw(cfg: &Config, group_range: &str) -> Result<Self, String> {
        let ranges = GroupRanges::parse(group_range)?;
        let ports = PortRange::parse(&cfg.port_range)?;
        let mut rng = groups::generator(crate::group::entropy::collect());
        let mut key = [0u8; KEY_LEN];
        if cfg.authenticate != 0 {
            crate::ffi::os::os_random(&mut key)
                .map_err(|e| format!("cannot draw a secret key (getrandom): {e}"))?;
        }
        Ok(Announce {
            group: groups::draw(&mut rng, &ranges, &ports),
            comm_id: groups::draw_comm_id(&mut rng),
            fragment_size: cfg.fragment_size as u64,
            auth: auth_of(cfg, Key(key)),
            fingerprint: fingerprint(cfg),
        })
    }

    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(ANNOUNCE_LEN);
        out.push(VERSION);
        let addr = match self.group.ip() {
            IpAddr::V4(a) => {
                out.push(4);
                a.to_ipv6_mapped().octets()
            }
            IpAddr::V6(a) => {
                out.push(6);
                a.octets()
            }
        };
        out.extend_from_slice(&addr);
        out.extend_from_slice(&self.group.port().to_be_bytes());
        out.extend_from_slice(&self.comm_id.to_be_bytes());
        out.extend_from_slice(&self.fragment_size.to_be_bytes());
        let (mode, key) = match self.auth {
            Auth::Off { crc } => (u8::from(crc), Key([0; KEY_LEN])),
            Auth::Tag(k) => (2, k),
            Auth::Encrypt(k) => (3, k),
        };
        out.push(mode);
        out.extend_from_slice(&self.fingerprint.to_be_bytes());
        out.extend_from_slice(&key.0);
        debug_assert_eq!(out.len(), ANNOUNCE_LEN);
        out
    }

    fn decode(b: &[u8]) -> Option<Self> {
        if b.len() != ANNOUNCE_LEN || b[0] != VERSION {
            return None;
        }
        let u64_at = |i: usize| u64::from_be_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let octets: [u8; 16] = b[2..18].try_into().expect("16 bytes");
        let ip = match b[1] {
            4 => IpAddr::V4(Ipv6Addr::from(octets).to_ipv4_mapped()?),
            6 => IpAddr::V6(Ipv6Addr::from(octets)),
            _ => return None,
        };
        Some(Announce {
            group: SocketAddr::new(ip, u16::from_be_bytes([b[18], b[19]])),
            comm_id: u64_at(20),
            fragment_size: u64_at(28),
            auth: {
                let key = Key(b[45..45 + KEY_LEN].try_into().expect("KEY_LEN bytes"));
                match b[36] {
                    0 => Auth::crc(false),
                    1 => Auth::crc(true),
                    2 => Auth::Tag(key),
                    3 => Auth::Encrypt(key),
                    _ => return None,
                }
            },
            fingerprint: u64_at(37),
        })
    }

    /// Why this rank cannot take part with its own parameters, if it cannot.
    pub fn mismatch(&self, cfg: &Config) -> Option<String> {
        // The same protection with rank 0's key: only the mode is compared.
        let key = match self.auth {
            Auth::Tag(k) | Auth::Encrypt(k) => k,
            Auth::Off { .. } => Key([0; KEY_LEN]),
        };
        if self.fragment_size != cfg.fragment_size as u64 || self.auth != auth_of(cfg, key) {
            Some(format!(
                "coll_ipmc_fragment_size, coll_ipmc_authenticate or coll_ipmc_use_crc_checking \
                 differ from rank 0's ({}, {} and {} here; rank 0: {}, {:?})",
                cfg.fragment_size,
                cfg.authenticate,
                cfg.use_crc_checking,
                self.fragment_size,
                self.auth
            ))
        } else if self.fingerprint != fingerprint(cfg) {
            Some(
                "the parameters that choose the algorithm (crossover_nodes, crossover_size, \
                 bcast_algorithm, chain_segment_size) differ from rank 0's"
                    .into(),
            )
        } else {
            None
        }
    }
}

/// The groups rank 0 draws from: `coll_ipmc_group_range`, except that the
/// IPv4 default gives way to [`groups::IPV6_DEFAULT_GROUPS`] when some rank's
/// interface has no IPv4 address and every rank's has IPv6
/// (`has_ipv4_and_ipv6` tells, for all ranks together; only asked then).
/// Rank 0 decides, and the group it announces carries the family, so every
/// rank uses the same.
pub fn group_range(cfg: &Config, has_ipv4_and_ipv6: impl FnOnce() -> (bool, bool)) -> String {
    if cfg.group_range == groups::DEFAULT_GROUPS && has_ipv4_and_ipv6() == (false, true) {
        groups::IPV6_DEFAULT_GROUPS.to_string()
    } else {
        cfg.group_range.clone()
    }
}

/// The protection `cfg` asks for, with `key`.
pub fn auth_of(cfg: &Config, key: Key) -> Auth {
    match cfg.authenticate {
        0 => Auth::crc(cfg.use_crc_checking),
        1 => Auth::Tag(key),
        _ => Auth::Encrypt(key),
    }
}

/// A digest of the parameters that decide each call's algorithm, which
/// must be equal on every rank or ranks would choose differently.
fn fingerprint(cfg: &Config) -> u64 {
    [
        cfg.crossover_nodes as u64,
        cfg.crossover_size as u64,
        cfg.bcast_algorithm as u64,
        cfg.chain_segment_size as u64,
    ]
    .iter()
    .fold(0xcbf2_9ce4_8422_2325, |h, v| {
        (h ^ v).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Whether every rank joined the group: the agreement's verdict, the same
/// on every rank.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Joined {
    /// Every rank joined.
    All,
    /// At least one rank failed; `first` is the lowest such rank.
    Failed { first: usize },
}

/// What the agreement gives one rank.
pub struct Agreed<S> {
    /// Rank 0's announcement, if it could draw one.
    pub announce: Option<Announce>,
    /// This rank's socket, or why it could not open one.
    pub local: Result<S, String>,
    /// The verdict, the same on every rank.
    pub joined: Joined,
    /// On rank 0: every rank that failed, with its reason (empty elsewhere).
    pub failures: Vec<(usize, String)>,
}

/// Runs the agreement on this rank. Every rank first tells rank 0 which
/// address families its interface has (`families`: IPv4, IPv6), for
/// [`group_range`]. `open` opens and joins this rank's socket for the
/// announced group; its error says why it could not. When the only failures
/// are ports taken by other programs, rank 0 draws again, up to [`DRAWS`]
/// times, and every rank follows its verdict. On `Failed` the caller drops
/// the socket.
pub fn agree<S, M: MessageIo>(
    msgs: &mut M,
    rank: usize,
    size: usize,
    cfg: &Config,
    families: impl FnOnce() -> (bool, bool),
    mut open: impl FnMut(&Announce) -> Result<S, OpenError>,
) -> P2pResult<Agreed<S>> {
    // Round 0: which address families every rank has, so that under the
    // default range a cluster without IPv4 anywhere, or on some hosts, gets
    // IPv6 groups. Always run, so that ranks that disagree on the range
    // still exchange the same messages.
    let (v4, v6) = families();
    let byte = u8::from(v4) | (u8::from(v6) << 1);
    let all = if rank == 0 {
        let recvs = (1..size)
            .map(|r| msgs.recv(r, 1))
            .collect::<P2pResult<Vec<_>>>()?;
        let mut bits = byte;
        for id in recvs {
            bits &= msgs.wait(id)?.first().copied().unwrap_or(0);
        }
        (bits & 1 != 0, bits & 2 != 0)
    } else {
        let id = msgs.send(0, vec![byte])?;
        msgs.wait(id)?;
        (v4, v6)
    };
    let mut draw = 1;
    loop {
        let (announce, local, code, failures) =
            agree_once(msgs, rank, size, cfg, all, &mut open, draw)?;
        if code == TAKEN {
            log::info!(
                "rank {rank}: drawn port taken on some rank; drawing again ({draw} of {DRAWS})"
            );
            draw += 1;
            continue;
        }
        let joined = match code {
            OK => Joined::All,
            _ => Joined::Failed {
                first: failures.first().map_or(0, |&(r, _)| r),
            },
        };
        return Ok(Agreed {
            announce: announce.ok(),
            local: local.map_err(|e| e.why),
            joined,
            failures,
        });
    }
}

/// Everything one draw of the agreement yields on one rank.
type Round<S> = (
    Result<Announce, String>,
    Result<S, OpenError>,
    u8,
    Vec<(usize, String)>,
);

/// One draw: announcement, opening, reports, verdict ([`OK`], [`FAILED`] or
/// [`TAKEN`]: draw again). Failures are known on rank 0 only. `all` is which
/// address families every rank has.
fn agree_once<S, M: MessageIo>(
    msgs: &mut M,
    rank: usize,
    size: usize,
    cfg: &Config,
    all: (bool, bool),
    open: &mut impl FnMut(&Announce) -> Result<S, OpenError>,
    draw: usize,
) -> P2pResult<Round<S>> {
    // Round 1: rank 0 announces (or announces that it could not draw).
    let announce = if rank == 0 {
        let range = group_range(cfg, || all);
        if range != cfg.group_range {
            log::info!("not every rank's interface has IPv4: groups from {range}");
        }
        let a = Announce::draw(cfg, &range);
        let bytes = a.as_ref().map(Announce::encode).unwrap_or_default();
        let sends = (1..size)
            .map(|r| msgs.send(r, bytes.clone()))
            .collect::<P2pResult<Vec<_>>>()?;
        for id in sends {
            msgs.wait(id)?;
        }
        a
    } else {
        let id = msgs.recv(0, ANNOUNCE_LEN)?;
        let bytes = msgs.wait(id)?;
        Announce::decode(&bytes).ok_or_else(|| "rank 0 could not draw a group".to_string())
    };

    // Each rank opens its socket, or knows why it cannot.
    let local = match &announce {
        Ok(a) => match a.mismatch(cfg) {
            Some(why) => Err(OpenError::from(why)),
            None => open(a),
        },
        Err(why) => Err(OpenError::from(why.clone())),
    };

    // Round 2: every rank reports to rank 0, with its reason if it failed;
    // round 3: rank 0 tells the verdict and the lowest failing rank.
    let mut failures = Vec::new();
    let code = if rank == 0 {
        let mut taken_only = true;
        if let Err(e) = &local {
            failures.push((0, e.why.clone()));
            taken_only &= e.taken;
        }
        let recvs = (1..size)
            .map(|r| msgs.recv(r, 1 + REASON_MAX))
            .collect::<P2pResult<Vec<_>>>()?;
        for (r, id) in (1..size).zip(recvs) {
            let report = msgs.wait(id)?;
            if report.first() != Some(&OK) {
                taken_only &= report.first() == Some(&TAKEN);
                let why = String::from_utf8_lossy(report.get(1..).unwrap_or_default());
                failures.push((r, why.into_owned()));
            }
        }
        let code = match failures.first() {
            None => OK,
            Some(_) if taken_only && draw < DRAWS => TAKEN,
            Some(_) => FAILED,
        };
        let first = failures.first().map_or(0, |&(r, _)| r as u32);
        let mut bytes = vec![code];
        bytes.extend_from_slice(&first.to_be_bytes());
        let sends = (1..size)
            .map(|r| msgs.send(r, bytes.clone()))
            .collect::<P2pResult<Vec<_>>>()?;
        for id in sends {
            msgs.wait(id)?;
        }
        code
    } else {
        let id = msgs.send(0, report(&local))?;
        msgs.wait(id)?;
        let id = msgs.recv(0, VERDICT_LEN)?;
        let b = msgs.wait(id)?;
        match b.as_slice() {
            [OK, ..] => OK,
            [TAKEN, r @ ..] if r.len() == 4 => TAKEN,
            [FAILED, r @ ..] if r.len() == 4 => {
                let first = u32::from_be_bytes(r.try_into().expect("4 bytes")) as usize;
                failures.push((first, String::new()));
                FAILED
            }
            _ => {
                failures.push((0, String::new()));
                FAILED
            }
        }
    };
    Ok((announce, local, code, failures))
}

/// A rank's report to rank 0: [`OK`], or [`FAILED`] or [`TAKEN`] and why
/// (at most [`REASON_MAX`] bytes, cut at a character boundary).
fn report<S>(local: &Result<S, OpenError>) -> Vec<u8> {
    match local {
        Ok(_) => vec![OK],
        Err(e) => {
            let why = &e.why;
            let mut end = why.len().min(REASON_MAX);
            while !why.is_char_boundary(end) {
                end -= 1;
            }
            let mut out = vec![if e.taken { TAKEN } else { FAILED }];
            out.extend_from_slice(&why.as_bytes()[..end]);
            out
        }
    }
}

/// The message rank 0 prints when ranks could not set up multicast: the
/// failures grouped by reason, each with its ranks and their hosts.
pub fn failure_message(
    comm: &str,
    failures: &[(usize, String)],
    host: impl Fn(usize) -> String,
) -> String {
    const SHOWN: usize = 8;
    let mut text = format!(
        "The ipmc coll component could not set up IP multicast for communicator {comm};\n\
         Open MPI's own broadcast serves its calls that would multicast (the job goes on):\n"
    );
    let mut reasons: Vec<(&str, Vec<usize>)> = Vec::new();
    for (rank, why) in failures {
        match reasons.iter_mut().find(|(w, _)| *w == why.as_str()) {
            Some((_, ranks)) => ranks.push(*rank),
            None => reasons.push((why.as_str(), vec![*rank])),
        }
    }
    for (why, ranks) in &reasons {
        let list = |items: Vec<String>| {
            let more = items.len().saturating_sub(SHOWN);
            let mut s = items.into_iter().take(SHOWN).collect::<Vec<_>>().join(", ");
            if more > 0 {
                s.push_str(&format!(" and {more} more"));
            }
            s
        };
        let mut hosts: Vec<String> = Vec::new();
        for &r in ranks {
            let h = host(r);
            if !hosts.contains(&h) {
                hosts.push(h);
            }
        }
        let (rk, hk) = (
            if ranks.len() == 1 { "rank" } else { "ranks" },
            if hosts.len() == 1 { "host" } else { "hosts" },
        );
        text.push_str(&format!(
            "\n  {rk} {} on {hk} {}:\n    {why}\n",
            list(ranks.iter().map(|r| r.to_string()).collect()),
            list(hosts)
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::test_net::run_messages;

    /// Runs the agreement on `size` ranks; `open(rank, draw)` is each rank's
    /// result of opening its socket (its socket stands for the announcement
    /// it opened), `families(rank)` its interface's address families.
    fn agree_on(
        size: usize,
        open: fn(usize, usize) -> Result<(), OpenError>,
        families: fn(usize) -> (bool, bool),
    ) -> Vec<(Agreed<Announce>, Vec<Announce>)> {
        run_messages(size, move |rank, msgs| {
            let cfg = Config::default();
            let mut opened = Vec::new();
            let agreed = agree(
                msgs,
                rank,
                size,
                &cfg,
                || families(rank),
                |a| {
                    opened.push(*a);
                    open(rank, opened.len()).map(|()| *a)
                },
            )
            .unwrap();
            (agreed, opened)
        })
    }

    #[test]
    fn every_rank_agrees_on_one_group() {
        let ranks = agree_on(5, |_, _| Ok(()), |_| (true, true));
        let a = ranks[0].0.announce.expect("rank 0 drew");
        assert!(a.group.is_ipv4());
        for (agreed, opened) in &ranks {
            assert_eq!(agreed.joined, Joined::All);
            assert_eq!(agreed.announce, Some(a));
            assert_eq!(agreed.local.as_ref().ok(), Some(&a));
            assert_eq!(opened, &[a]);
            assert!(agreed.failures.is_empty());
        }
    }

    #[test]
    fn one_rank_that_cannot_join_makes_every_rank_fall_back() {
        let ranks = agree_on(
            5,
            |rank, _| match rank {
                3 => Err("no interface".to_string().into()),
                _ => Ok(()),
            },
            |_| (true, true),
        );
        for (agreed, opened) in &ranks {
            assert_eq!(agreed.joined, Joined::Failed { first: 3 });
            assert_eq!(opened.len(), 1, "no second draw for a failure");
        }
        assert_eq!(ranks[0].0.failures, vec![(3, "no interface".to_string())]);
        assert_eq!(ranks[3].0.local.as_ref().err().unwrap(), "no interface");
    }

    #[test]
    fn a_port_taken_on_one_host_is_drawn_again_by_all() {
        let ranks = agree_on(
            4,
            |rank, draw| match (rank, draw) {
                (2, 1) => Err(OpenError {
                    why: "port taken".into(),
                    taken: true,
                }),
                _ => Ok(()),
            },
            |_| (true, true),
        );
        let second = ranks[0].1[1];
        for (agreed, opened) in &ranks {
            assert_eq!(agreed.joined, Joined::All);
            assert_eq!(opened.len(), 2, "every rank follows the redraw");
            assert_ne!(opened[0], opened[1]);
            assert_eq!(agreed.announce, Some(second));
        }
        // Taken on every draw: the agreement gives up after DRAWS.
        let ranks = agree_on(
            3,
            |rank, _| match rank {
                1 => Err(OpenError {
                    why: "port taken".into(),
                    taken: true,
                }),
                _ => Ok(()),
            },
            |_| (true, true),
        );
        for (agreed, opened) in &ranks {
            assert_eq!(agreed.joined, Joined::Failed { first: 1 });
            assert_eq!(opened.len(), DRAWS);
        }
    }

    #[test]
    fn a_rank_without_ipv4_turns_the_default_range_to_ipv6() {
        let ranks = agree_on(
            4,
            |_, _| Ok(()),
            |rank| {
                if rank == 2 {
                    (false, true)
                } else {
                    (true, true)
                }
            },
        );
        for (agreed, _) in &ranks {
            assert_eq!(agreed.joined, Joined::All);
            let group = agreed.announce.unwrap().group;
            assert!(group.is_ipv6(), "{group}");
        }
    }

    #[test]
    fn announcements_round_trip() {
        for group in ["239.192.3.4:5000", "[ff18::1:2]:32767"] {
            let a = Announce {
                group: group.parse().unwrap(),
                comm_id: 0xdead_beef_0123_4567,
                fragment_size: 4096,
                auth: Auth::Tag(Key([7; KEY_LEN])),
                fingerprint: 99,
            };
            assert_eq!(Announce::decode(&a.encode()), Some(a));
            for auth in [
                Auth::crc(true),
                Auth::crc(false),
                Auth::Encrypt(Key([8; KEY_LEN])),
            ] {
                let b = Announce { auth, ..a };
                assert_eq!(Announce::decode(&b.encode()), Some(b));
            }
        }
        assert_eq!(Announce::decode(&[]), None);
        assert_eq!(Announce::decode(&[2; ANNOUNCE_LEN]), None);
    }

    #[test]
    fn failures_are_grouped_by_reason_with_ranks_and_hosts() {
        let failures: Vec<(usize, String)> = (0..12)
            .map(|r| {
                (
                    r,
                    if r == 5 {
                        "other".into()
                    } else {
                        "no interface".into()
                    },
                )
            })
            .collect();
        let text = failure_message("MPI_COMM_WORLD", &failures, |r| format!("node{}", r / 2));
        assert_eq!(text.matches("no interface").count(), 1, "{text}");
        assert!(text.contains("ranks 0, 1, 2, 3, 4, 6, 7, 8 and 3 more on hosts node0, node1, node2, node3, node4, node5"), "{text}");
        assert!(text.contains("rank 5 on host node2:\n    other"), "{text}");
        assert!(text.contains("for communicator MPI_COMM_WORLD"), "{text}");
        let long = "é".repeat(REASON_MAX);
        let r = report::<()>(&Err(long.into()));
        assert!(r.len() <= 1 + REASON_MAX && std::str::from_utf8(&r[1..]).is_ok());
        assert_eq!(r[0], FAILED);
        assert_eq!(report(&Ok(())), vec![OK]);
        let taken = OpenError {
            why: "binding".into(),
            taken: true,
        };
        assert_eq!(report::<()>(&Err(taken)), b"\x02binding".to_vec());
    }

    #[test]
    fn rank_zeros_draw_is_in_range_and_checked_against_local_parameters() {
        let cfg = Config::default();
        let a = Announce::draw(&cfg, &cfg.group_range).unwrap();
        match a.group.ip() {
            IpAddr::V4(ip) => assert_eq!(ip.octets()[0..2], [239, 192 | (ip.octets()[1] & 3)]),
            other => panic!("IPv6 group {other} from the IPv4 default"),
        }
        assert!((5000..=32767).contains(&a.group.port()));
        assert_eq!(a.mismatch(&cfg), None);
        let other = Config {
            fragment_size: 1024,
            ..Config::default()
        };
        assert!(a.mismatch(&other).unwrap().contains("fragment_size"));
        let other = Config {
            crossover_nodes: 9,
            ..Config::default()
        };
        assert!(a.mismatch(&other).unwrap().contains("crossover_nodes"));
        for authenticate in [0, 2] {
            let other = Config {
                authenticate,
                ..Config::default()
            };
            assert!(a.mismatch(&other).unwrap().contains("authenticate"));
        }
        let Auth::Tag(key) = a.auth else {
            panic!("authentication is on by default: {:?}", a.auth)
        };
        let b = Announce::draw(&cfg, &cfg.group_range).unwrap();
        assert_ne!(b, a, "two draws should differ");
        assert_ne!(b.auth, Auth::Tag(key), "two keys should differ");
        assert_ne!(key, Key([0; KEY_LEN]));
    }

    #[test]
    fn the_ipv4_default_gives_way_to_ipv6_only_without_ipv4() {
        let cfg = Config::default();
        assert_eq!(group_range(&cfg, || (true, true)), groups::DEFAULT_GROUPS);
        assert_eq!(group_range(&cfg, || (false, false)), groups::DEFAULT_GROUPS);
        assert_eq!(group_range(&cfg, || (false, true)), "ff12::/96");
        let a = Announce::draw(&cfg, &group_range(&cfg, || (false, true))).unwrap();
        assert_eq!(
            u128::from(match a.group.ip() {
                IpAddr::V6(g) => g,
                v4 => panic!("{v4} drawn for an IPv6-only interface"),
            }) >> 32,
            0xff12 << 80
        );
        // A range the user chose is kept, whatever the interface has.
        let mine = Config {
            group_range: "239.1.0.0/16".into(),
            ..Config::default()
        };
        assert_eq!(
            group_range(&mine, || panic!("not asked for a chosen range")),
            "239.1.0.0/16"
        );
    }
}
