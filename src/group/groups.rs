//! The choice of a communicator's multicast group and port (thesis §1.7.2,
//! §3.4): the configured address and port ranges, the generator that
//! stretches a collected seed ([`crate::group::entropy`]) through Blum-Blum-Shub
//! into ChaCha20, and uniform draws from the ranges.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;

use crate::group::bbs::Bbs;

/// The default groups: the IPv4 organization-local scope of RFC 2365. It is
/// administratively scoped (routers at the organization's edge keep it in),
/// and it is where network administrators expect multicast applications.
/// 2^18 groups, all with distinct Ethernet MAC addresses.
pub const DEFAULT_GROUPS: &str = "239.192.0.0/14";

/// The thesis's groups (§1.7.2), still selectable. Not the default: RFC 5771
/// reserves 225–231/8 and RFC 6034 gave 234/8 to unicast-prefix-based
/// groups, and none of it is administratively scoped.
pub const THESIS_GROUPS: &str = "225.0.1.0-231.255.255.255,234.0.1.0-238.255.255.255";

/// The default ports: the thesis's lower bound, and below Linux's ephemeral
/// ports (32768 up, `net.ipv4.ip_local_port_range`) so that no outgoing
/// connection's port is taken.
pub const DEFAULT_PORTS: &str = "5000-32767";

/// An IPv6 value: transient groups (T flag) of organization-local scope
/// (ff18::, the counterpart of [`DEFAULT_GROUPS`]; ff15:: is site-local).
/// A /96 varies exactly the low 32 bits, which Ethernet maps to the MAC
/// address (33:33 + low 32 bits), so no two groups share a MAC.
pub const IPV6_EXAMPLE_GROUPS: &str = "ff18::/96";

/// The groups that replace [`DEFAULT_GROUPS`] when rank 0's interface has no
/// IPv4 address: link-local scope, which every IPv6 interface can send to
/// from its automatic link-local address, and which like the default TTL of
/// 1 stays on the local network.
pub const IPV6_DEFAULT_GROUPS: &str = "ff12::/96";

/// An address family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    fn of(addr: IpAddr) -> Self {
        match addr {
            IpAddr::V4(_) => Family::V4,
            IpAddr::V6(_) => Family::V6,
        }
    }

    fn bits(self) -> u32 {
        match self {
            Family::V4 => 32,
            Family::V6 => 128,
        }
    }

    fn addr(self, v: u128) -> IpAddr {
        match self {
            // Only IPv4 values below 2^32 are ever stored.
            Family::V4 => IpAddr::V4(Ipv4Addr::from(v as u32)),
            Family::V6 => IpAddr::V6(Ipv6Addr::from(v)),
        }
    }

    /// The multicast block: 224.0.0.0/4 or ff00::/8.
    fn multicast(self) -> (u128, u128) {
        match self {
            Family::V4 => (0xe000_0000, 0xefff_ffff),
            Family::V6 => (0xff << 120, u128::MAX),
        }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Family::V4 => "IPv4",
            Family::V6 => "IPv6",
        })
    }
}

fn value(addr: IpAddr) -> u128 {
    match addr {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

/// The 224.0.0.0/24 block (IGMP, OSPF, mDNS, ...): never ours.
const V4_CONTROL: (u128, u128) = (0xe000_0000, 0xe000_00ff);

/// IPv4 groups whose low 23 bits are below 256 share their Ethernet MAC
/// address (01:00:5e + low 23 bits) with 224.0.0.x, which snooping switches
/// flood to every port (RFC 4541 §2.1.2): one /24 in every 2^23 addresses.
fn v4_mac_aliases() -> impl Iterator<Item = (u128, u128)> {
    (0..32u128).map(|k| {
        let first = 0xe000_0000 + (k << 23);
        (first, first + 0xff)
    })
}

/// Overlap of two inclusive intervals.
fn overlaps(a: (u128, u128), b: (u128, u128)) -> bool {
    a.0 <= b.1 && b.0 <= a.1
}

/// `ranges` (sorted, disjoint) without `hole`.
fn subtract(ranges: &[(u128, u128)], hole: (u128, u128)) -> Vec<(u128, u128)> {
    let mut out = Vec::with_capacity(ranges.len() + 1);
    for &r in ranges {
        if !overlaps(r, hole) {
            out.push(r);
            continue;
        }
        if r.0 < hole.0 {
            out.push((r.0, hole.0 - 1));
        }
        if r.1 > hole.1 {
            out.push((hole.1 + 1, r.1));
        }
    }
    out
}

fn total(ranges: &[(u128, u128)]) -> u128 {
    // Within ff00::/8 the union has at most 2^120 addresses: no overflow.
    ranges.iter().map(|(a, b)| b - a + 1).sum()
}

/// The multicast groups a communicator's group is drawn from: the union of
/// comma-separated items, each a CIDR block (`239.192.0.0/14`, `ff18::/96`),
/// an inclusive range (`225.0.1.0-231.255.255.255`) or one address, all of
/// one family.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupRanges {
    family: Family,
    /// The union: sorted, disjoint, non-adjacent inclusive intervals.
    ranges: Vec<(u128, u128)>,
    /// What draws come from: `ranges` without the IPv4 MAC aliases of
    /// 224.0.0.x, unless nothing else is left.
    drawn: Vec<(u128, u128)>,
}

impl GroupRanges {
    /// Parses the `group_range` parameter. Errors quote the offending item.
    pub fn parse(s: &str) -> Result<Self, String> {
        if s.trim().is_empty() {
            return Err(
                "no multicast groups given: expected comma-separated CIDR blocks \
                 or first-last ranges, for example 239.192.0.0/14"
                    .into(),
            );
        }
        let mut family: Option<(Family, &str)> = None;
        let mut ranges = Vec::new();
        for item in s.split(',').map(str::trim) {
            let (fam, first, last) = parse_item(item)?;
            match family {
                None => family = Some((fam, item)),
                Some((f, other)) if f != fam => {
                    return Err(format!(
                        "'{item}' is {fam} but '{other}' is {f}: all groups must be of one family"
                    ))
                }
                Some(_) => {}
            }
            ranges.push((first, last));
        }
        let family = family.map(|(f, _)| f).unwrap_or(Family::V4);
        ranges.sort_unstable();
        let mut merged: Vec<(u128, u128)> = Vec::with_capacity(ranges.len());
        for r in ranges {
            match merged.last_mut() {
                Some(m) if r.0 <= m.1 || r.0 - m.1 == 1 => m.1 = m.1.max(r.1),
                _ => merged.push(r),
            }
        }
        // Removing the aliases exactly, rather than re-drawing, keeps draws
        // uniform over the rest and bounded in time.
        let mut drawn = merged.clone();
        if family == Family::V4 {
            for alias in v4_mac_aliases() {
                drawn = subtract(&drawn, alias);
            }
            if drawn.is_empty() {
                drawn.clone_from(&merged);
            }
        }
        Ok(GroupRanges {
            family,
            ranges: merged,
            drawn,
        })
    }

    /// The family of every group.
    pub fn family(&self) -> Family {
        self.family
    }

    /// Whether the groups are IPv6.
    pub fn is_ipv6(&self) -> bool {
        self.family == Family::V6
    }

    /// How many groups the ranges hold (overlaps counted once).
    pub fn size(&self) -> u128 {
        total(&self.ranges)
    }

    /// How many groups [`draw`] chooses from: [`Self::size`] less the IPv4
    /// groups that share a MAC address with 224.0.0.x, if any others exist.
    pub fn drawable_size(&self) -> u128 {
        total(&self.drawn)
    }

    /// Whether `addr` is one of the groups.
    pub fn contains(&self, addr: IpAddr) -> bool {
        let v = value(addr);
        Family::of(addr) == self.family && self.ranges.iter().any(|&(a, b)| a <= v && v <= b)
    }

    /// The ranges as inclusive (first, last) pairs, sorted and merged.
    pub fn ranges(&self) -> impl Iterator<Item = (IpAddr, IpAddr)> + '_ {
        self.ranges
            .iter()
            .map(|&(a, b)| (self.family.addr(a), self.family.addr(b)))
    }
}

/// One item: (family, first, last).
fn parse_item(item: &str) -> Result<(Family, u128, u128), String> {
    let addr = |s: &str| -> Result<IpAddr, String> {
        s.trim()
            .parse()
            .map_err(|_| format!("'{item}': '{}' is not an IPv4 or IPv6 address", s.trim()))
    };
    let (family, first, last) = if item.is_empty() {
        return Err("empty item in the group list (two commas, or one at an end)".into());
    } else if let Some((a, prefix)) = item.split_once('/') {
        let a = addr(a)?;
        let family = Family::of(a);
        let max = family.bits();
        let prefix: u32 = match prefix.trim().parse() {
            Ok(p) if p <= max => p,
            _ => {
                return Err(format!(
                    "'{item}': the prefix length must be a number from 0 to {max}"
                ))
            }
        };
        let host = match max - prefix {
            0 => 0,
            bits => u128::MAX >> (128 - bits),
        };
        let v = value(a);
        if v & host != 0 {
            return Err(format!(
                "'{item}' has host bits set; did you mean '{}/{prefix}'?",
                family.addr(v & !host)
            ));
        }
        (family, v, v | host)
    } else if let Some((a, b)) = item.split_once('-') {
        let (a, b) = (addr(a)?, addr(b)?);
        if Family::of(a) != Family::of(b) {
            return Err(format!("'{item}': both ends must be of one family"));
        }
        if value(a) > value(b) {
            return Err(format!("'{item}': the first address is above the last"));
        }
        (Family::of(a), value(a), value(b))
    } else {
        let a = addr(item)?;
        (Family::of(a), value(a), value(a))
    };
    let (lo, hi) = family.multicast();
    if first < lo || last > hi {
        let block = match family {
            Family::V4 => "224.0.0.0/4",
            Family::V6 => "ff00::/8",
        };
        return Err(format!(
            "'{item}' is not multicast: {family} multicast groups lie in {block}"
        ));
    }
    if family == Family::V4 && overlaps((first, last), V4_CONTROL) {
        return Err(format!(
            "'{item}' overlaps 224.0.0.0/24, the local network control block \
             (IGMP, routing protocols); choose groups in 239.0.0.0/8"
        ));
    }
    if family == Family::V6 {
        // Scope 0 is reserved (no packet may be sent to it) and scope 1 is
        // interface-local: neither reaches another host (RFC 4291 §2.7).
        for flags in 0..16u128 {
            for scope in [0u128, 1] {
                let start = (0xff << 120) | (((flags << 4) | scope) << 112);
                if overlaps((first, last), (start, start | ((1 << 112) - 1))) {
                    return Err(format!(
                        "'{item}' includes groups of reserved (ffx0::) or interface-local \
                         (ffx1::) scope, which never reach another host; choose for \
                         example {IPV6_EXAMPLE_GROUPS}"
                    ));
                }
            }
        }
    }
    Ok((family, first, last))
}

impl FromStr for GroupRanges {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::parse(s)
    }
}

/// Comma-separated, CIDR where a range is one, so it parses back.
impl fmt::Display for GroupRanges {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, &(a, b)) in self.ranges.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            let host = b - a;
            let (first, last) = (self.family.addr(a), self.family.addr(b));
            if host == 0 {
                write!(f, "{first}")?;
            } else if host.count_ones() == 128 - host.leading_zeros() && a & host == 0 {
                let prefix = self.family.bits() - host.count_ones();
                write!(f, "{first}/{prefix}")?;
            } else {
                write!(f, "{first}-{last}")?;
            }
        }
        Ok(())
    }
}

/// The UDP ports a communicator's port is drawn from, inclusive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortRange {
    first: u16,
    last: u16,
}

impl PortRange {
    /// The ports `first..=last`; 0 is not a port one can bind for others.
    pub fn new(first: u16, last: u16) -> Result<Self, String> {
        if first == 0 {
            return Err("port 0 cannot be used: ports are 1 to 65535".into());
        }
        if first > last {
            return Err(format!(
                "'{first}-{last}': the first port is above the last"
            ));
        }
        Ok(PortRange { first, last })
    }

    /// Parses the `port_range` parameter: `first-last` or one port.
    pub fn parse(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let port = |p: &str| -> Result<u16, String> {
            match p.trim().parse::<u16>() {
                Ok(v) if v > 0 => Ok(v),
                _ => Err(format!("'{s}': '{}' is not a port (1 to 65535)", p.trim())),
            }
        };
        if s.is_empty() {
            return Err(
                "no ports given: expected first-last or one port, for example 5000-32767".into(),
            );
        }
        let (first, last) = match s.split_once('-') {
            Some((a, b)) => (port(a)?, port(b)?),
            None => (port(s)?, port(s)?),
        };
        Self::new(first, last).map_err(|_| format!("'{s}': the first port is above the last"))
    }

    pub fn first(&self) -> u16 {
        self.first
    }

    pub fn last(&self) -> u16 {
        self.last
    }

    /// How many ports.
    pub fn size(&self) -> u32 {
        u32::from(self.last - self.first) + 1
    }
}

impl FromStr for PortRange {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::parse(s)
    }
}

impl fmt::Display for PortRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.first == self.last {
            write!(f, "{}", self.first)
        } else {
            write!(f, "{}-{}", self.first, self.last)
        }
    }
}

/// The thesis's stretching (§3.4): 256 bits of a Blum-Blum-Shub generator
/// seeded with `seed` become the key of a ChaCha20 generator, so that seeds
/// differing in one bit give unrelated streams. (Seeds 0 and 1, and seeds
/// equal modulo the BBS modulus, give the same stream; a hashed seed hits
/// them with negligible probability.)
pub fn generator(seed: u64) -> ChaCha20Rng {
    let mut bbs = Bbs::new(seed);
    let mut key = [0u8; 32];
    for chunk in key.chunks_exact_mut(8) {
        chunk.copy_from_slice(&bbs.next_u64().to_be_bytes());
    }
    ChaCha20Rng::from_seed(key)
}

/// A uniform value in `0..n` (n > 0), by rejection: no modulo bias.
fn below(rng: &mut impl RngCore, n: u128) -> u128 {
    let max = n - 1;
    if max == 0 {
        return 0;
    }
    let mask = u128::MAX >> max.leading_zeros();
    loop {
        let mut v = u128::from(rng.next_u64());
        if mask > u128::from(u64::MAX) {
            v = (v << 64) | u128::from(rng.next_u64());
        }
        let v = v & mask;
        if v <= max {
            return v;
        }
    }
}

/// A group and port, each uniform over its ranges (IPv4 groups that share a
/// MAC address with 224.0.0.x only when the ranges hold nothing else). An
/// IPv6 address comes with scope id 0: the socket code names the interface.
pub fn draw(rng: &mut impl RngCore, groups: &GroupRanges, ports: &PortRange) -> SocketAddr {
    let mut i = below(rng, groups.drawable_size());
    let mut group = groups.drawn[0].0;
    for &(a, b) in &groups.drawn {
        if i <= b - a {
            group = a + i;
            break;
        }
        i -= b - a + 1;
    }
    // below(size) < 2^16, so the sum stays within the range.
    let port = ports.first + below(rng, u128::from(ports.size())) as u16;
    SocketAddr::new(groups.family.addr(group), port)
}

/// A communicator instance id for the datagram header: random, never 0.
pub fn draw_comm_id(rng: &mut impl RngCore) -> u64 {
    loop {
        let id = rng.next_u64();
        if id != 0 {
            return id;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(s: &str) -> GroupRanges {
        GroupRanges::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn err(s: &str) -> String {
        GroupRanges::parse(s).expect_err(s)
    }

    fn v4(s: &str) -> u32 {
        u32::from(s.parse::<Ipv4Addr>().unwrap())
    }

    fn ip4(a: SocketAddr) -> u32 {
        match a.ip() {
            IpAddr::V4(a) => u32::from(a),
            IpAddr::V6(_) => panic!("{a} is IPv6"),
        }
    }

    #[test]
    fn the_constants_parse() {
        let d = g(DEFAULT_GROUPS);
        assert_eq!(d.family(), Family::V4);
        assert_eq!(d.size(), 1 << 18);
        assert_eq!(d.drawable_size(), 1 << 18);
        let t = g(THESIS_GROUPS);
        let expected = (v4("231.255.255.255") - v4("225.0.1.0") + 1)
            + (v4("238.255.255.255") - v4("234.0.1.0") + 1);
        assert_eq!(t.size(), u128::from(expected));
        // Each /9 starts with an alias /24: 14 in 225-231/8 and 10 in
        // 234-238/8, less 225.0.0.x and 234.0.0.x, which are not configured.
        assert_eq!(t.drawable_size(), t.size() - 256 * (14 - 1 + 10 - 1));
        let v6 = g(IPV6_EXAMPLE_GROUPS);
        assert!(v6.is_ipv6());
        assert_eq!(v6.size(), 1 << 32);
        assert_eq!(v6.drawable_size(), 1 << 32);
        assert_eq!(
            PortRange::parse(DEFAULT_PORTS).unwrap().size(),
            32767 - 5000 + 1
        );
    }

    #[test]
    fn parses_items_and_merges_them() {
        let r = g(" 239.1.0.0/24 , 239.1.1.0-239.1.1.9,239.1.0.128/25,239.2.3.4 ");
        assert_eq!(r.size(), 256 + 10 + 1);
        assert_eq!(r.to_string(), "239.1.0.0-239.1.1.9,239.2.3.4");
        assert_eq!(g(&r.to_string()), r);
        assert_eq!(
            g("239.192.0.0 - 239.195.255.255").to_string(),
            "239.192.0.0/14"
        );
        assert_eq!(g("ff15::/96,ff15::1:0:0/96").to_string(), "ff15::/95");
        assert_eq!(g("ff18::1-ff18::10").size(), 16);
        assert_eq!(g("ff18::/16").size(), 1 << 112);
        assert!(r.contains("239.1.1.9".parse().unwrap()));
        assert!(!r.contains("239.1.1.10".parse().unwrap()));
        assert!(!r.contains("ff18::1".parse().unwrap()));
        let pairs: Vec<_> = r.ranges().map(|(a, b)| format!("{a}-{b}")).collect();
        assert_eq!(pairs, ["239.1.0.0-239.1.1.9", "239.2.3.4-239.2.3.4"]);
    }

    #[test]
    fn rejects_bad_groups_naming_the_item() {
        for (input, needle) in [
            ("", "no multicast groups"),
            ("   ", "no multicast groups"),
            ("239.1.0.0/16,,239.2.0.0/16", "empty item"),
            ("239.1.0.0/16,", "empty item"),
            ("10.0.0.0/8", "'10.0.0.0/8' is not multicast"),
            ("239.0.0.0/3", "'239.0.0.0/3'"),
            ("223.255.255.255-224.0.1.0", "not multicast"),
            ("fe80::/64", "'fe80::/64' is not multicast"),
            ("224.0.0.0/4", "'224.0.0.0/4' overlaps 224.0.0.0/24"),
            ("224.0.0.251", "overlaps 224.0.0.0/24"),
            ("224.0.0.200-224.0.1.5", "overlaps 224.0.0.0/24"),
            ("239.1.2.3/33", "'239.1.2.3/33': the prefix length"),
            ("239.1.0.0/x", "'239.1.0.0/x': the prefix length"),
            ("ff18::/129", "from 0 to 128"),
            ("239.1.2.3/16", "did you mean '239.1.0.0/16'?"),
            ("ff18::1/96", "did you mean 'ff18::/96'?"),
            (
                "239.2.0.0-239.1.0.0",
                "'239.2.0.0-239.1.0.0': the first address is above",
            ),
            ("239.1.0.0-ff18::", "both ends must be of one family"),
            (
                "239.1.0.0/16,ff18::/96",
                "'ff18::/96' is IPv6 but '239.1.0.0/16' is IPv4",
            ),
            ("239.1.0.x", "'239.1.0.x' is not an IPv4 or IPv6 address"),
            ("239.1.0.0 to 239.2.0.0", "is not an IPv4 or IPv6 address"),
            ("ff01::/96", "'ff01::/96' includes groups of reserved"),
            ("ff10::1", "interface-local"),
            ("ff00::/8", "interface-local"),
        ] {
            let e = err(input);
            assert!(e.contains(needle), "{input:?}: {e:?} lacks {needle:?}");
        }
    }

    #[test]
    fn ports_parse_and_reject() {
        let p = PortRange::parse(" 5000 - 5009 ").unwrap();
        assert_eq!((p.first(), p.last(), p.size()), (5000, 5009, 10));
        assert_eq!(p.to_string(), "5000-5009");
        assert_eq!(PortRange::parse("7000").unwrap().size(), 1);
        assert_eq!(PortRange::parse("1-65535").unwrap().size(), 65535);
        for (input, needle) in [
            ("", "no ports"),
            ("0-10", "'0' is not a port"),
            ("100-65536", "'65536' is not a port"),
            ("abc", "'abc' is not a port"),
            ("6000-5000", "'6000-5000': the first port is above the last"),
            ("5000-", "'' is not a port"),
        ] {
            let e = PortRange::parse(input).expect_err(input);
            assert!(e.contains(needle), "{input:?}: {e:?} lacks {needle:?}");
        }
        assert!(PortRange::new(0, 5).is_err());
    }

    #[test]
    fn draws_stay_inside_the_ranges() {
        let ports = PortRange::parse("6000-6010").unwrap();
        for (spec, seed) in [(DEFAULT_GROUPS, 1), (THESIS_GROUPS, 2), ("239.9.9.9", 3)] {
            let groups = g(spec);
            let mut rng = generator(seed);
            for _ in 0..20_000 {
                let a = draw(&mut rng, &groups, &ports);
                assert!(groups.contains(a.ip()), "{spec}: {a}");
                assert!((6000..=6010).contains(&a.port()), "{a}");
                assert!(ip4(a) & 0x7f_ffff >= 256, "{spec}: {a} aliases 224.0.0.x");
            }
        }
    }

    #[test]
    fn draws_are_uniform_over_the_union() {
        // 4 + 12 groups in two ranges of different sizes, 10 ports.
        let groups = g("239.1.0.0/30,239.2.0.0-239.2.0.11");
        let ports = PortRange::parse("5000-5009").unwrap();
        let mut rng = generator(0x1234_5678);
        let mut by_group = std::collections::HashMap::new();
        let mut by_port = [0u32; 10];
        let n = 32_000;
        for _ in 0..n {
            let a = draw(&mut rng, &groups, &ports);
            *by_group.entry(a.ip()).or_insert(0u32) += 1;
            by_port[usize::from(a.port() - 5000)] += 1;
        }
        let chi2 = |counts: &[u32]| {
            let e = f64::from(n) / counts.len() as f64;
            counts
                .iter()
                .map(|&c| (f64::from(c) - e).powi(2) / e)
                .sum::<f64>()
        };
        let groups: Vec<u32> = by_group.values().copied().collect();
        assert_eq!(groups.len(), 16);
        // 99.9 % quantiles: 37.7 for 15 degrees of freedom, 27.9 for 9.
        assert!(chi2(&groups) < 37.7, "groups {by_group:?}");
        assert!(chi2(&by_port) < 27.9, "ports {by_port:?}");
    }

    #[test]
    fn ipv6_draws_stay_in_ff18_96() {
        let groups = g(IPV6_EXAMPLE_GROUPS);
        let ports = PortRange::parse(DEFAULT_PORTS).unwrap();
        let mut rng = generator(99);
        let mut low_bits = 0u32;
        for _ in 0..10_000 {
            let a = draw(&mut rng, &groups, &ports);
            let IpAddr::V6(ip) = a.ip() else {
                panic!("{a} is IPv4")
            };
            assert_eq!(u128::from(ip) >> 32, 0xff18 << 80, "{a}");
            low_bits |= u128::from(ip) as u32;
            assert!((5000..=32767).contains(&a.port()));
        }
        assert_eq!(low_bits, u32::MAX, "every low bit varies");
    }

    #[test]
    fn never_draws_mac_aliases_of_224_0_0_x_when_others_exist() {
        let ports = PortRange::parse("5000").unwrap();
        let groups = g("239.0.0.0/24,239.1.2.0/24");
        assert_eq!(groups.drawable_size(), 256);
        let mut rng = generator(7);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..10_000 {
            let a = ip4(draw(&mut rng, &groups, &ports));
            assert_eq!(a >> 8, v4("239.1.2.0") >> 8);
            seen.insert(a);
        }
        assert_eq!(seen.len(), 256);

        // A range straddling an alias block keeps only its other side.
        let groups = g("239.127.255.250-239.128.0.5");
        for _ in 0..1000 {
            let a = ip4(draw(&mut rng, &groups, &ports));
            assert!((v4("239.127.255.250")..=v4("239.127.255.255")).contains(&a));
        }

        // Only aliases configured: they are still drawn.
        let groups = g("239.128.0.0/24");
        assert_eq!(groups.drawable_size(), 256);
        for _ in 0..1000 {
            assert!(groups.contains(draw(&mut rng, &groups, &ports).ip()));
        }
    }

    #[test]
    fn draws_follow_the_seed() {
        let groups = g(DEFAULT_GROUPS);
        let ports = PortRange::parse(DEFAULT_PORTS).unwrap();
        let run = |seed| {
            let mut rng = generator(seed);
            let addrs: Vec<_> = (0..8).map(|_| draw(&mut rng, &groups, &ports)).collect();
            (addrs, draw_comm_id(&mut rng))
        };
        assert_eq!(run(42), run(42));
        assert_ne!(run(42).0, run(43).0);
        assert_ne!(run(42).1, run(43).1);
    }

    #[test]
    fn generator_matches_values_computed_independently() {
        // Python: the first 256 BBS bits of seed 12345 (as in bbs.rs), first
        // bit most significant, as the ChaCha20 key; zero nonce and counter
        // (`cryptography`); keystream bytes 0..16 as little-endian u64s.
        let mut rng = generator(12345);
        assert_eq!(rng.next_u64(), 0xf9da_45c2_dd08_a8df);
        assert_eq!(rng.next_u64(), 0x7ad1_5259_25f5_5d0d);
    }

    #[test]
    fn one_seed_bit_changes_about_half_the_output() {
        let stream = |seed| {
            let mut out = [0u8; 256];
            generator(seed).fill_bytes(&mut out);
            out
        };
        let base_seed = 0x9e37_79b9_7f4a_7c15;
        let base = stream(base_seed);
        for bit in 0..64 {
            let other = stream(base_seed ^ (1 << bit));
            let differ: u32 = base
                .iter()
                .zip(&other)
                .map(|(a, b)| (a ^ b).count_ones())
                .sum();
            // 2048 bits: expect 1024, standard deviation 22.6.
            assert!((900..=1150).contains(&differ), "bit {bit}: {differ}");
        }
    }

    #[test]
    fn comm_ids_are_not_zero() {
        let mut rng = generator(5);
        assert!((0..1000).all(|_| draw_comm_id(&mut rng) != 0));
    }

    #[test]
    fn below_is_exact_at_the_edges() {
        let mut rng = generator(11);
        assert_eq!(below(&mut rng, 1), 0);
        for n in [2u128, 3, 1 << 64, (1 << 64) + 1, 1 << 120] {
            assert!((0..100).all(|_| below(&mut rng, n) < n));
        }
    }
}
