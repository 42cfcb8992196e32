//! Address checks (SSRF): which IP addresses a tool may never reach unless a
//! grant names them exactly. [`classify`] says what is risky about an address
//! ([`AddrRisk`]); [`check_addr`] applies the one exception, which never
//! covers an unspecified address (`0.0.0.0/8`, `::`, the forms that embed
//! one): a connection to `0.0.0.0` or `::` goes to this host, to whatever
//! listens there, so no grant may name one.
//!
//! The check runs on the address actually connected, after name resolution,
//! and also on an address literal before any lookup (a host that *denotes* a
//! refused address, in whatever spelling, is refused).
//!
//! Refused, for IPv4: `0.0.0.0/8`, `10/8`, `100.64/10` (CGNAT), `127/8`,
//! `169.254/16`, `172.16/12`, `192.0.0/24`, `192.0.2/24`, `192.88.99/24`,
//! `192.168/16`, `198.18/15`, `198.51.100/24`, `203.0.113/24`, `224/4`,
//! `240/4`, `255.255.255.255`, and the cloud metadata endpoints
//! `169.254.169.254`, `100.100.100.200` and `168.63.129.16`.
//!
//! For IPv6: everything outside global unicast `2000::/3`, which covers `::`,
//! `::1`, `fc00::/7` (with `fd00:ec2::254`), `fe80::/10`, `fec0::/10`,
//! `ff00::/8` and `100::/64`; inside it, `2001::/23` (IETF special purpose,
//! with Teredo), `2001:db8::/32` and `3fff::/20` (documentation). IPv6 forms
//! that embed an IPv4 address are judged by that address: NAT64
//! (`64:ff9b::/96`) and 6to4 (`2002::/16`). IPv4-mapped (`::ffff:a.b.c.d`)
//! and IPv4-compatible (`::a.b.c.d`, deprecated) forms are always refused,
//! whatever they embed (named by what they embed when that is refused too):
//! an IPv4 destination is reached, and granted, as IPv4. The local-use
//! NAT64 prefix `64:ff9b:1::/48` is refused too.

use crate::decision::Refusal;
use crate::grant::{Grant, HostPattern};
use crate::host::Host;
use serde::Serialize;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why an address is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum AddrClass {
    /// `0.0.0.0/8`, `::`.
    Unspecified,
    /// `127.0.0.0/8`, `::1`.
    Loopback,
    /// `10/8`, `172.16/12`, `192.168/16`, `fc00::/7`, `fec0::/10`.
    Private,
    /// `169.254/16`, `fe80::/10`.
    LinkLocal,
    /// `100.64/10`, the shared address space of carrier-grade NAT.
    SharedCgnat,
    /// `224/4`, `ff00::/8`.
    Multicast,
    /// `255.255.255.255`.
    Broadcast,
    /// `192.0.2/24`, `198.51.100/24`, `203.0.113/24`, `2001:db8::/32`,
    /// `3fff::/20`.
    Documentation,
    /// `198.18/15`.
    Benchmarking,
    /// A cloud metadata endpoint: `169.254.169.254`, `fd00:ec2::254`,
    /// `100.100.100.200`, `168.63.129.16`.
    CloudMetadata,
    /// Reserved or special-purpose: `192.0.0/24`, `192.88.99/24`, `240/4`,
    /// IPv6 outside `2000::/3`, `2001::/23`, IPv4-mapped and -compatible
    /// IPv6 (of a public IPv4 address), local-use NAT64.
    Reserved,
}

impl AddrClass {
    /// A short description: "a loopback address".
    pub fn describe(self) -> &'static str {
        match self {
            AddrClass::Unspecified => "an unspecified address",
            AddrClass::Loopback => "a loopback address",
            AddrClass::Private => "a private address",
            AddrClass::LinkLocal => "a link-local address",
            AddrClass::SharedCgnat => "a shared (CGNAT) address",
            AddrClass::Multicast => "a multicast address",
            AddrClass::Broadcast => "the broadcast address",
            AddrClass::Documentation => "a documentation address",
            AddrClass::Benchmarking => "a benchmarking address",
            AddrClass::CloudMetadata => "a cloud metadata endpoint",
            AddrClass::Reserved => "a reserved address",
        }
    }
}

/// How an IPv6 address carries an IPv4 address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Embedding {
    /// `::ffff:a.b.c.d`.
    Ipv4Mapped,
    /// `::a.b.c.d` (deprecated).
    Ipv4Compatible,
    /// `64:ff9b::a.b.c.d` (NAT64 well-known prefix).
    Nat64,
    /// `2002:AABB:CCDD::/48` (6to4).
    SixToFour,
}

impl Embedding {
    fn describe(self) -> &'static str {
        match self {
            Embedding::Ipv4Mapped => "IPv4-mapped",
            Embedding::Ipv4Compatible => "IPv4-compatible",
            Embedding::Nat64 => "NAT64",
            Embedding::SixToFour => "6to4",
        }
    }
}

/// What is risky about an address: its class, and the IPv4 address it
/// embeds, if any (an IPv4-mapped or -compatible form of a public address
/// is refused for its form: its class is then
/// [`AddrClass::Reserved`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct AddrRisk {
    /// The class of the address: of the embedded IPv4 address when that
    /// is refused, else of the address itself.
    pub class: AddrClass,
    /// The embedded IPv4 address and how it is embedded.
    pub embedded: Option<(Embedding, Ipv4Addr)>,
}

impl fmt::Display for AddrRisk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.embedded {
            None => f.write_str(self.class.describe()),
            // The form is refused, not what it embeds.
            Some((form, v4)) if classify_v4(v4).is_none() => write!(
                f,
                "{} form of {v4}, refused whatever it embeds",
                form.describe()
            ),
            Some((form, v4)) => write!(
                f,
                "{} form of {v4}, {}",
                form.describe(),
                self.class.describe()
            ),
        }
    }
}

/// What is risky about `addr`, or `None` for an ordinary public address.
pub fn classify(addr: IpAddr) -> Option<AddrRisk> {
    match addr {
        IpAddr::V4(a) => classify_v4(a).map(|class| AddrRisk {
            class,
            embedded: None,
        }),
        IpAddr::V6(a) => classify_v6(a),
    }
}

/// True when `addr` is in `net/len`.
fn in_v4(addr: u32, net: [u8; 4], len: u32) -> bool {
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    addr & mask == u32::from_be_bytes(net) & mask
}

fn in_v6(addr: u128, net: Ipv6Addr, len: u32) -> bool {
    let mask = if len == 0 {
        0
    } else {
        u128::MAX << (128 - len)
    };
    addr & mask == u128::from(net) & mask
}

fn classify_v4(a: Ipv4Addr) -> Option<AddrClass> {
    const METADATA: [[u8; 4]; 3] = [
        [169, 254, 169, 254],
        [100, 100, 100, 200],
        [168, 63, 129, 16],
    ];
    const RANGES: [([u8; 4], u32, AddrClass); 15] = [
        ([0, 0, 0, 0], 8, AddrClass::Unspecified),
        ([10, 0, 0, 0], 8, AddrClass::Private),
        ([100, 64, 0, 0], 10, AddrClass::SharedCgnat),
        ([127, 0, 0, 0], 8, AddrClass::Loopback),
        ([169, 254, 0, 0], 16, AddrClass::LinkLocal),
        ([172, 16, 0, 0], 12, AddrClass::Private),
        ([192, 0, 0, 0], 24, AddrClass::Reserved),
        ([192, 0, 2, 0], 24, AddrClass::Documentation),
        ([192, 88, 99, 0], 24, AddrClass::Reserved),
        ([192, 168, 0, 0], 16, AddrClass::Private),
        ([198, 18, 0, 0], 15, AddrClass::Benchmarking),
        ([198, 51, 100, 0], 24, AddrClass::Documentation),
        ([203, 0, 113, 0], 24, AddrClass::Documentation),
        ([224, 0, 0, 0], 4, AddrClass::Multicast),
        ([240, 0, 0, 0], 4, AddrClass::Reserved),
    ];
    if a == Ipv4Addr::BROADCAST {
        return Some(AddrClass::Broadcast);
    }
    if METADATA.contains(&a.octets()) {
        return Some(AddrClass::CloudMetadata);
    }
    let n = u32::from(a);
    RANGES
        .iter()
        .find(|(net, len, _)| in_v4(n, *net, *len))
        .map(|(_, _, class)| *class)
}

fn classify_v6(a: Ipv6Addr) -> Option<AddrRisk> {
    let plain = |class| {
        Some(AddrRisk {
            class,
            embedded: None,
        })
    };
    // An embedded IPv4 address is judged as itself.
    let embedded = |form, v4: Ipv4Addr| {
        classify_v4(v4).map(|class| AddrRisk {
            class,
            embedded: Some((form, v4)),
        })
    };
    let n = u128::from(a);
    let low32 = Ipv4Addr::from((n & 0xffff_ffff) as u32);

    if a == Ipv6Addr::UNSPECIFIED {
        return plain(AddrClass::Unspecified);
    }
    if a == Ipv6Addr::LOCALHOST {
        return plain(AddrClass::Loopback);
    }
    if a == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254) {
        return plain(AddrClass::CloudMetadata);
    }
    if in_v6(n, Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0, 0), 96) {
        // Refused even when what it embeds is public (only a grant of this
        // exact form unlocks it).
        return embedded(Embedding::Ipv4Mapped, low32).or(Some(AddrRisk {
            class: AddrClass::Reserved,
            embedded: Some((Embedding::Ipv4Mapped, low32)),
        }));
    }
    if in_v6(n, Ipv6Addr::UNSPECIFIED, 96) {
        // Deprecated: refused even when what it embeds is public.
        return embedded(Embedding::Ipv4Compatible, low32).or(Some(AddrRisk {
            class: AddrClass::Reserved,
            embedded: Some((Embedding::Ipv4Compatible, low32)),
        }));
    }
    if in_v6(n, Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0), 96) {
        return embedded(Embedding::Nat64, low32);
    }
    if in_v6(n, Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0, 0), 48) {
        return plain(AddrClass::Reserved);
    }
    if in_v6(n, Ipv6Addr::new(0x2002, 0, 0, 0, 0, 0, 0, 0), 16) {
        let v4 = Ipv4Addr::from(((n >> 80) & 0xffff_ffff) as u32);
        return embedded(Embedding::SixToFour, v4);
    }
    const RANGES: [(Ipv6Addr, u32, AddrClass); 8] = [
        (
            Ipv6Addr::new(0x100, 0, 0, 0, 0, 0, 0, 0),
            64,
            AddrClass::Reserved,
        ),
        (
            Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0),
            7,
            AddrClass::Private,
        ),
        (
            Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0),
            10,
            AddrClass::LinkLocal,
        ),
        (
            Ipv6Addr::new(0xfec0, 0, 0, 0, 0, 0, 0, 0),
            10,
            AddrClass::Private,
        ),
        (
            Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0),
            8,
            AddrClass::Multicast,
        ),
        (
            Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0),
            32,
            AddrClass::Documentation,
        ),
        (
            Ipv6Addr::new(0x3fff, 0, 0, 0, 0, 0, 0, 0),
            20,
            AddrClass::Documentation,
        ),
        (
            Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0),
            23,
            AddrClass::Reserved,
        ),
    ];
    if let Some((_, _, class)) = RANGES.iter().find(|(net, len, _)| in_v6(n, *net, *len)) {
        return plain(*class);
    }
    // Anything else outside global unicast is unallocated or special.
    if !in_v6(n, Ipv6Addr::new(0x2000, 0, 0, 0, 0, 0, 0, 0), 3) {
        return plain(AddrClass::Reserved);
    }
    None
}

/// What is risky about `addr` when it is an unspecified address
/// ([`AddrClass::Unspecified`]: `0.0.0.0/8`, `::`, or an IPv6 form that
/// embeds one), which no grant unlocks.
pub(crate) fn unspecified(addr: IpAddr) -> Option<AddrRisk> {
    classify(addr).filter(|risk| risk.class == AddrClass::Unspecified)
}

/// Checks the address a connection would go to.
///
/// `Ok` when `addr` is an ordinary public address, or when it is risky but
/// `requested_host` is that very address literal and one of `grants` names
/// that exact address (`http://127.0.0.1:8080` unlocks `127.0.0.1` for a
/// request to `127.0.0.1`). A grant by name never unlocks a risky address
/// its name resolves to, and a grant of `127.0.0.1` does not unlock
/// `::ffff:127.0.0.1`.
///
/// An unspecified address ([`AddrClass::Unspecified`], in whatever form
/// embeds it) is never unlocked: a connection to `0.0.0.0` or `::` goes to
/// this host, to whatever listens there. No grant can name one
/// ([`Grant::parse`] refuses it); this holds for a grant made otherwise.
///
/// Pass the grant that allowed the request (as
/// [`std::slice::from_ref`]), so that an address named by some other grant
/// is not unlocked for this one.
pub fn check_addr(addr: IpAddr, requested_host: &Host, grants: &[Grant]) -> Result<(), Refusal> {
    let Some(risk) = classify(addr) else {
        return Ok(());
    };
    let named = risk.class != AddrClass::Unspecified
        && *requested_host == Host::Ip(addr)
        && grants
            .iter()
            .any(|g| matches!(g.host(), HostPattern::Ip(ip) if *ip == addr));
    if named {
        return Ok(());
    }
    Err(Refusal::AddressRefused {
        host: requested_host.clone(),
        addr,
        risk,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(s: &str) -> Option<AddrClass> {
        classify(s.parse().unwrap()).map(|r| r.class)
    }

    #[test]
    fn public_addresses_pass() {
        for s in [
            "1.1.1.1",
            "8.8.8.8",
            "93.184.216.34",
            "100.63.255.255",
            "100.128.0.0",
            "172.15.255.255",
            "172.32.0.0",
            "192.169.0.1",
            "11.0.0.1",
            "223.255.255.255",
            "2606:4700:4700::1111",
            "2a00:1450:4001::200e",
            "64:ff9b::808:808",
            "2002:808:808::1",
        ] {
            assert_eq!(class(s), None, "{s}");
        }
    }

    #[test]
    fn boundaries_of_ranges() {
        assert_eq!(class("100.64.0.0"), Some(AddrClass::SharedCgnat));
        assert_eq!(class("100.127.255.255"), Some(AddrClass::SharedCgnat));
        assert_eq!(class("172.16.0.0"), Some(AddrClass::Private));
        assert_eq!(class("172.31.255.255"), Some(AddrClass::Private));
        assert_eq!(class("198.19.255.255"), Some(AddrClass::Benchmarking));
        assert_eq!(class("239.255.255.255"), Some(AddrClass::Multicast));
        assert_eq!(class("255.255.255.254"), Some(AddrClass::Reserved));
        assert_eq!(class("255.255.255.255"), Some(AddrClass::Broadcast));
        assert_eq!(class("1fff:ffff::1"), Some(AddrClass::Reserved));
        assert_eq!(class("4000::1"), Some(AddrClass::Reserved));
        assert_eq!(class("2001:1ff::1"), Some(AddrClass::Reserved));
        assert_eq!(class("2001:200::1"), None);
    }

    #[test]
    fn embedded_forms_name_what_they_embed() {
        let r = classify("::ffff:127.0.0.1".parse().unwrap()).unwrap();
        assert_eq!(r.class, AddrClass::Loopback);
        assert_eq!(
            r.embedded,
            Some((Embedding::Ipv4Mapped, Ipv4Addr::LOCALHOST))
        );
        assert_eq!(
            r.to_string(),
            "IPv4-mapped form of 127.0.0.1, a loopback address"
        );
        let r = classify("::8.8.8.8".parse().unwrap()).unwrap();
        assert_eq!(r.class, AddrClass::Reserved);
        // A mapped public address is refused too, as a mapped form.
        let r = classify("::ffff:8.8.8.8".parse().unwrap()).unwrap();
        assert_eq!(r.class, AddrClass::Reserved);
        assert_eq!(
            r.to_string(),
            "IPv4-mapped form of 8.8.8.8, refused whatever it embeds"
        );
        let r = classify("2002:7f00:1::".parse().unwrap()).unwrap();
        assert_eq!(
            r.embedded,
            Some((Embedding::SixToFour, Ipv4Addr::LOCALHOST))
        );
    }

    /// No grant unlocks an unspecified address, nor a form of one that
    /// embeds it: a connection to `0.0.0.0` or `::` goes to this host, to
    /// whatever listens there. (No policy can write such a grant; this
    /// holds for one however it was made.) Other refused classes are still
    /// unlocked by a grant of their exact address.
    #[test]
    fn an_unspecified_address_is_never_unlocked() {
        use crate::grant::Scheme;
        for s in [
            "0.0.0.0",
            "0.1.2.3",
            "0.255.255.255",
            "::",
            "::ffff:0.0.0.0",
            "::0.1.2.3",
            "64:ff9b::",
            "2002::",
        ] {
            let addr: IpAddr = s.parse().unwrap();
            let host = Host::Ip(addr);
            let grant = Grant::of_addr_unchecked(Scheme::Http, addr, 80);
            match check_addr(addr, &host, std::slice::from_ref(&grant)) {
                Err(Refusal::AddressRefused { risk, .. }) => {
                    assert_eq!(risk.class, AddrClass::Unspecified, "{s}");
                }
                other => panic!("{s}: {other:?}"),
            }
        }
        for s in [
            "127.0.0.1",
            "::1",
            "::ffff:127.0.0.1",
            "10.0.0.1",
            "::ffff:8.8.8.8",
        ] {
            let addr: IpAddr = s.parse().unwrap();
            let grant = Grant::of_addr_unchecked(Scheme::Http, addr, 80);
            assert!(
                check_addr(addr, &Host::Ip(addr), std::slice::from_ref(&grant)).is_ok(),
                "{s}"
            );
        }
    }
}
