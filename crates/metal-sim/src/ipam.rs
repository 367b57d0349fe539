//! The simulator's IPAM: prefixes, child prefixes carved from super networks (first free aligned
//! block), and addresses handed out lowest first. IPv4 prefixes reserve their network and
//! broadcast addresses, as go-ipam does.

use ipnet::IpNet;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IpamError {
    #[error("prefix {0} not found")]
    PrefixNotFound(String),
    #[error("prefix {0} already exists")]
    PrefixExists(String),
    #[error("no more child prefixes of length {len} in {parent}")]
    NoChildPrefix { parent: String, len: u8 },
    #[error("prefix {0} has ips, delete prefix not possible")]
    PrefixHasIps(String),
    #[error("prefix {0} has child prefixes, delete prefix not possible")]
    PrefixHasChildren(String),
    #[error("no ips left in {0}")]
    NoIpsLeft(String),
    #[error("ip {ip} not in prefix {prefix}")]
    NotInPrefix { ip: String, prefix: String },
    #[error("ip already allocated")]
    AlreadyAllocated,
    #[error("ip {0} is not allocated")]
    NotAllocated(String),
}

#[derive(Debug, Default, Clone)]
struct PrefixRecord {
    parent: Option<IpNet>,
    children: BTreeSet<IpNet>,
    used: BTreeSet<IpAddr>,
}

/// Prefixes by their network (`10.0.0.0/22`, never `10.0.0.1/22`).
#[derive(Debug, Default, Clone)]
pub struct Ipam {
    prefixes: BTreeMap<IpNet, PrefixRecord>,
}

/// Do two prefixes share an address?
fn overlaps(a: &IpNet, b: &IpNet) -> bool {
    a.contains(&b.network()) || b.contains(&a.network())
}

impl Ipam {
    pub fn create_prefix(&mut self, cidr: IpNet) -> Result<(), IpamError> {
        let cidr = cidr.trunc();
        if self.prefixes.contains_key(&cidr) {
            return Err(IpamError::PrefixExists(cidr.to_string()));
        }
        self.prefixes.insert(cidr, PrefixRecord::default());
        Ok(())
    }

    fn record(&self, cidr: &IpNet) -> Result<&PrefixRecord, IpamError> {
        self.prefixes
            .get(cidr)
            .ok_or_else(|| IpamError::PrefixNotFound(cidr.to_string()))
    }

    fn record_mut(&mut self, cidr: &IpNet) -> Result<&mut PrefixRecord, IpamError> {
        self.prefixes
            .get_mut(cidr)
            .ok_or_else(|| IpamError::PrefixNotFound(cidr.to_string()))
    }

    /// The first free aligned block of length `len` inside `parent`.
    pub fn acquire_child(&mut self, parent: IpNet, len: u8) -> Result<IpNet, IpamError> {
        let record = self.record(&parent)?;
        let none_left = || IpamError::NoChildPrefix {
            parent: parent.to_string(),
            len,
        };
        let mut candidates = parent.subnets(len).map_err(|_| none_left())?;
        let child = candidates
            .find(|candidate| {
                !record.children.iter().any(|c| overlaps(c, candidate))
                    && record
                        .used
                        .range(candidate.network()..=candidate.broadcast())
                        .next()
                        .is_none()
            })
            .ok_or_else(none_left)?;
        self.record_mut(&parent)?.children.insert(child);
        self.prefixes.insert(
            child,
            PrefixRecord {
                parent: Some(parent),
                ..Default::default()
            },
        );
        Ok(child)
    }

    /// Releases a prefix; refused while it holds addresses or child prefixes.
    pub fn release_prefix(&mut self, cidr: IpNet) -> Result<(), IpamError> {
        let record = self.record(&cidr)?;
        if !record.used.is_empty() {
            return Err(IpamError::PrefixHasIps(cidr.to_string()));
        }
        if !record.children.is_empty() {
            return Err(IpamError::PrefixHasChildren(cidr.to_string()));
        }
        if let Some(parent) = record.parent
            && let Some(p) = self.prefixes.get_mut(&parent)
        {
            p.children.remove(&cidr);
        }
        self.prefixes.remove(&cidr);
        Ok(())
    }

    /// The lowest free address of the prefix. ipnet's hosts leave out an IPv4 prefix's
    /// network and broadcast addresses (below /31), as go-ipam does.
    pub fn acquire_ip(&mut self, cidr: IpNet) -> Result<IpAddr, IpamError> {
        let record = self.record(&cidr)?;
        let free = cidr
            .hosts()
            .find(|a| !record.used.contains(a))
            .ok_or_else(|| IpamError::NoIpsLeft(cidr.to_string()))?;
        self.record_mut(&cidr)?.used.insert(free);
        Ok(free)
    }

    pub fn acquire_specific(&mut self, cidr: IpNet, ip: IpAddr) -> Result<(), IpamError> {
        if !cidr.contains(&ip) {
            return Err(IpamError::NotInPrefix {
                ip: ip.to_string(),
                prefix: cidr.to_string(),
            });
        }
        let record = self.record_mut(&cidr)?;
        if !record.used.insert(ip) {
            return Err(IpamError::AlreadyAllocated);
        }
        Ok(())
    }

    pub fn release_ip(&mut self, cidr: IpNet, ip: IpAddr) -> Result<(), IpamError> {
        let record = self.record_mut(&cidr)?;
        if !record.used.remove(&ip) {
            return Err(IpamError::NotAllocated(ip.to_string()));
        }
        Ok(())
    }

    pub fn used_count(&self, cidr: &IpNet) -> u64 {
        self.prefixes.get(cidr).map_or(0, |r| r.used.len() as u64)
    }

    pub fn child_count(&self, cidr: &IpNet) -> u64 {
        self.prefixes
            .get(cidr)
            .map_or(0, |r| r.children.len() as u64)
    }

    /// Usable addresses of a prefix (network and broadcast excluded for IPv4 below /31).
    pub fn available_count(cidr: &IpNet) -> u64 {
        let host_bits = u32::from(cidr.max_prefix_len() - cidr.prefix_len());
        let all = 1u128.checked_shl(host_bits).unwrap_or(u128::MAX);
        let usable = match cidr {
            IpNet::V4(_) if cidr.prefix_len() < 31 => all - 2,
            _ => all,
        };
        u64::try_from(usable).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(s: &str) -> IpNet {
        s.parse().expect("cidr")
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    #[test]
    fn children_are_first_free_aligned_blocks() {
        let mut ipam = Ipam::default();
        let sup = c("127.16.0.0/16");
        ipam.create_prefix(sup).expect("create");
        let a = ipam.acquire_child(sup, 22).expect("first");
        let b = ipam.acquire_child(sup, 22).expect("second");
        assert_eq!(
            (a.to_string(), b.to_string()),
            ("127.16.0.0/22".into(), "127.16.4.0/22".into())
        );
        ipam.release_prefix(a).expect("release");
        assert_eq!(
            ipam.acquire_child(sup, 22).expect("reuse"),
            a,
            "released blocks are handed out again"
        );
        assert_eq!(ipam.child_count(&sup), 2);
        assert_eq!(
            ipam.release_prefix(sup),
            Err(IpamError::PrefixHasChildren("127.16.0.0/16".into()))
        );
    }

    #[test]
    fn super_network_runs_out() {
        let mut ipam = Ipam::default();
        let sup = c("127.16.0.0/23");
        ipam.create_prefix(sup).expect("create");
        ipam.acquire_child(sup, 24).expect("1");
        ipam.acquire_child(sup, 24).expect("2");
        assert!(matches!(
            ipam.acquire_child(sup, 24),
            Err(IpamError::NoChildPrefix { .. })
        ));
    }

    #[test]
    fn addresses_lowest_first_without_network_and_broadcast() {
        let mut ipam = Ipam::default();
        let net = c("127.16.0.0/30");
        ipam.create_prefix(net).expect("create");
        assert_eq!(ipam.acquire_ip(net).expect("1"), ip("127.16.0.1"));
        assert_eq!(ipam.acquire_ip(net).expect("2"), ip("127.16.0.2"));
        assert_eq!(
            ipam.acquire_ip(net),
            Err(IpamError::NoIpsLeft("127.16.0.0/30".into()))
        );
        ipam.release_ip(net, ip("127.16.0.1")).expect("release");
        assert_eq!(ipam.acquire_ip(net).expect("reuse"), ip("127.16.0.1"));
        assert_eq!(Ipam::available_count(&net), 2);
    }

    #[test]
    fn specific_addresses_and_refusals() {
        let mut ipam = Ipam::default();
        let net = c("127.100.0.0/24");
        ipam.create_prefix(net).expect("create");
        ipam.acquire_specific(net, ip("127.100.0.1"))
            .expect("specific");
        assert_eq!(
            ipam.acquire_specific(net, ip("127.100.0.1")),
            Err(IpamError::AlreadyAllocated)
        );
        assert!(matches!(
            ipam.acquire_specific(net, ip("127.101.0.1")),
            Err(IpamError::NotInPrefix { .. })
        ));
        assert_eq!(
            ipam.acquire_ip(net).expect("skips the taken one"),
            ip("127.100.0.2")
        );
        assert_eq!(
            ipam.release_prefix(net),
            Err(IpamError::PrefixHasIps("127.100.0.0/24".into()))
        );
    }

    #[test]
    fn ipv6_works_too() {
        let mut ipam = Ipam::default();
        let sup = c("fd00:10::/64");
        ipam.create_prefix(sup).expect("create");
        let child = ipam.acquire_child(sup, 96).expect("child");
        assert_eq!(child.to_string(), "fd00:10::/96");
        assert_eq!(ipam.acquire_ip(child).expect("ip"), ip("fd00:10::"));
    }
}
