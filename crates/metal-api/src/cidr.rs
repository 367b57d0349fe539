//! IPv4 and IPv6 prefixes as numbers, for containment checks and the simulator's IPAM.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    pub fn bits(self) -> u8 {
        match self {
            Family::V4 => 32,
            Family::V6 => 128,
        }
    }

    /// The name metal-api uses (`IPv4`, `IPv6`).
    pub fn api_name(self) -> &'static str {
        match self {
            Family::V4 => "IPv4",
            Family::V6 => "IPv6",
        }
    }

    pub fn of(addr: IpAddr) -> Family {
        match addr {
            IpAddr::V4(_) => Family::V4,
            IpAddr::V6(_) => Family::V6,
        }
    }
}

/// A prefix such as `10.0.0.0/22`, normalised to its network address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Cidr {
    pub family: Family,
    /// Network address as a number.
    pub base: u128,
    pub len: u8,
}

pub fn addr_to_u128(addr: IpAddr) -> u128 {
    match addr {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

pub fn u128_to_addr(family: Family, value: u128) -> IpAddr {
    match family {
        Family::V4 => IpAddr::V4(Ipv4Addr::from(value as u32)),
        Family::V6 => IpAddr::V6(Ipv6Addr::from(value)),
    }
}

impl Cidr {
    pub fn size(&self) -> u128 {
        let host_bits = u32::from(self.family.bits() - self.len);
        if host_bits >= 128 {
            u128::MAX
        } else {
            1u128 << host_bits
        }
    }

    pub fn last(&self) -> u128 {
        self.base + (self.size() - 1)
    }

    pub fn contains_addr(&self, addr: IpAddr) -> bool {
        Family::of(addr) == self.family && {
            let v = addr_to_u128(addr);
            v >= self.base && v <= self.last()
        }
    }

    pub fn contains(&self, other: &Cidr) -> bool {
        other.family == self.family
            && other.len >= self.len
            && other.base >= self.base
            && other.last() <= self.last()
    }

    pub fn overlaps(&self, other: &Cidr) -> bool {
        other.family == self.family && other.base <= self.last() && self.base <= other.last()
    }

    pub fn addr(&self, value: u128) -> IpAddr {
        u128_to_addr(self.family, value)
    }
}

impl FromStr for Cidr {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (addr, len) = s
            .split_once('/')
            .ok_or_else(|| format!("{s:?} is not a CIDR (address/length)"))?;
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| format!("{s:?} is not a CIDR: bad address"))?;
        let family = Family::of(addr);
        let len: u8 = len
            .parse()
            .map_err(|_| format!("{s:?} is not a CIDR: bad length"))?;
        if len > family.bits() {
            return Err(format!(
                "{s:?} is not a CIDR: length above {}",
                family.bits()
            ));
        }
        let value = addr_to_u128(addr);
        let host_bits = u32::from(family.bits() - len);
        let mask = if host_bits >= 128 {
            0
        } else {
            !((1u128 << host_bits) - 1)
        };
        Ok(Cidr {
            family,
            base: value & mask,
            len,
        })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr(self.base), self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(s: &str) -> Cidr {
        s.parse().expect("cidr")
    }

    #[test]
    fn parses_and_normalises() {
        assert_eq!(c("127.16.1.7/16").to_string(), "127.16.0.0/16");
        assert_eq!(c("2001:db8::1/64").to_string(), "2001:db8::/64");
        assert_eq!(c("0.0.0.0/0").size(), 1u128 << 32);
        assert!("10.0.0.0".parse::<Cidr>().is_err());
        assert!("10.0.0.0/33".parse::<Cidr>().is_err());
        assert!("nonsense/8".parse::<Cidr>().is_err());
    }

    #[test]
    fn containment() {
        let net = c("127.16.0.0/16");
        assert!(net.contains(&c("127.16.4.0/22")));
        assert!(!net.contains(&c("127.15.0.0/22")));
        assert!(net.contains_addr("127.16.255.255".parse().expect("addr")));
        assert!(!net.contains_addr("127.17.0.0".parse().expect("addr")));
        assert!(!net.contains_addr("::1".parse().expect("addr")));
        assert!(c("127.16.0.0/22").overlaps(&c("127.16.3.0/24")));
        assert!(!c("127.16.0.0/22").overlaps(&c("127.16.4.0/24")));
    }
}
