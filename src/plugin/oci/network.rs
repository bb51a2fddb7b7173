//! A network as the platform writes it (`10.96.0.0/12`, `fd00:10::/64`, or one address): where it
//! allows registries to send mimeo on private addresses. Pure parsing and matching.

use std::net::IpAddr;

/// An address range: an address and how many of its leading bits must match.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Network {
    address: IpAddr,
    prefix: u8,
}

/// Why a network argument does not read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a network: write an address with a prefix length, as 10.96.0.0/12 or fd00::/8")]
pub struct NetworkError(String);

impl std::str::FromStr for Network {
    type Err = NetworkError;

    fn from_str(text: &str) -> Result<Network, NetworkError> {
        let wrong = || NetworkError(text.to_owned());
        let (address, prefix) = match text.trim().split_once('/') {
            Some((address, prefix)) => (address, Some(prefix)),
            None => (text.trim(), None),
        };
        let address: IpAddr = address.parse().map_err(|_| wrong())?;
        let bits = if address.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(prefix) => prefix
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= bits)
                .ok_or_else(wrong)?,
            None => bits,
        };
        Ok(Network { address, prefix })
    }
}

impl std::fmt::Display for Network {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.address, self.prefix)
    }
}

impl Network {
    /// Whether `ip` is in the network; an IPv4-mapped IPv6 address counts as its IPv4 address.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        match (self.address, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.prefix)).unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(self.prefix)).unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn networks_read_and_match() {
        let ip = |text: &str| text.parse::<IpAddr>().unwrap();
        for (network, inside, outside) in [
            ("10.96.0.0/12", "10.100.3.4", "10.112.0.1"),
            ("10.0.0.7", "10.0.0.7", "10.0.0.8"),
            ("192.168.0.0/16", "::ffff:192.168.9.9", "192.169.0.1"),
            ("0.0.0.0/0", "203.0.113.1", "::1"),
            ("fd00:10::/32", "fd00:10:0:1::5", "fd00:11::1"),
            ("::/0", "fe80::1", "10.0.0.1"),
        ] {
            let network: Network = network.parse().unwrap();
            assert!(network.contains(ip(inside)), "{network} {inside}");
            assert!(!network.contains(ip(outside)), "{network} {outside}");
        }
        for wrong in [
            "10.0.0.0/33",
            "fd00::/129",
            "10.0.0/8",
            "host.example",
            "10.0.0.0/",
            "",
        ] {
            assert!(wrong.parse::<Network>().is_err(), "{wrong}");
        }
        assert_eq!(
            "10.1.0.0/16".parse::<Network>().unwrap().to_string(),
            "10.1.0.0/16"
        );
    }
}
