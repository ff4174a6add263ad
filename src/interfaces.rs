//! The network interface a communicator multicasts on, chosen the way
//! `btl_tcp` chooses its interfaces: `coll_ipmc_if_include` or
//! `coll_ipmc_if_exclude`, comma-separated names or CIDR subnets.
//!
//! Rule: among the interfaces that are up, have the MULTICAST flag and an
//! address of the group's family, take the one with the lowest index that the
//! include list names (when given) or the exclude list does not name. With
//! both lists empty, loopback interfaces are skipped. Join and send both use
//! the chosen interface explicitly, so routes do not matter.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

use crate::ffi::IfAddr;

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
    /// An address of the group's family on that interface.
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
        } else if !iface.multicast {
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
