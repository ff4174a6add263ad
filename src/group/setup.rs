//! Setting up a communicator's multicast group, agreed by all its ranks
//! (thesis §3.5, DESIGN §6).
//!
//! Rank 0 draws the group, the port and the communicator id and announces
//! them with the parameters the protocol depends on. Every rank then opens
//! and joins, and reports to rank 0, which tells everyone the verdict: if any
//! rank failed, all of them fall back for this communicator. A first round
//! tells rank 0 every rank's address families ([`group_range`]) and the
//! smallest MTU of their interfaces, which bounds the fragment size it
//! announces ([`fitting_fragment`]): no datagram is cut by IP; and the
//! smallest receive buffer, which sizes flow control's window
//! ([`flow_window`]); and what each rank keeps of the measured choice of
//! earlier communicators of the same processes, of which rank 0 announces
//! what every rank states alike ([`Stated`]); and the group each kept from
//! such a communicator ([`Kept`]): where every rank offers the same, rank 0
//! announces that they take it over, and the agreement ends there. Only
//! point-to-point messages of the communicator itself are used (four rounds
//! along a binomial tree rooted at rank 0, two for a kept group,
//! [`Agreement`]), never a collective.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use crate::base::error::Result;
use crate::base::io::{complete_in_order, MessageIo, Wait};
use crate::base::params::Config;
use crate::group::groups::{self, GroupRanges, PortRange};
use crate::group::stated::{Stated, STATED_LEN};
use crate::net::mcast_socket::OpenError;
use crate::protocol::datagram::{self, Auth, Key, KEY_LEN};

/// Layout version of the setup messages (part of [`Config::digest`], so
/// that builds whose messages differ never try to agree).
pub(crate) const VERSION: u8 = 8;
/// Bytes of round 0's message: the address families, the smallest MTU and
/// receive buffer, the kept group the rank's subtree offers alike, and what
/// it states alike.
const FAMILIES_LEN: usize = 1 + 4 + 4 + 8 + STATED_LEN;
const ANNOUNCE_LEN: usize = 1 + 1 + 16 + 2 + 8 + 8 + 1 + 8 + KEY_LEN + 4 + 8 + STATED_LEN;
const VERDICT_LEN: usize = 1 + 4;
/// Most bytes of the reason a rank reports with its failure.
const REASON_MAX: usize = 400;
/// Most reasons a report carries; failures for others are only counted.
const REASONS: usize = 8;
/// Most ranks a report names per reason (the lowest); the others are counted.
const SHOWN: usize = 8;
/// Most bytes of a report ([`Failures::encode`]).
const REPORT_MAX: usize = 4 + 4 + 1 + 1 + REASONS * (4 + 1 + 4 * SHOWN + 2 + REASON_MAX);
/// Draws of group and port, at most, when the drawn port is taken by
/// another program on some rank's host.
pub const DRAWS: usize = 16;
/// The verdict: every rank joined.
const OK: u8 = 1;
/// The verdict: some rank failed for good.
const FAILED: u8 = 0;
/// The verdict: only ports taken by other programs failed; draw again.
const TAKEN: u8 = 2;

/// What rank 0 tells every rank before they open their sockets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Announce {
    pub group: SocketAddr,
    pub comm_id: u64,
    pub fragment_size: u64,
    /// The datagrams' protection, with the communicator's secret key.
    pub auth: Auth,
    /// Rank 0's [`Config::digest`] of the parameters every rank must share.
    pub digest: u64,
    /// Flow control's window, in datagrams (0: none; [`flow_window`]).
    pub window: u32,
    /// What every rank stated alike, which every rank takes on.
    pub inherited: Stated,
    /// The identity of the kept group every rank offered, which they take
    /// over ([`Kept`]); 0 for a group drawn for this communicator.
    pub kept: u64,
}

/// A group a rank kept from an earlier communicator of the same processes
/// ([`crate::component::parked`]) and offers this one: the ranks take it
/// over, its socket and its broadcasts' numbering, where every rank offers
/// the same, and then open nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kept {
    /// Never 0; the same on every rank only for the same group at the same
    /// broadcast.
    pub id: u64,
    /// What was announced for it.
    pub announce: Announce,
}

/// What a rank tells rank 0 about itself before the draw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Facts {
    /// Whether its interface has an IPv4 and an IPv6 address.
    pub families: (bool, bool),
    /// Its interface's MTU (`u32::MAX`: no bound).
    pub mtu: u32,
    /// The receive buffer its multicast socket will get, bytes (`u32::MAX`:
    /// unknown).
    pub rcvbuf: u32,
    /// What it keeps of the measured choice of earlier communicators of
    /// the same processes.
    pub stated: Stated,
    /// The group it kept for this communicator's processes, if any.
    pub kept: Option<Kept>,
}

impl Facts {
    /// A rank that has no say: every family, no bound.
    pub const UNKNOWN: Facts = Facts {
        families: (true, true),
        mtu: u32::MAX,
        rcvbuf: u32::MAX,
        stated: Stated::NONE,
        kept: None,
    };
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
            crate::platform::os::os_random(&mut key)
                .map_err(|e| format!("cannot draw a secret key (getrandom): {e}"))?;
        }
        Ok(Announce {
            group: groups::draw(&mut rng, &ranges, &ports),
            comm_id: groups::draw_comm_id(&mut rng),
            fragment_size: cfg.fragment_size as u64,
            auth: auth_of(cfg, Key(key)),
            digest: cfg.digest(),
            window: 0,
            inherited: Stated::NONE,
            kept: 0,
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
            Auth::Polyval(k) => (5, k),
        };
        out.push(mode);
        out.extend_from_slice(&self.digest.to_be_bytes());
        out.extend_from_slice(&key.0);
        out.extend_from_slice(&self.window.to_be_bytes());
        out.extend_from_slice(&self.kept.to_be_bytes());
        out.extend_from_slice(&self.inherited.to_bytes());
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
                    5 => Auth::Polyval(key),
                    _ => return None,
                }
            },
            digest: u64_at(37),
            window: u32::from_be_bytes(b[45 + KEY_LEN..49 + KEY_LEN].try_into().expect("4 bytes")),
            kept: u64_at(49 + KEY_LEN),
            inherited: Stated::from_bytes(&b[57 + KEY_LEN..]),
        })
    }

    /// Why this rank cannot take part with its own parameters, if it cannot.
    /// `comm_query` compared the digests every rank published at `MPI_Init`;
    /// this catches a shared parameter changed since (through MPI_T).
    pub fn mismatch(&self, cfg: &Config) -> Option<String> {
        if self.digest != cfg.digest() {
            Some(
                "ipmc's parameters that every rank must share (scope ALL_EQ in ompi_info) \
                 differ from rank 0's: changed since MPI_Init on some ranks?"
                    .into(),
            )
        } else if !(1..=cfg.fragment_size as u64).contains(&self.fragment_size) {
            // Rank 0 may announce less than the parameter (what fits every MTU).
            Some(format!(
                "rank 0 announced fragments of {} bytes, beyond coll_ipmc_fragment_size {}",
                self.fragment_size, cfg.fragment_size
            ))
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

/// Flow control's window in datagrams of `datagram_len` bytes, for
/// `coll_ipmc_flow_window` bytes (`param`; 0: a quarter of `rcvbuf`, the
/// smallest receive buffer any rank gets, which the kernel charges with
/// each datagram's buffer overhead too). Never below [`MIN_WINDOW`]
/// datagrams; 0 (no flow control) when the receive buffers are unknown.
pub fn flow_window(param: usize, rcvbuf: u32, datagram_len: usize) -> u32 {
    let bytes = match param {
        0 if rcvbuf == u32::MAX => return 0,
        0 => rcvbuf as usize / 4,
        b => b,
    };
    u32::try_from(bytes / datagram_len.max(1))
        .unwrap_or(u32::MAX)
        .max(MIN_WINDOW)
}

/// The smallest window: the root would otherwise wait for reports more
/// than it sends.
pub const MIN_WINDOW: u32 = 16;

/// The largest fragment of at most `bound` bytes whose datagram fits an MTU
/// of `mtu` bytes in one IP packet (of the group's family): IP then never
/// fragments a datagram, and UDP segmentation offload can send them. Not
/// below [`MIN_FRAGMENT`], which every MTU of IPv4 (576) and IPv6 (1280)
/// holds.
pub fn fitting_fragment(bound: usize, mtu: u32, ipv6: bool, auth: Auth) -> usize {
    let ip = if ipv6 { 40 } else { 20 };
    let overhead = ip + 8 + datagram::Protection::new(auth).overhead();
    let room = (mtu as usize).saturating_sub(overhead);
    bound.min(room.max(MIN_FRAGMENT))
}

/// The smallest fragment [`fitting_fragment`] gives.
pub const MIN_FRAGMENT: usize = 256;

/// The protection `cfg` asks for, with `key`.
pub fn auth_of(cfg: &Config, key: Key) -> Auth {
    match cfg.authenticate {
        0 => Auth::crc(cfg.use_crc_checking),
        1 => Auth::Tag(key),
        _ => Auth::Encrypt(key),
    }
}

/// Whether every rank joined the group: the agreement's verdict, the same
/// on every rank.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Joined {
    /// Every rank joined.
    All,
    /// Every rank takes over the kept group it offered
    /// ([`Announce::kept`]).
    Kept,
    /// At least one rank failed; `first` is the lowest such rank.
    Failed { first: usize },
}

/// The failures of the ranks of a subtree, as its report travels to rank 0:
/// grouped by reason, each with how many ranks gave it and the lowest of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failures {
    pub groups: Vec<Failure>,
    /// Failing ranks whose reason did not fit (more than [`REASONS`]).
    pub unlisted: u32,
    /// The lowest failing rank.
    pub first: Option<usize>,
    /// Every failure is a port that another program holds (a new draw may do).
    taken_only: bool,
}

/// One reason for failing, and the ranks that gave it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub why: String,
    /// The lowest ranks that gave it, at most [`SHOWN`].
    pub ranks: Vec<usize>,
    pub count: u32,
}

impl Default for Failures {
    fn default() -> Self {
        Failures {
            groups: Vec::new(),
            unlisted: 0,
            first: None,
            taken_only: true,
        }
    }
}

impl Failures {
    /// `rank`'s own failure, if it failed.
    fn of<S>(rank: usize, local: &Result<S, OpenError>) -> Self {
        let mut f = Failures::default();
        if let Err(e) = local {
            let mut end = e.why.len().min(REASON_MAX);
            while !e.why.is_char_boundary(end) {
                end -= 1;
            }
            f.groups.push(Failure {
                why: e.why[..end].to_string(),
                ranks: vec![rank],
                count: 1,
            });
            f.first = Some(rank);
            f.taken_only = e.taken;
        }
        f
    }

    pub fn is_empty(&self) -> bool {
        self.first.is_none()
    }

    /// Adds the failures of another subtree.
    fn merge(&mut self, other: Failures) {
        for g in other.groups {
            let room = self.groups.len() < REASONS;
            match self.groups.iter_mut().find(|h| h.why == g.why) {
                Some(h) => {
                    h.count += g.count;
                    h.ranks.extend(g.ranks);
                    h.ranks.sort_unstable();
                    h.ranks.truncate(SHOWN);
                }
                None if room => self.groups.push(g),
                None => self.unlisted += g.count,
            }
        }
        self.unlisted += other.unlisted;
        self.first = self.first.into_iter().chain(other.first).min();
        self.taken_only &= other.taken_only;
    }

    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let first = self.first.map_or(u32::MAX, |r| r as u32);
        out.extend_from_slice(&first.to_be_bytes());
        out.extend_from_slice(&self.unlisted.to_be_bytes());
        out.push(u8::from(self.taken_only));
        out.push(self.groups.len() as u8);
        for g in &self.groups {
            out.extend_from_slice(&g.count.to_be_bytes());
            out.push(g.ranks.len() as u8);
            for &r in &g.ranks {
                out.extend_from_slice(&(r as u32).to_be_bytes());
            }
            out.extend_from_slice(&(g.why.len() as u16).to_be_bytes());
            out.extend_from_slice(g.why.as_bytes());
        }
        debug_assert!(out.len() <= REPORT_MAX);
        out
    }

    /// A report as [`Failures::encode`] wrote it; one that does not parse
    /// counts as a failure of its sender, `from`.
    fn decode(b: &[u8], from: usize) -> Self {
        Self::parse(b).unwrap_or_else(|| {
            Self::of::<()>(
                from,
                &Err(format!("rank {from} sent a report that does not parse").into()),
            )
        })
    }

    fn parse(b: &[u8]) -> Option<Self> {
        let mut at = 0;
        let mut take = |n: usize| {
            let part = b.get(at..at + n)?;
            at += n;
            Some(part)
        };
        let u32_of = |p: &[u8]| u32::from_be_bytes(p.try_into().expect("4 bytes"));
        let first = u32_of(take(4)?);
        let unlisted = u32_of(take(4)?);
        let taken_only = take(1)?[0] != 0;
        let n = take(1)?[0] as usize;
        let mut groups = Vec::with_capacity(n);
        for _ in 0..n {
            let count = u32_of(take(4)?);
            let shown = take(1)?[0] as usize;
            let ranks = (0..shown)
                .map(|_| take(4).map(|p| u32_of(p) as usize))
                .collect::<Option<Vec<_>>>()?;
            let len = u16::from_be_bytes(take(2)?.try_into().expect("2 bytes")) as usize;
            let why = String::from_utf8_lossy(take(len)?).into_owned();
            groups.push(Failure { why, ranks, count });
        }
        Some(Failures {
            groups,
            unlisted,
            first: (first != u32::MAX).then_some(first as usize),
            taken_only,
        })
    }
}

/// What the agreement gives one rank.
pub struct Agreed<S> {
    /// Rank 0's announcement, if it could draw one.
    pub announce: Option<Announce>,
    /// This rank's socket, or why it could not open one; `None` where the
    /// ranks take over a kept group and opened none.
    pub local: Option<Result<S, String>>,
    /// The verdict, the same on every rank.
    pub joined: Joined,
    /// On rank 0: every rank's failure (empty elsewhere).
    pub failures: Failures,
}

/// A rank's place in the binomial tree the agreement's messages follow,
/// rooted at rank 0: its parent, and its children, the largest subtree first.
pub(crate) fn tree(rank: usize, size: usize) -> (Option<usize>, Vec<usize>) {
    let parent = (rank != 0).then(|| rank & (rank - 1));
    let lowest_bit = if rank == 0 {
        size.next_power_of_two()
    } else {
        rank & rank.wrapping_neg()
    };
    let mut children = Vec::new();
    let mut bit = 1;
    while bit < lowest_bit && rank + bit < size {
        children.push(rank + bit);
        bit <<= 1;
    }
    children.reverse();
    (parent, children)
}

/// Where one rank's agreement stands: the messages it waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Round {
    /// Round 0: the children's address families.
    Families,
    /// Round 1 on ranks other than 0: this rank's families sent up, and the
    /// announcement from the parent.
    Announce,
    /// Round 2: the announcement sent down, and the children's reports.
    Reports,
    /// Round 3: the report sent up and the verdict from the parent (rank 0:
    /// its verdict sent down).
    Verdict,
    /// Round 3 on ranks other than 0: the verdict sent down.
    Forward,
    /// Round 1 (rank 0) or 2: the announcement of a kept group sent down,
    /// which ends the agreement: no rank opens a socket, none can fail.
    Handed,
}

/// The agreement on one rank, in steps: [`Agreement::start`] posts its
/// first messages, [`Agreement::poll`] moves it on as far as its completed
/// messages allow and never waits itself, so that Open MPI's progress engine
/// can run it in the background and the simulator can run it on every rank
/// of a cluster; [`Agreement::finish`] runs it to its end.
///
/// The messages follow a binomial tree rooted at rank 0 ([`tree`]), so that
/// no rank handles more than about log2(size) of them per round. Every rank
/// first tells rank 0 which address families its interface has (IPv4,
/// IPv6), for [`group_range`], each parent combining its subtree's. Rank 0
/// then draws and announces, each parent passing the announcement on; each
/// rank opens and joins its socket for the announced group (`open` in
/// [`Agreement::poll`]; its error says why it could not) and reports, each
/// parent merging its subtree's reports into one ([`Failures`]); rank 0
/// tells the verdict down the tree. When the only failures are ports taken
/// by other programs, rank 0 draws again, up to [`DRAWS`] times, and every
/// rank follows its verdict. Where every rank offered the same kept group
/// in the first round, rank 0 announces it instead of drawing, and the
/// agreement ends once the announcement has gone down the tree. Only
/// point-to-point messages of the communicator are used, never a collective.
pub struct Agreement<S, M: MessageIo> {
    rank: usize,
    parent: Option<usize>,
    children: Vec<usize>,
    cfg: Config,
    round: Round,
    /// The messages the round waits for, in the order posted, and the
    /// buffers of those that completed (in order: each is tested only once
    /// those before it completed).
    waiting: Vec<M::Id>,
    got: Vec<Vec<u8>>,
    /// This rank's address families, then (on rank 0) every rank's.
    families: (bool, bool),
    /// This rank's interface MTU, then (on rank 0) the smallest of all.
    mtu: u32,
    /// This rank's receive buffer, then (on rank 0) the smallest of all.
    rcvbuf: u32,
    /// What this rank states, then what its subtree states alike.
    stated: Stated,
    /// The group this rank kept, if it offers one.
    kept: Option<Kept>,
    /// The identity of the kept group this rank's subtree offers alike (0:
    /// none, or not alike).
    kept_alike: u64,
    /// This rank's CPU computes AES-128 and POLYVAL in hardware, then (on
    /// rank 0) every rank's does: a tag is then theirs
    /// ([`datagram::polyval_is_fast`]).
    fast_polyval: bool,
    draw: usize,
    /// The verdict on this draw, as rank 0 sends it.
    verdict: Vec<u8>,
    announce: Option<Result<Announce, String>>,
    local: Option<Result<S, OpenError>>,
    failures: Failures,
}

impl<S, M: MessageIo> Agreement<S, M> {
    /// Starts the agreement on this rank, which tells rank 0 its `facts`.
    pub fn start(
        msgs: &mut M,
        rank: usize,
        size: usize,
        cfg: Config,
        facts: Facts,
    ) -> Result<Self> {
        let Facts {
            families,
            mtu,
            rcvbuf,
            stated,
            kept,
        } = facts;
        let (parent, children) = tree(rank, size);
        let mut a = Agreement {
            rank,
            parent,
            children,
            cfg,
            round: Round::Families,
            waiting: Vec::new(),
            got: Vec::new(),
            families,
            mtu,
            rcvbuf,
            stated,
            kept,
            kept_alike: kept.map_or(0, |k| k.id),
            fast_polyval: datagram::polyval_is_fast(),
            draw: 1,
            verdict: Vec::new(),
            announce: None,
            local: None,
            failures: Failures::default(),
        };
        // Round 0 always runs, so that ranks that disagree on the range
        // still exchange the same messages.
        a.waiting = a.recv_children(msgs, FAMILIES_LEN)?;
        Ok(a)
    }

    /// Moves the agreement on; `Some` once it is over on this rank. `wait`
    /// says how to ask whether a message completed; `open` opens and joins
    /// this rank's socket for an announcement.
    pub fn poll(
        &mut self,
        msgs: &mut M,
        wait: Wait,
        open: &mut impl FnMut(&Announce) -> Result<S, OpenError>,
    ) -> Result<Option<Agreed<S>>> {
        loop {
            if !complete_in_order(msgs, &self.waiting, &mut self.got, wait)? {
                return Ok(None);
            }
            self.waiting.clear();
            let got = std::mem::take(&mut self.got);
            if let Some(agreed) = self.next_round(msgs, got, open)? {
                return Ok(Some(agreed));
            }
        }
    }

    /// Runs the agreement to its end, waiting for its messages (driving
    /// their progress). On `Failed` the caller drops the socket.
    pub fn finish(
        &mut self,
        msgs: &mut M,
        open: &mut impl FnMut(&Announce) -> Result<S, OpenError>,
    ) -> Result<Agreed<S>> {
        loop {
            if let Some(agreed) = self.poll(msgs, Wait::Progress, open)? {
                return Ok(agreed);
            }
            std::thread::yield_now();
        }
    }

    fn recv_children(&self, msgs: &mut M, capacity: usize) -> Result<Vec<M::Id>> {
        self.children
            .iter()
            .map(|&c| msgs.recv(c, capacity))
            .collect()
    }

    fn send_children(&self, msgs: &mut M, bytes: &[u8]) -> Result<Vec<M::Id>> {
        self.children
            .iter()
            .map(|&c| msgs.send(c, bytes.to_vec()))
            .collect()
    }

    /// The round after the one whose messages are `got`: posts its messages,
    /// or ends the agreement.
    fn next_round(
        &mut self,
        msgs: &mut M,
        got: Vec<Vec<u8>>,
        open: &mut impl FnMut(&Announce) -> Result<S, OpenError>,
    ) -> Result<Option<Agreed<S>>> {
        match (self.parent, self.round) {
            (parent, Round::Families) => {
                // `got`: the children's families and smallest MTUs.
                let own = u8::from(self.families.0)
                    | (u8::from(self.families.1) << 1)
                    | (u8::from(self.fast_polyval) << 2);
                let bits = got
                    .iter()
                    .fold(own, |bits, b| bits & b.first().copied().unwrap_or(0));
                self.families = (bits & 1 != 0, bits & 2 != 0);
                self.fast_polyval = bits & 4 != 0;
                let word = |b: &[u8], at: usize| {
                    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
                };
                let kept_id = |b: &[u8]| Some(u64::from_be_bytes(b.get(9..17)?.try_into().ok()?));
                if got.iter().any(|b| kept_id(b) != Some(self.kept_alike)) {
                    self.kept_alike = 0;
                }
                self.mtu = got
                    .iter()
                    .filter_map(|b| word(b, 1))
                    .fold(self.mtu, u32::min);
                self.rcvbuf = got
                    .iter()
                    .filter_map(|b| word(b, 5))
                    .fold(self.rcvbuf, u32::min);
                for b in &got {
                    self.stated
                        .keep_common(&Stated::from_bytes(b.get(17..).unwrap_or_default()));
                }
                match parent {
                    None if self.kept_alike != 0 => self.hand_over(msgs)?,
                    None => self.announce_draw(msgs, open)?,
                    Some(p) => {
                        let up = [
                            &[bits][..],
                            &self.mtu.to_be_bytes(),
                            &self.rcvbuf.to_be_bytes(),
                            &self.kept_alike.to_be_bytes(),
                            &self.stated.to_bytes(),
                        ]
                        .concat();
                        self.waiting = vec![msgs.send(p, up)?, msgs.recv(p, ANNOUNCE_LEN)?];
                        self.round = Round::Announce;
                    }
                }
            }
            (_, Round::Announce) => {
                // `got`: this rank's families sent (not after a redraw), then
                // the announcement, which goes on down the tree.
                let bytes = got.last().map_or(&[][..], Vec::as_slice);
                let mut waiting = self.send_children(msgs, bytes)?;
                let announce = Announce::decode(bytes)
                    .ok_or_else(|| "rank 0 could not draw a group".to_string());
                if let Some(a) = announce.as_ref().ok().filter(|a| a.kept != 0) {
                    // Rank 0 hands over only what every rank offered.
                    debug_assert_eq!(a.kept, self.kept.map_or(0, |k| k.id));
                    self.announce = Some(announce);
                    self.waiting = waiting;
                    self.round = Round::Handed;
                    return Ok(None);
                }
                self.open_announced(announce, open);
                waiting.extend(self.recv_children(msgs, REPORT_MAX)?);
                self.waiting = waiting;
                self.round = Round::Reports;
            }
            (parent, Round::Reports) => {
                // `got`: the announcement sent down, then the children's reports.
                let local = self.local.as_ref().expect("opened before the reports");
                let mut failures = Failures::of(self.rank, local);
                for (&c, report) in self.children.iter().zip(&got[self.children.len()..]) {
                    failures.merge(Failures::decode(report, c));
                }
                match parent {
                    None => {
                        let code = match failures.first {
                            None => OK,
                            Some(_) if failures.taken_only && self.draw < DRAWS => TAKEN,
                            Some(_) => FAILED,
                        };
                        let first = failures.first.unwrap_or(0) as u32;
                        self.verdict = [&[code][..], &first.to_be_bytes()].concat();
                        self.waiting = self.send_children(msgs, &self.verdict)?;
                        self.failures = failures;
                    }
                    Some(p) => {
                        self.waiting =
                            vec![msgs.send(p, failures.encode())?, msgs.recv(p, VERDICT_LEN)?];
                    }
                }
                self.round = Round::Verdict;
            }
            (Some(_), Round::Verdict) => {
                // `got`: the report sent up, then the verdict, which goes on down.
                self.verdict = got[1].clone();
                self.waiting = self.send_children(msgs, &self.verdict)?;
                self.round = Round::Forward;
            }
            (None, Round::Verdict) | (Some(_), Round::Forward) => {
                // The verdict is sent down.
                match self.verdict.as_slice() {
                    [OK, ..] => return Ok(Some(self.agreed(Joined::All))),
                    [TAKEN, r @ ..] if r.len() == 4 => {
                        self.redraw();
                        match self.parent {
                            None => self.announce_draw(msgs, open)?,
                            Some(p) => {
                                self.waiting = vec![msgs.recv(p, ANNOUNCE_LEN)?];
                                self.round = Round::Announce;
                            }
                        }
                    }
                    [FAILED, r @ ..] if r.len() == 4 => {
                        let first = u32::from_be_bytes(r.try_into().expect("4 bytes")) as usize;
                        return Ok(Some(self.agreed(Joined::Failed { first })));
                    }
                    _ => return Ok(Some(self.agreed(Joined::Failed { first: 0 }))),
                }
            }
            (None, Round::Forward) => unreachable!("rank 0 sends the verdict, it forwards none"),
            (_, Round::Handed) => return Ok(Some(self.agreed(Joined::Kept))),
        }
        Ok(None)
    }

    /// Rank 0's draw: announces it (or that it could not draw) to its
    /// children, opens its own socket, and waits for their reports.
    fn announce_draw(
        &mut self,
        msgs: &mut M,
        open: &mut impl FnMut(&Announce) -> Result<S, OpenError>,
    ) -> Result<()> {
        let all = self.families;
        let range = group_range(&self.cfg, || all);
        if range != self.cfg.group_range {
            log::info!("not every rank's interface has IPv4: groups from {range}");
        }
        let (mtu, fast_polyval, rcvbuf, stated) =
            (self.mtu, self.fast_polyval, self.rcvbuf, self.stated);
        let window_param = self.cfg.flow_window;
        let announce = Announce::draw(&self.cfg, &range).map(|mut a| {
            let fitting =
                fitting_fragment(a.fragment_size as usize, mtu, a.group.is_ipv6(), a.auth);
            if fitting < a.fragment_size as usize {
                log::info!("fragments of {fitting} bytes: datagrams fit the smallest MTU, {mtu}");
            }
            a.fragment_size = fitting as u64;
            if let (Auth::Tag(key), true) = (a.auth, fast_polyval) {
                a.auth = Auth::Polyval(key);
            }
            let datagram_len = fitting + datagram::Protection::new(a.auth).overhead();
            a.window = flow_window(window_param, rcvbuf, datagram_len);
            a.inherited = stated;
            a
        });
        let bytes = announce.as_ref().map(Announce::encode).unwrap_or_default();
        let mut waiting = self.send_children(msgs, &bytes)?;
        self.open_announced(announce, open);
        waiting.extend(self.recv_children(msgs, REPORT_MAX)?);
        self.waiting = waiting;
        self.round = Round::Reports;
        Ok(())
    }

    /// Rank 0, where every rank offered the same kept group: announces that
    /// they take it over, with what they state alike.
    fn hand_over(&mut self, msgs: &mut M) -> Result<()> {
        let kept = self.kept.expect("rank 0 offers what every rank offered");
        let announce = Announce {
            kept: kept.id,
            inherited: self.stated,
            ..kept.announce
        };
        self.waiting = self.send_children(msgs, &announce.encode())?;
        self.announce = Some(Ok(announce));
        self.round = Round::Handed;
        Ok(())
    }

    /// Opens this rank's socket for `announce`, or knows why it cannot.
    fn open_announced(
        &mut self,
        announce: Result<Announce, String>,
        open: &mut impl FnMut(&Announce) -> Result<S, OpenError>,
    ) {
        self.local = Some(match &announce {
            Ok(a) => match a.mismatch(&self.cfg) {
                Some(why) => Err(OpenError::from(why)),
                None => open(a),
            },
            Err(why) => Err(OpenError::from(why.clone())),
        });
        self.announce = Some(announce);
    }

    /// Forgets this draw: its socket is closed before the next one opens.
    fn redraw(&mut self) {
        log::info!(
            "rank {}: drawn port taken on some rank; drawing again ({} of {DRAWS})",
            self.rank,
            self.draw
        );
        self.draw += 1;
        self.local = None;
        self.announce = None;
        self.failures = Failures::default();
    }

    /// The agreement's result on this rank.
    fn agreed(&mut self, joined: Joined) -> Agreed<S> {
        Agreed {
            announce: self.announce.take().and_then(Result::ok),
            local: (joined != Joined::Kept).then(|| {
                self.local
                    .take()
                    .unwrap_or_else(|| Err("no announcement".to_string().into()))
                    .map_err(|e| e.why)
            }),
            joined,
            failures: std::mem::take(&mut self.failures),
        }
    }
}

/// The message rank 0 prints when ranks could not set up multicast: the
/// failures grouped by reason, each with its ranks (the lowest [`SHOWN`]) and
/// their hosts.
pub fn failure_message(comm: &str, failures: &Failures, host: impl Fn(usize) -> String) -> String {
    let mut text = format!(
        "The ipmc coll component could not set up IP multicast for communicator {comm};\n\
         Open MPI's own broadcast serves its calls that would multicast (the job goes on):\n"
    );
    for g in &failures.groups {
        let mut hosts: Vec<String> = Vec::new();
        for &r in &g.ranks {
            let h = host(r);
            if !hosts.contains(&h) {
                hosts.push(h);
            }
        }
        let more = g.count as usize - g.ranks.len().min(g.count as usize);
        let ranks: Vec<String> = g.ranks.iter().map(|r| r.to_string()).collect();
        let (ranks, hosts) = match more {
            0 => (ranks.join(", "), hosts.join(", ")),
            _ => (
                format!("{} and {more} more", ranks.join(", ")),
                format!("{} and others", hosts.join(", ")),
            ),
        };
        let (rk, hk) = (
            if g.count == 1 { "rank" } else { "ranks" },
            if hosts.contains(", ") || more > 0 {
                "hosts"
            } else {
                "host"
            },
        );
        text.push_str(&format!(
            "\n  {rk} {ranks} on {hk} {hosts}:\n    {}\n",
            g.why
        ));
    }
    if failures.unlisted > 0 {
        text.push_str(&format!(
            "\n  and {} more ranks, for other reasons\n",
            failures.unlisted
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::inherited::{held, stated, Held};
    use crate::testing::test_net::run_messages;

    /// A rank's interface families, MTU and whether its CPU computes AES-128 and POLYVAL
    /// in hardware.
    type RankFacts = ((bool, bool), u32, bool);
    const RCVBUF: u32 = 1 << 20;

    /// Runs the agreement on `size` ranks; `open(rank, draw)` is each rank's
    /// result of opening its socket (its socket stands for the announcement
    /// it opened), `families(rank)` its interface's address families and
    /// MTU, and whether its CPU computes AES-128 and POLYVAL in hardware.
    fn agree_on(
        size: usize,
        open: fn(usize, usize) -> Result<(), OpenError>,
        families: fn(usize) -> RankFacts,
    ) -> Vec<(Agreed<Announce>, Vec<Announce>)> {
        agree_stating(size, open, families, |_| Stated::NONE)
    }

    /// As [`agree_on`], each rank stating `stated(rank)`.
    fn agree_stating(
        size: usize,
        open: fn(usize, usize) -> Result<(), OpenError>,
        families: fn(usize) -> RankFacts,
        stated: fn(usize) -> Stated,
    ) -> Vec<(Agreed<Announce>, Vec<Announce>)> {
        agree_offering(size, open, families, stated, |_| None)
    }

    /// As [`agree_stating`], each rank offering the kept group `kept(rank)`.
    fn agree_offering(
        size: usize,
        open: fn(usize, usize) -> Result<(), OpenError>,
        families: fn(usize) -> RankFacts,
        stated: fn(usize) -> Stated,
        kept: fn(usize) -> Option<Kept>,
    ) -> Vec<(Agreed<Announce>, Vec<Announce>)> {
        run_messages(size, move |rank, msgs| {
            let cfg = Config::default();
            let mut opened = Vec::new();
            let (families, mtu, fast_polyval) = families(rank);
            let facts = Facts {
                families,
                mtu,
                rcvbuf: RCVBUF + rank as u32,
                stated: stated(rank),
                kept: kept(rank),
            };
            let mut a = Agreement::start(msgs, rank, size, cfg, facts).unwrap();
            a.fast_polyval = fast_polyval;
            let agreed = a
                .finish(msgs, &mut |a| {
                    opened.push(*a);
                    open(rank, opened.len()).map(|()| *a)
                })
                .unwrap();
            (agreed, opened)
        })
    }

    #[test]
    fn every_rank_agrees_on_one_group() {
        let ranks = agree_on(5, |_, _| Ok(()), |_| ((true, true), u32::MAX, true));
        let a = ranks[0].0.announce.expect("rank 0 drew");
        assert!(a.group.is_ipv4());
        for (agreed, opened) in &ranks {
            assert_eq!(agreed.joined, Joined::All);
            assert_eq!(agreed.announce, Some(a));
            assert_eq!(
                agreed.local.as_ref().and_then(|l| l.as_ref().ok()),
                Some(&a)
            );
            assert_eq!(opened, &[a]);
            assert!(agreed.failures.is_empty());
        }
    }

    /// Ranks 0–5 state decisions: all the same for 1–4 KiB, one rank
    /// another for 1 MiB, one none for the barrier. Every rank gets the
    /// first only, through a redraw too (rank 4's port taken at first).
    #[test]
    fn decisions_every_rank_states_alike_are_announced() {
        use crate::engine::algorithm::Algorithm::{Chain, Linear, Multicast};
        use crate::engine::tuning::{class_of, BARRIER};
        let states = |rank: usize| {
            let mut held = vec![
                (class_of(4096), Held::Decided(Multicast)),
                (class_of(64), Held::Measured(3)),
                (
                    class_of(1 << 20),
                    Held::Decided(if rank == 5 { Multicast } else { Chain }),
                ),
                (class_of(256), Held::Measured(if rank == 2 { 4 } else { 3 })),
            ];
            if rank != 3 {
                held.push((BARRIER, Held::Decided(Linear)));
            }
            stated(held)
        };
        let taken_once = |rank, draw| match (rank, draw) {
            (4, 1) => Err(OpenError {
                why: "port taken".into(),
                taken: true,
            }),
            _ => Ok(()),
        };
        let ranks = agree_stating(6, taken_once, |_| ((true, true), u32::MAX, true), states);
        for (agreed, opened) in &ranks {
            assert_eq!(agreed.joined, Joined::All);
            assert_eq!(opened.len(), 2, "a redraw");
            let kept: Vec<_> = held(&agreed.announce.unwrap().inherited).collect();
            assert_eq!(
                kept,
                [
                    (class_of(64), Held::Measured(3)),
                    (class_of(4096), Held::Decided(Multicast))
                ]
            );
        }
    }

    /// A group kept from an earlier communicator, as its ranks offer it.
    fn kept(id: u64) -> Option<Kept> {
        let announce = Announce::draw(&Config::default(), groups::DEFAULT_GROUPS).unwrap();
        Some(Kept { id, announce })
    }

    /// Every rank offers the same kept group: rank 0 hands it over with
    /// what they state alike, and no rank opens a socket or can fail.
    #[test]
    fn a_group_every_rank_offers_is_taken_over_without_a_socket() {
        use crate::engine::algorithm::Algorithm::Multicast;
        use crate::engine::tuning::class_of;
        // The announcement rank 0 kept; the others kept the same group.
        static KEPT: std::sync::OnceLock<Kept> = std::sync::OnceLock::new();
        let offer = |_| Some(*KEPT.get_or_init(|| kept(77).unwrap()));
        let states = |_| stated(vec![(class_of(4096), Held::Decided(Multicast))]);
        let ranks = agree_offering(
            6,
            |_, _| Ok(()),
            |_| ((true, true), 1500, true),
            states,
            offer,
        );
        let was = KEPT.get().unwrap().announce;
        for (agreed, opened) in &ranks {
            assert_eq!(agreed.joined, Joined::Kept);
            assert!(opened.is_empty(), "nothing opened");
            assert!(agreed.local.is_none());
            let a = agreed.announce.expect("the hand-over");
            assert_eq!(
                (a.kept, a.group, a.comm_id, a.auth),
                (77, was.group, was.comm_id, was.auth)
            );
            assert_eq!(held(&a.inherited).count(), 1);
            assert!(agreed.failures.is_empty());
        }
    }

    /// One rank offers another kept group, or none: every rank opens the
    /// group rank 0 draws, as without any.
    #[test]
    fn a_group_not_every_rank_offers_is_drawn_anew() {
        for odd in [None, kept(78)] {
            static ODD: std::sync::Mutex<Option<Kept>> = std::sync::Mutex::new(None);
            *ODD.lock().unwrap() = odd;
            let offer = |rank| match rank {
                4 => *ODD.lock().unwrap(),
                _ => kept(77),
            };
            let ranks = agree_offering(
                6,
                |_, _| Ok(()),
                |_| ((true, true), u32::MAX, true),
                |_| Stated::NONE,
                offer,
            );
            let a = ranks[0].0.announce.expect("rank 0 drew");
            for (agreed, opened) in &ranks {
                assert_eq!(agreed.joined, Joined::All);
                assert_eq!(a.kept, 0);
                assert_eq!(opened, &[a]);
            }
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
            |_| ((true, true), u32::MAX, true),
        );
        for (agreed, opened) in &ranks {
            assert_eq!(agreed.joined, Joined::Failed { first: 3 });
            assert_eq!(opened.len(), 1, "no second draw for a failure");
        }
        let failures = &ranks[0].0.failures;
        assert_eq!(
            failures.groups,
            vec![Failure {
                why: "no interface".into(),
                ranks: vec![3],
                count: 1
            }]
        );
        assert_eq!(
            ranks[3].0.local.as_ref().unwrap().as_ref().err().unwrap(),
            "no interface"
        );
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
            |_| ((true, true), u32::MAX, true),
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
            |_| ((true, true), u32::MAX, true),
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
                    ((false, true), u32::MAX, true)
                } else {
                    ((true, true), u32::MAX, true)
                }
            },
        );
        for (agreed, _) in &ranks {
            assert_eq!(agreed.joined, Joined::All);
            let group = agreed.announce.unwrap().group;
            assert!(group.is_ipv6(), "{group}");
        }
    }

    /// Rank 0 announces the largest fragment whose datagram fits the
    /// smallest MTU of any rank (rank 3's 1,500 here): IP never cuts one.
    #[test]
    fn fragments_fit_the_smallest_mtu() {
        let ranks = agree_on(
            6,
            |_, _| Ok(()),
            |rank| ((true, false), if rank == 3 { 1500 } else { 9000 }, true),
        );
        // Header and tag: 36 + 16 bytes.
        let want = 1500 - 20 - 8 - 36 - 16;
        for (agreed, _) in &ranks {
            assert_eq!(agreed.joined, Joined::All);
            assert_eq!(agreed.announce.unwrap().fragment_size, want as u64);
        }
        // A large MTU leaves the parameter's bound; a tiny one gives the floor.
        let auth = Auth::crc(true);
        assert_eq!(fitting_fragment(4096, 65536, false, auth), 4096);
        assert_eq!(fitting_fragment(4096, 9000, true, auth), 4096);
        assert_eq!(
            fitting_fragment(65024, 9000, true, auth),
            9000 - 40 - 8 - 36 - 4
        );
        assert_eq!(fitting_fragment(4096, 300, false, auth), MIN_FRAGMENT);
    }

    /// A tag is AES-128 with POLYVAL's where every rank's CPU computes it in
    /// hardware, on datagrams of any size, and keyed BLAKE3's as soon as one
    /// rank's does not; every rank takes part either way.
    #[test]
    fn the_tag_is_polyval_only_where_every_rank_accelerates_it() {
        type Case = (fn(usize) -> RankFacts, bool);
        let runs: [Case; 4] = [
            (|_| ((true, false), 1500, true), true),
            (|r| ((true, false), 1500, r != 4), false),
            (|_| ((true, false), 9000, true), true),
            (|r| ((true, false), 9000, r != 0), false),
        ];
        for (facts, want_polyval) in runs {
            let ranks = agree_on(6, |_, _| Ok(()), facts);
            for (agreed, _) in &ranks {
                assert_eq!(agreed.joined, Joined::All);
                let auth = agreed.announce.unwrap().auth;
                assert_eq!(matches!(auth, Auth::Polyval(_)), want_polyval, "{auth:?}");
                assert_eq!(matches!(auth, Auth::Tag(_)), !want_polyval, "{auth:?}");
            }
        }
    }

    #[test]
    fn announcements_round_trip() {
        use crate::engine::algorithm::Algorithm::Chain;
        for group in ["239.192.3.4:5000", "[ff18::1:2]:32767"] {
            let a = Announce {
                group: group.parse().unwrap(),
                comm_id: 0xdead_beef_0123_4567,
                fragment_size: 4096,
                auth: Auth::Tag(Key([7; KEY_LEN])),
                digest: 99,
                window: 1234,
                inherited: stated([(2, Held::Measured(5)), (7, Held::Decided(Chain))]),
                kept: 0x0123_4567_89ab_cdef,
            };
            assert_eq!(Announce::decode(&a.encode()), Some(a));
            for auth in [
                Auth::crc(true),
                Auth::crc(false),
                Auth::Encrypt(Key([8; KEY_LEN])),
                Auth::Polyval(Key([9; KEY_LEN])),
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
        let mut failures = Failures::default();
        for r in (0..12).rev() {
            let why = if r == 5 { "other" } else { "no interface" };
            failures.merge(Failures::of::<()>(r, &Err(why.to_string().into())));
        }
        let text = failure_message("MPI_COMM_WORLD", &failures, |r| format!("node{}", r / 2));
        assert_eq!(text.matches("no interface").count(), 1, "{text}");
        assert!(
            text.contains(
                "ranks 0, 1, 2, 3, 4, 6, 7, 8 and 3 more on hosts node0, node1, node2, node3, \
                 node4 and others"
            ),
            "{text}"
        );
        assert!(text.contains("rank 5 on host node2:\n    other"), "{text}");
        assert!(text.contains("for communicator MPI_COMM_WORLD"), "{text}");
        assert_eq!(failures.first, Some(0));
        assert_eq!(Failures::decode(&failures.encode(), 1), failures);

        // A long reason is cut at a character boundary; ten reasons of the
        // longest kind still fit a report, eight of them named.
        let long = |i: usize| format!("{i}{}", "é".repeat(REASON_MAX));
        let mut many = Failures::default();
        for r in 0..40 {
            many.merge(Failures::of::<()>(r, &Err(long(r % 10).into())));
        }
        assert_eq!(many.groups.len(), REASONS);
        assert_eq!(many.unlisted, 8);
        assert!(many
            .groups
            .iter()
            .all(|g| g.why.len() <= REASON_MAX && g.count == 4));
        let bytes = many.encode();
        assert!(bytes.len() <= REPORT_MAX);
        assert_eq!(Failures::decode(&bytes, 1), many);
        assert!(failure_message("c", &many, |_| "h".into()).contains("and 8 more ranks"));

        // Only taken ports may be drawn again; a report that does not parse
        // is its sender's failure.
        let taken = OpenError {
            why: "binding".into(),
            taken: true,
        };
        let mut f = Failures::of::<()>(2, &Err(taken));
        assert!(f.taken_only);
        assert!(Failures::of(1, &Ok(())).is_empty());
        f.merge(Failures::decode(&[1, 2, 3], 7));
        assert!(!f.taken_only);
        assert_eq!((f.first, f.groups[1].ranks.clone()), (Some(2), vec![7]));
    }

    #[test]
    fn the_tree_reaches_every_rank_once_in_log_depth() {
        for size in [2, 3, 5, 8, 13, 64, 1000] {
            let mut reached = vec![0; size];
            for rank in 0..size {
                let (parent, children) = tree(rank, size);
                assert_eq!(parent.is_none(), rank == 0);
                for &c in &children {
                    assert_eq!(tree(c, size).0, Some(rank), "{c} of {rank} in {size}");
                    reached[c] += 1;
                }
                let mut depth = 0;
                let mut r = rank;
                while let Some(p) = tree(r, size).0 {
                    (r, depth) = (p, depth + 1);
                }
                assert!(1 << depth <= size.next_power_of_two(), "{rank} in {size}");
            }
            assert_eq!(reached[0], 0);
            assert!(reached[1..].iter().all(|&n| n == 1), "{size}: {reached:?}");
        }
    }

    #[test]
    fn failures_from_every_subtree_reach_rank_0() {
        let ranks = agree_on(
            23,
            |rank, _| match rank % 7 {
                3 => Err(format!("reason {}", rank % 2).into()),
                _ => Ok(()),
            },
            |_| ((true, true), u32::MAX, true),
        );
        for (agreed, _) in &ranks {
            assert_eq!(agreed.joined, Joined::Failed { first: 3 });
        }
        let f = &ranks[0].0.failures;
        let group = |why: &str| {
            f.groups
                .iter()
                .find(|g| g.why == why)
                .unwrap()
                .ranks
                .clone()
        };
        assert_eq!(group("reason 1"), vec![3, 17]);
        assert_eq!(group("reason 0"), vec![10]);
        assert!(ranks[1..].iter().all(|(a, _)| a.failures.is_empty()));
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
        assert!(a.mismatch(&other).unwrap().contains("differ from rank 0's"));
        let other = Config {
            crossover_nodes: 9,
            ..Config::default()
        };
        assert!(a.mismatch(&other).is_some());
        let local = Config {
            verbose: 7,
            ..Config::default()
        };
        assert_eq!(a.mismatch(&local), None, "local parameters may differ");
        let beyond = Announce {
            fragment_size: cfg.fragment_size as u64 + 1,
            ..a
        };
        assert!(beyond
            .mismatch(&cfg)
            .unwrap()
            .contains("announced fragments"));
        for authenticate in [0, 2] {
            let other = Config {
                authenticate,
                ..Config::default()
            };
            assert!(a.mismatch(&other).is_some());
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
