//! The network interface a communicator multicasts on, chosen the way
//! `btl_tcp` chooses its interfaces: `coll_ipmc_if_include` or
//! `coll_ipmc_if_exclude`, comma-separated names or CIDR subnets.
//!
//! Rule: among the interfaces that are up, have the MULTICAST flag (a
//! loopback interface needs none) and an address of the group's family, take
//! the one with the lowest index that the include list names (when given) or
//! the exclude list does not name. With both lists empty, loopback interfaces
//! are skipped. Join and send both use the chosen interface explicitly, so
//! routes do not matter.
//!
//! For an IPv6 group, [`ipv6_source`] then picks the address to send from:
//! one whose scope covers the group's (RFC 4007: a link-local source never
//! leaves the link), that duplicate address detection has cleared.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv6Addr};

use crate::platform::os::IfAddr;

/// The MTU of interface `name`, if the kernel tells it.
pub fn mtu(name: &str) -> Option<u32> {
    crate::platform::os::interface_mtu(name).ok()
}

/// An `if_include` list naming the loopback interface by its addresses, for
/// either family.
pub const LOOPBACK: &str = "127.0.0.0/8,::1/128";

/// One item of an interface list.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Spec {
    Name(String),
    Net(IpAddr, u8),
}

/// A parsed `if_include` or `if_exclude` value, and its text for messages.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IfList(Vec<Spec>, String);

impl IfList {
    /// Parses `"eth0,10.1.0.0/16,ib0"`; an empty string is an empty list.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut specs = Vec::new();
        for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            specs.push(match item.split_once('/') {
                Some((addr, len)) => {
                    let addr: IpAddr = addr
                        .parse()
                        .map_err(|_| format!("\"{item}\" is not a CIDR subnet"))?;
                    let max = if addr.is_ipv4() { 32 } else { 128 };
                    let len: u8 = len
                        .parse()
                        .ok()
                        .filter(|&l| l <= max)
                        .ok_or_else(|| format!("\"{item}\" has a prefix length outside 0..{max}"))?;
                    Spec::Net(addr, len)
                }
                None if item.parse::<IpAddr>().is_ok() => {
                    return Err(format!(
                        "\"{item}\" is an address; give a subnet such as {item}/24 or an interface name"
                    ))
                }
                None => Spec::Name(item.to_string()),
            });
        }
        Ok(IfList(specs, text.trim().to_string()))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether an interface with this name and these addresses is named.
    fn names(&self, name: &str, addrs: &[(IpAddr, u8)]) -> bool {
        self.0.iter().any(|spec| match spec {
            Spec::Name(n) => n == name,
            Spec::Net(net, len) => addrs.iter().any(|(a, _)| in_subnet(*a, *net, *len)),
        })
    }
}

fn in_subnet(addr: IpAddr, net: IpAddr, len: u8) -> bool {
    match (addr, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

/// The interface a communicator joins its group on and sends from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chosen {
    pub name: String,
    pub index: u32,
    /// An address of the group's family on that interface; for an IPv6
    /// group the caller puts the source [`ipv6_source`] picks here.
    pub addr: IpAddr,
}

impl fmt::Display for Chosen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name, self.addr)
    }
}

/// All addresses of one interface.
struct Iface {
    index: u32,
    up: bool,
    multicast: bool,
    loopback: bool,
    addrs: Vec<(IpAddr, u8)>,
}

/// Chooses the interface for a group of the given family (see the module doc).
pub fn choose(
    entries: &[IfAddr],
    include: &IfList,
    exclude: &IfList,
    ipv6: bool,
) -> Result<Chosen, String> {
    if !include.is_empty() && !exclude.is_empty() {
        return Err(
            "coll_ipmc_if_include and coll_ipmc_if_exclude are mutually exclusive".to_string(),
        );
    }
    let mut ifaces: BTreeMap<&str, Iface> = BTreeMap::new();
    for e in entries {
        let iface = ifaces.entry(&e.name).or_insert(Iface {
            index: e.index,
            up: e.up,
            multicast: e.multicast,
            loopback: e.loopback,
            addrs: Vec::new(),
        });
        iface.addrs.extend(e.addr.map(|a| (a, e.prefix_len)));
    }
    let mut by_index: Vec<(&str, &Iface)> = ifaces.iter().map(|(n, i)| (*n, i)).collect();
    by_index.sort_by_key(|(_, i)| i.index);

    let family = if ipv6 { "IPv6" } else { "IPv4" };
    let mut seen = Vec::new();
    for (name, iface) in by_index {
        let why_not = if !include.is_empty() && !include.names(name, &iface.addrs) {
            Some("not in if_include")
        } else if exclude.names(name, &iface.addrs) {
            Some("in if_exclude")
        } else if include.is_empty() && exclude.is_empty() && iface.loopback {
            Some("loopback")
        } else if !iface.up {
            Some("down")
        } else if !iface.multicast && !iface.loopback {
            // Linux loops multicast back on a loopback interface without it.
            Some("no MULTICAST flag")
        } else {
            None
        };
        let addr = iface
            .addrs
            .iter()
            .map(|(a, _)| *a)
            .find(|a| a.is_ipv6() == ipv6);
        match (why_not, addr) {
            (None, Some(addr)) => {
                return Ok(Chosen {
                    name: name.to_string(),
                    index: iface.index,
                    addr,
                })
            }
            (None, None) => seen.push(format!("{name}: no {family} address")),
            (Some(why), _) => seen.push(format!("{name}: {why}")),
        }
    }
    let lists = match (include.is_empty(), exclude.is_empty()) {
        (false, _) => format!(" with coll_ipmc_if_include={}", include.1),
        (_, false) => format!(" with coll_ipmc_if_exclude={}", exclude.1),
        _ => String::new(),
    };
    Err(format!(
        "no interface is up, can multicast and has an {family} address{lists} ({})",
        if seen.is_empty() {
            "there are no interfaces".to_string()
        } else {
            seen.join("; ")
        }
    ))
}

/// One IPv6 address of an interface with the kernel's flags
/// (`/proc/net/if_inet6`, which unlike getifaddrs tells the flags).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct V6Addr {
    pub addr: Ipv6Addr,
    pub index: u32,
    pub flags: u32,
}

// Address flags of <linux/if_addr.h>.
const IFA_F_OPTIMISTIC: u32 = 0x04;
const IFA_F_DADFAILED: u32 = 0x08;
const IFA_F_DEPRECATED: u32 = 0x20;
const IFA_F_TENTATIVE: u32 = 0x40;

/// Parses `/proc/net/if_inet6`: per line the address (32 hex digits), the
/// interface index, prefix length, scope and flags (hex), and the name.
/// Lines it cannot read are skipped.
pub fn parse_if_inet6(text: &str) -> Vec<V6Addr> {
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 6 || f[0].len() != 32 {
                return None;
            }
            Some(V6Addr {
                addr: Ipv6Addr::from(u128::from_str_radix(f[0], 16).ok()?),
                index: u32::from_str_radix(f[1], 16).ok()?,
                flags: u32::from_str_radix(f[4], 16).ok()?,
            })
        })
        .collect()
}

/// What an address is, and the widest multicast scope it may send to
/// (RFC 4291 §2.7 scope values; unique-local addresses have global scope,
/// RFC 4193 §3.3).
fn kind(a: Ipv6Addr) -> (&'static str, u8) {
    let s = a.segments()[0];
    if a.is_loopback() {
        ("loopback", 1)
    } else if s & 0xffc0 == 0xfe80 {
        ("link-local", 2)
    } else if s & 0xffc0 == 0xfec0 {
        ("site-local", 5)
    } else if s & 0xfe00 == 0xfc00 {
        ("unique-local", 14)
    } else {
        ("global", 14)
    }
}

/// The scope of a multicast group (its fourth nibble).
pub fn group_scope(g: Ipv6Addr) -> u8 {
    (g.segments()[0] & 0xf) as u8
}

fn scope_name(scope: u8) -> String {
    match scope {
        1 => "interface-local".into(),
        2 => "link-local".into(),
        3 => "realm-local".into(),
        4 => "admin-local".into(),
        5 => "site-local".into(),
        8 => "organization-local".into(),
        14 => "global".into(),
        s => format!("scope-{s:x}"),
    }
}

/// Why the kernel will not send from an address yet, or ever.
fn unusable(v: &V6Addr) -> Option<&'static str> {
    if v.flags & IFA_F_DADFAILED != 0 {
        Some("duplicate: another host on the link has it")
    } else if v.flags & IFA_F_TENTATIVE != 0 && v.flags & IFA_F_OPTIMISTIC == 0 {
        Some("tentative: duplicate address detection has not finished")
    } else {
        None
    }
}

/// Why no address of `iface` can send to an IPv6 group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NoSource {
    pub why: String,
    /// An address that would do is still in duplicate address detection,
    /// so trying again in a moment may succeed.
    pub pending: bool,
}

/// The address of `iface` to send to `group` from: among the addresses
/// duplicate address detection has cleared, one of the narrowest scope that
/// covers the group's (so a link-local group is sent from the link-local
/// address), not deprecated if possible. `addrs` may hold other interfaces'
/// addresses too.
pub fn ipv6_source(
    iface: &Chosen,
    addrs: &[V6Addr],
    group: Ipv6Addr,
) -> Result<Ipv6Addr, NoSource> {
    let own: Vec<&V6Addr> = addrs.iter().filter(|v| v.index == iface.index).collect();
    let needed = group_scope(group);
    let best = own
        .iter()
        .filter(|v| unusable(v).is_none() && kind(v.addr).1 >= needed)
        .min_by_key(|v| (kind(v.addr).1, v.flags & IFA_F_DEPRECATED != 0));
    if let Some(v) = best {
        return Ok(v.addr);
    }
    let pending = own.iter().any(|v| {
        v.flags & IFA_F_DADFAILED == 0 && unusable(v).is_some() && kind(v.addr).1 >= needed
    });
    let has = if own.is_empty() {
        "none".to_string()
    } else {
        own.iter()
            .map(|v| match unusable(v) {
                Some(why) => format!("{} {} ({why})", kind(v.addr).0, v.addr),
                None => format!("{} {}", kind(v.addr).0, v.addr),
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let widest = own
        .iter()
        .filter(|v| unusable(v).is_none())
        .map(|v| kind(v.addr).1)
        .filter(|&s| s >= 2)
        .max();
    let instead = match widest {
        Some(w) => format!(
            "; groups of {} scope would work: coll_ipmc_group_range=ff1{:x}::/96",
            scope_name(w),
            w.min(14)
        ),
        None => String::new(),
    };
    Err(NoSource {
        why: format!(
            "the group {group} has {} scope, and {} has no IPv6 address of that scope or wider \
             that the kernel may send from (its IPv6 addresses: {has}){instead}",
            scope_name(needed),
            iface.name
        ),
        pending,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, index: u32, flags: &str, addr: Option<&str>, len: u8) -> IfAddr {
        IfAddr {
            name: name.into(),
            index,
            up: flags.contains('u'),
            multicast: flags.contains('m'),
            loopback: flags.contains('l'),
            addr: addr.map(|a| a.parse().unwrap()),
            prefix_len: len,
        }
    }

    fn host() -> Vec<IfAddr> {
        vec![
            entry("lo", 1, "uml", Some("127.0.0.1"), 8),
            entry("lo", 1, "uml", Some("::1"), 128),
            entry("eth0", 2, "um", None, 0),
            entry("eth0", 2, "um", Some("10.1.2.3"), 24),
            entry("eth1", 3, "u", Some("10.9.0.1"), 16),
            entry("ib0", 4, "um", Some("192.168.7.7"), 24),
            entry("ib0", 4, "um", Some("fe80::1"), 64),
            entry("eth2", 5, "m", Some("10.3.0.1"), 16),
        ]
    }

    fn pick(include: &str, exclude: &str, ipv6: bool) -> Result<String, String> {
        choose(
            &host(),
            &IfList::parse(include)?,
            &IfList::parse(exclude)?,
            ipv6,
        )
        .map(|c| format!("{}#{} {}", c.name, c.index, c.addr))
    }

    #[test]
    fn default_is_the_first_non_loopback_multicast_interface() {
        assert_eq!(pick("", "", false).unwrap(), "eth0#2 10.1.2.3");
        assert_eq!(pick("", "", true).unwrap(), "ib0#4 fe80::1");
    }

    #[test]
    fn include_by_name_or_subnet() {
        assert_eq!(pick("lo", "", false).unwrap(), "lo#1 127.0.0.1");
        assert_eq!(pick(" ib0 , lo ", "", false).unwrap(), "lo#1 127.0.0.1");
        assert_eq!(
            pick("192.168.0.0/16", "", false).unwrap(),
            "ib0#4 192.168.7.7"
        );
        assert_eq!(pick("lo", "", true).unwrap(), "lo#1 ::1");
    }

    #[test]
    fn a_loopback_interface_needs_no_multicast_flag() {
        let mut host = host();
        for e in host.iter_mut().filter(|e| e.loopback) {
            e.multicast = false;
        }
        let lo = IfList::parse(LOOPBACK).unwrap();
        let none = IfList::default();
        let chosen = choose(&host, &lo, &none, false).unwrap();
        assert_eq!(
            (chosen.name.as_str(), chosen.addr),
            ("lo", "127.0.0.1".parse().unwrap())
        );
        assert_eq!(
            choose(&host, &lo, &none, true).unwrap().addr,
            "::1".parse::<IpAddr>().unwrap()
        );
    }

    #[test]
    fn exclude_skips_named_interfaces_and_loopback_stays_eligible() {
        assert_eq!(pick("", "eth0", false).unwrap(), "lo#1 127.0.0.1");
        assert_eq!(
            pick("", "127.0.0.0/8,10.1.0.0/16", false).unwrap(),
            "ib0#4 192.168.7.7"
        );
    }

    #[test]
    fn unusable_interfaces_are_explained() {
        let err = pick("eth1,eth2,nosuch", "", false).unwrap_err();
        assert!(err.contains("eth1: no MULTICAST flag"), "{err}");
        assert!(err.contains("eth2: down"), "{err}");
        assert!(err.contains("eth0: not in if_include"), "{err}");
        assert!(err.contains("if_include=eth1,eth2,nosuch"), "{err}");
        let err = pick("eth0", "", true).unwrap_err();
        assert!(err.contains("eth0: no IPv6 address"), "{err}");
        let err = choose(&[], &IfList::default(), &IfList::default(), false).unwrap_err();
        assert!(err.contains("there are no interfaces"), "{err}");
    }

    #[test]
    fn bad_lists_are_refused() {
        assert!(pick("eth0", "lo", false)
            .unwrap_err()
            .contains("mutually exclusive"));
        for bad in ["10.0.0.0/33", "10.0.0/8", "10.1.2.3", "fe80::/129", "x/8"] {
            let err = IfList::parse(bad).unwrap_err();
            assert!(err.contains(bad), "{bad}: {err}");
        }
        assert!(IfList::parse(" , ").unwrap().is_empty());
    }

    fn v6(text: &str) -> Vec<V6Addr> {
        parse_if_inet6(text)
    }

    fn eth0() -> Chosen {
        Chosen {
            name: "eth0".into(),
            index: 4,
            addr: "fe80::1".parse().unwrap(),
        }
    }

    const LINK_LOCAL_ONLY: &str = "\
fe800000000000000000000000000001 04 40 20 80     eth0
00000000000000000000000000000001 01 80 10 80       lo
fd000000000000000000000000000009 05 40 00 80     eth1
";

    #[test]
    fn if_inet6_lines_are_read() {
        let a = v6(LINK_LOCAL_ONLY);
        assert_eq!(a.len(), 3);
        assert_eq!(
            a[0],
            V6Addr {
                addr: "fe80::1".parse().unwrap(),
                index: 4,
                flags: 0x80
            }
        );
        assert_eq!(a[2].index, 5);
        assert!(v6("garbage\n\nfe80 1 2 3 4 x\n").is_empty());
    }

    fn source(text: &str, group: &str) -> Result<Ipv6Addr, NoSource> {
        ipv6_source(&eth0(), &v6(text), group.parse().unwrap())
    }

    #[test]
    fn link_local_groups_are_sent_from_the_link_local_address() {
        for g in ["ff12::1", "ff02::1:3"] {
            assert_eq!(source(LINK_LOCAL_ONLY, g).unwrap().to_string(), "fe80::1");
        }
        let with_ula =
            format!("{LINK_LOCAL_ONLY}fd000000000000000000000000000002 04 40 00 80 eth0\n");
        assert_eq!(source(&with_ula, "ff12::1").unwrap().to_string(), "fe80::1");
        assert_eq!(source(&with_ula, "ff15::1").unwrap().to_string(), "fd00::2");
        assert_eq!(source(&with_ula, "ff1e::1").unwrap().to_string(), "fd00::2");
    }

    #[test]
    fn wider_scopes_need_a_wider_address_and_say_what_would_work() {
        for (g, scope) in [("ff15::1", "site-local"), ("ff18::1", "organization-local")] {
            let e = source(LINK_LOCAL_ONLY, g).unwrap_err();
            assert!(!e.pending);
            assert!(
                e.why.contains(&format!("{g} has {scope} scope")),
                "{}",
                e.why
            );
            assert!(
                e.why.contains("addresses: link-local fe80::1)"),
                "{}",
                e.why
            );
            assert!(
                e.why
                    .contains("link-local scope would work: coll_ipmc_group_range=ff12::/96"),
                "{}",
                e.why
            );
        }
        let site = "fec00000000000000000000000000001 04 40 40 80 eth0\n";
        assert_eq!(source(site, "ff15::1").unwrap().to_string(), "fec0::1");
        let e = source(site, "ff18::1").unwrap_err();
        assert!(
            e.why.contains("coll_ipmc_group_range=ff15::/96"),
            "{}",
            e.why
        );
    }

    #[test]
    fn addresses_in_duplicate_address_detection_are_not_used() {
        let tentative = "fe800000000000000000000000000001 04 40 20 c0 eth0\n";
        let e = source(tentative, "ff12::1").unwrap_err();
        assert!(e.pending);
        assert!(e.why.contains("fe80::1 (tentative"), "{}", e.why);
        assert!(!e.why.contains("would work"), "{}", e.why);
        let optimistic = "fe800000000000000000000000000001 04 40 20 c4 eth0\n";
        assert!(source(optimistic, "ff12::1").is_ok());
        let failed = "fe800000000000000000000000000001 04 40 20 c8 eth0\n";
        let e = source(failed, "ff12::1").unwrap_err();
        assert!(!e.pending);
        assert!(e.why.contains("duplicate: another host"), "{}", e.why);
        let e = source("", "ff12::1").unwrap_err();
        assert!(e.why.contains("addresses: none"), "{}", e.why);
    }

    #[test]
    fn subnets_match_by_prefix() {
        let a: IpAddr = "10.1.2.3".parse().unwrap();
        assert!(in_subnet(a, "10.0.0.0".parse().unwrap(), 8));
        assert!(in_subnet(a, "0.0.0.0".parse().unwrap(), 0));
        assert!(!in_subnet(a, "10.1.3.0".parse().unwrap(), 24));
        assert!(!in_subnet(a, "::".parse().unwrap(), 0));
        let b: IpAddr = "fd00::5".parse().unwrap();
        assert!(in_subnet(b, "fd00::".parse().unwrap(), 64));
        assert!(in_subnet(b, b, 128));
    }
}
