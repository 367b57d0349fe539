//! The simulator's IPAM: prefixes, child prefixes carved from super networks (first free aligned
//! block), and addresses handed out lowest first. IPv4 prefixes reserve their network and
//! broadcast addresses, as go-ipam does.

use metal_api::cidr::{Cidr, Family, addr_to_u128};
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
    parent: Option<Cidr>,
    children: BTreeSet<Cidr>,
    used: BTreeSet<u128>,
}

#[derive(Debug, Default, Clone)]
pub struct Ipam {
    prefixes: BTreeMap<Cidr, PrefixRecord>,
}

impl Ipam {
    pub fn create_prefix(&mut self, cidr: Cidr) -> Result<(), IpamError> {
        if self.prefixes.contains_key(&cidr) {
            return Err(IpamError::PrefixExists(cidr.to_string()));
        }
        self.prefixes.insert(cidr, PrefixRecord::default());
        Ok(())
    }

    fn record(&self, cidr: &Cidr) -> Result<&PrefixRecord, IpamError> {
        self.prefixes
            .get(cidr)
            .ok_or_else(|| IpamError::PrefixNotFound(cidr.to_string()))
    }

    fn record_mut(&mut self, cidr: &Cidr) -> Result<&mut PrefixRecord, IpamError> {
        self.prefixes
            .get_mut(cidr)
            .ok_or_else(|| IpamError::PrefixNotFound(cidr.to_string()))
    }

    /// The first free aligned block of length `len` inside `parent`.
    pub fn acquire_child(&mut self, parent: Cidr, len: u8) -> Result<Cidr, IpamError> {
        let record = self.record(&parent)?;
        let none_left = || IpamError::NoChildPrefix {
            parent: parent.to_string(),
            len,
        };
        if len < parent.len || len > parent.family.bits() {
            return Err(none_left());
        }
        let block = Cidr {
            family: parent.family,
            base: parent.base,
            len,
        }
        .size();
        let mut base = parent.base;
        let child = loop {
            let candidate = Cidr {
                family: parent.family,
                base,
                len,
            };
            if !parent.contains(&candidate) {
                return Err(none_left());
            }
            let clash = record.children.iter().any(|c| c.overlaps(&candidate))
                || record
                    .used
                    .iter()
                    .any(|a| candidate.contains_addr(candidate.addr(*a)));
            if !clash {
                break candidate;
            }
            base = base.checked_add(block).ok_or_else(none_left)?;
        };
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
    pub fn release_prefix(&mut self, cidr: Cidr) -> Result<(), IpamError> {
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

    fn usable(cidr: &Cidr) -> (u128, u128) {
        if cidr.family == Family::V4 && cidr.len < 31 {
            (cidr.base + 1, cidr.last() - 1)
        } else {
            (cidr.base, cidr.last())
        }
    }

    /// The lowest free address of the prefix.
    pub fn acquire_ip(&mut self, cidr: Cidr) -> Result<IpAddr, IpamError> {
        let record = self.record(&cidr)?;
        let (first, last) = Self::usable(&cidr);
        let mut candidate = first;
        // Bounded: at most |used| + 1 steps, since each step skips one used address.
        for used in record.used.range(first..=last) {
            if *used != candidate {
                break;
            }
            candidate += 1;
        }
        if candidate > last {
            return Err(IpamError::NoIpsLeft(cidr.to_string()));
        }
        self.record_mut(&cidr)?.used.insert(candidate);
        Ok(cidr.addr(candidate))
    }

    pub fn acquire_specific(&mut self, cidr: Cidr, ip: IpAddr) -> Result<(), IpamError> {
        if !cidr.contains_addr(ip) {
            return Err(IpamError::NotInPrefix {
                ip: ip.to_string(),
                prefix: cidr.to_string(),
            });
        }
        let record = self.record_mut(&cidr)?;
        if !record.used.insert(addr_to_u128(ip)) {
            return Err(IpamError::AlreadyAllocated);
        }
        Ok(())
    }

    pub fn release_ip(&mut self, cidr: Cidr, ip: IpAddr) -> Result<(), IpamError> {
        let record = self.record_mut(&cidr)?;
        if !record.used.remove(&addr_to_u128(ip)) {
            return Err(IpamError::NotAllocated(ip.to_string()));
        }
        Ok(())
    }

    pub fn used_count(&self, cidr: &Cidr) -> u64 {
        self.prefixes.get(cidr).map_or(0, |r| r.used.len() as u64)
    }

    pub fn child_count(&self, cidr: &Cidr) -> u64 {
        self.prefixes
            .get(cidr)
            .map_or(0, |r| r.children.len() as u64)
    }

    /// Usable addresses of a prefix (network and broadcast excluded for IPv4).
    pub fn available_count(cidr: &Cidr) -> u64 {
        let (first, last) = Self::usable(cidr);
        u64::try_from(last.saturating_sub(first).saturating_add(1)).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(s: &str) -> Cidr {
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
