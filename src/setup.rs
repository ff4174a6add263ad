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

use crate::config::Config;
use crate::ffi::Messages;
use crate::groups::{self, GroupRanges, PortRange};
use crate::transport::P2pResult;

/// Layout version of the setup messages.
const VERSION: u8 = 1;
const ANNOUNCE_LEN: usize = 1 + 1 + 16 + 2 + 8 + 8 + 1 + 8;
const VERDICT_LEN: usize = 1 + 4;

/// What rank 0 tells every rank before they open their sockets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Announce {
    pub group: SocketAddr,
    pub comm_id: u64,
    pub fragment_size: u64,
    pub with_crc: bool,
    /// The other parameters every rank must share (see [`fingerprint`]).
    pub fingerprint: u64,
}

impl Announce {
    /// Rank 0's draw (thesis §3.3–§3.4) from `group_range` (see
    /// [`group_range`]): collected entropy, stretched by Blum-Blum-Shub
    /// into the seed of the generator that draws.
    pub fn draw(cfg: &Config, group_range: &str) -> Result<Self, String> {
        let ranges = GroupRanges::parse(group_range)?;
        let ports = PortRange::parse(&cfg.port_range)?;
        let mut rng = groups::generator(crate::entropy::collect());
        Ok(Announce {
            group: groups::draw(&mut rng, &ranges, &ports),
            comm_id: groups::draw_comm_id(&mut rng),
            fragment_size: cfg.fragment_size as u64,
            with_crc: cfg.use_crc_checking,
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
        out.push(u8::from(self.with_crc));
        out.extend_from_slice(&self.fingerprint.to_be_bytes());
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
            with_crc: b[36] != 0,
            fingerprint: u64_at(37),
        })
    }

    /// Why this rank cannot take part with its own parameters, if it cannot.
    pub fn mismatch(&self, cfg: &Config) -> Option<String> {
        if self.fragment_size != cfg.fragment_size as u64 || self.with_crc != cfg.use_crc_checking {
            Some(format!(
                "coll_ipmc_fragment_size or coll_ipmc_use_crc_checking differ from rank 0's \
                 ({} and {} here, {} and {} on rank 0)",
                cfg.fragment_size, cfg.use_crc_checking, self.fragment_size, self.with_crc
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

/// The verdict of the agreement, the same on every rank.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Every rank joined.
    Ready,
    /// At least one rank failed; `first` is the lowest such rank.
    Failed { first: usize },
}

/// Runs the agreement on this rank. Every rank first tells rank 0 which
/// address families its interface has (`families`: IPv4, IPv6), for
/// [`group_range`]. `open` opens and joins this rank's
/// socket for the announced group; its error says why it could not. Returns
/// the announcement, this rank's socket (if it opened one) and the verdict;
/// on `Failed` the caller drops the socket.
pub fn agree<S>(
    msgs: &mut Messages,
    rank: usize,
    size: usize,
    cfg: &Config,
    families: impl FnOnce() -> (bool, bool),
    open: impl FnOnce(&Announce) -> Result<S, String>,
) -> P2pResult<(Option<Announce>, Result<S, String>, Verdict)> {
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
            Some(why) => Err(why),
            None => open(a),
        },
        Err(why) => Err(why.clone()),
    };

    // Round 2: every rank reports to rank 0; round 3: rank 0 tells the verdict.
    let verdict = if rank == 0 {
        let mut first = local.is_err().then_some(0);
        let recvs = (1..size)
            .map(|r| msgs.recv(r, 1))
            .collect::<P2pResult<Vec<_>>>()?;
        for (r, id) in (1..size).zip(recvs) {
            if msgs.wait(id)? != [1] && first.is_none() {
                first = Some(r);
            }
        }
        let mut bytes = vec![u8::from(first.is_none())];
        bytes.extend_from_slice(&(first.unwrap_or(0) as u32).to_be_bytes());
        let sends = (1..size)
            .map(|r| msgs.send(r, bytes.clone()))
            .collect::<P2pResult<Vec<_>>>()?;
        for id in sends {
            msgs.wait(id)?;
        }
        match first {
            None => Verdict::Ready,
            Some(first) => Verdict::Failed { first },
        }
    } else {
        let id = msgs.send(0, vec![u8::from(local.is_ok())])?;
        msgs.wait(id)?;
        let id = msgs.recv(0, VERDICT_LEN)?;
        let b = msgs.wait(id)?;
        match b.as_slice() {
            [1, ..] => Verdict::Ready,
            [0, r @ ..] if r.len() == 4 => Verdict::Failed {
                first: u32::from_be_bytes(r.try_into().expect("4 bytes")) as usize,
            },
            _ => Verdict::Failed { first: 0 },
        }
    };
    Ok((announce.ok(), local, verdict))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announcements_round_trip() {
        for group in ["239.192.3.4:5000", "[ff18::1:2]:32767"] {
            let a = Announce {
                group: group.parse().unwrap(),
                comm_id: 0xdead_beef_0123_4567,
                fragment_size: 4096,
                with_crc: true,
                fingerprint: 99,
            };
            assert_eq!(Announce::decode(&a.encode()), Some(a));
        }
        assert_eq!(Announce::decode(&[]), None);
        assert_eq!(Announce::decode(&[2; ANNOUNCE_LEN]), None);
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
        assert_ne!(
            Announce::draw(&cfg, &cfg.group_range).unwrap(),
            a,
            "two draws should differ"
        );
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
