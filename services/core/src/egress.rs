//! Where a browser session may connect: the egress policy, with no I/O.
//!
//! A local Chromium reaches the public internet only. Every connection it makes
//! goes through an egress proxy (in `trawl-browser`) that resolves the host once,
//! asks [`EgressPolicy::check_addr`] about every address, and connects to the
//! address it checked. The API asks [`EgressPolicy::check_url`] about each browse
//! URL at submission, for early feedback on hosts written as addresses.
//!
//! Refused unless allowed:
//!
//! - IPv4: this network `0/8`, private `10/8`, `172.16/12`, `192.168/16`, shared
//!   (CGNAT) `100.64/10`, loopback `127/8`, link-local `169.254/16`, IETF protocol
//!   assignments `192.0.0/24`, documentation `192.0.2/24`, `198.51.100/24`,
//!   `203.0.113/24`, 6to4 relays `192.88.99/24`, benchmarking `198.18/15`,
//!   multicast `224/4`, reserved `240/4` and broadcast.
//! - IPv6: unspecified, loopback, unique local `fc00::/7`, link-local `fe80::/10`,
//!   site-local `fec0::/10`, multicast `ff00::/8`, documentation `2001:db8::/32`,
//!   discard `100::/64`, Teredo `2001::/32`, local-use NAT64 `64:ff9b:1::/48`;
//!   and every IPv6 form that carries an IPv4 address (mapped `::ffff:a.b.c.d`,
//!   compatible `::a.b.c.d`, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`) is judged by
//!   that IPv4 address.
//! - Cloud metadata endpoints (`169.254.169.254`, `169.254.170.2`,
//!   `100.100.100.200`, `fd00:ec2::254`) and names (`metadata`,
//!   `metadata.google.internal`, `metadata.goog`, `instance-data`, and every name
//!   under `.internal`, which ICANN reserves for private use), and the names that
//!   are local by definition (`localhost`, `*.localhost`, `*.local`,
//!   `*.home.arpa`).
//!
//! The allow list (`TRAWL_BROWSE_ALLOW`) is comma-separated: host names (exactly,
//! or `*.example.com` for the names under it), addresses, CIDRs (`10.1.0.0/16`),
//! and the words `loopback` (loopback addresses and `localhost`) and `private`
//! (loopback, private, shared, link-local and unique local ranges, and the local
//! names). `private` does not open the metadata endpoints: name them (an
//! address, a CIDR containing them, or the host name) to open them. A host name
//! in the list is trusted whatever it resolves to: the operator named it.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Entries an allow list may have; more is a configuration mistake.
pub const MAX_ALLOW_ENTRIES: usize = 256;

/// Why a destination is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    Unspecified,
    Loopback,
    /// RFC 1918, and IPv6 site-local.
    Private,
    /// RFC 6598 shared address space (carrier-grade NAT).
    Shared,
    LinkLocal,
    UniqueLocal,
    Multicast,
    Broadcast,
    /// Documentation, benchmarking, protocol assignments, future use, Teredo.
    Reserved,
    /// A cloud metadata endpoint, by address or by name.
    Metadata,
    /// A name that is local by definition (`localhost`, `.local`, `.internal`, …).
    LocalName,
}

impl Reason {
    /// A stable code for logs, headers and trace steps.
    pub fn code(self) -> &'static str {
        match self {
            Reason::Unspecified => "unspecified",
            Reason::Loopback => "loopback",
            Reason::Private => "private",
            Reason::Shared => "shared",
            Reason::LinkLocal => "link_local",
            Reason::UniqueLocal => "unique_local",
            Reason::Multicast => "multicast",
            Reason::Broadcast => "broadcast",
            Reason::Reserved => "reserved",
            Reason::Metadata => "metadata",
            Reason::LocalName => "local_name",
        }
    }

    /// Whether the word `private` in an allow list opens it.
    fn is_private(self) -> bool {
        matches!(
            self,
            Reason::Loopback
                | Reason::Private
                | Reason::Shared
                | Reason::LinkLocal
                | Reason::UniqueLocal
                | Reason::LocalName
        )
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Reason::Unspecified => "an unspecified address",
            Reason::Loopback => "a loopback address",
            Reason::Private => "a private network address",
            Reason::Shared => "a shared (carrier-grade NAT) address",
            Reason::LinkLocal => "a link-local address",
            Reason::UniqueLocal => "a unique local address",
            Reason::Multicast => "a multicast address",
            Reason::Broadcast => "the broadcast address",
            Reason::Reserved => "a reserved address",
            Reason::Metadata => "a cloud metadata endpoint",
            Reason::LocalName => "a local name",
        })
    }
}

/// A refused destination: what was asked for and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{destination} is {reason} (not allowed by TRAWL_BROWSE_ALLOW)")]
pub struct Refused {
    /// The host or address as checked.
    pub destination: String,
    pub reason: Reason,
}

/// Why a URL cannot be browsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UrlRefusal {
    #[error("not a URL: {0}")]
    NotAUrl(String),
    #[error("the URL has no host")]
    NoHost,
    #[error(transparent)]
    Refused(#[from] Refused),
}

/// Why an allow list does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AllowError {
    #[error("entry {entry:?}: {why}")]
    Entry { entry: String, why: String },
    #[error("more than {MAX_ALLOW_ENTRIES} entries")]
    TooMany,
}

/// A network: an address and a prefix length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// `a.b.c.d/n` or `x::y/n`; host bits must be zero.
    pub fn parse(s: &str) -> Result<Cidr, String> {
        let (a, p) = s.split_once('/').ok_or("not a CIDR")?;
        let addr: IpAddr = a
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse()
            .map_err(|_| format!("{a:?} is not an IP address"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix: u8 = p
            .parse()
            .ok()
            .filter(|n| *n <= max)
            .ok_or_else(|| format!("prefix {p:?} is not a number from 0 to {max}"))?;
        let cidr = Cidr { addr, prefix };
        if cidr.network() != addr {
            return Err(format!(
                "host bits are set; the network is {}/{prefix}",
                cidr.network()
            ));
        }
        Ok(cidr)
    }

    fn single(addr: IpAddr) -> Cidr {
        Cidr {
            addr,
            prefix: if addr.is_ipv4() { 32 } else { 128 },
        }
    }

    fn network(&self) -> IpAddr {
        match self.addr {
            IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from_bits(a.to_bits() & mask32(self.prefix))),
            IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from_bits(a.to_bits() & mask128(self.prefix))),
        }
    }

    /// Whether `ip` is in this network (an IPv4-mapped address counts as its
    /// IPv4 address).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, canonical(ip)) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                a.to_bits() & mask32(self.prefix) == n.to_bits() & mask32(self.prefix)
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                a.to_bits() & mask128(self.prefix) == n.to_bits() & mask128(self.prefix)
            }
            _ => false,
        }
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

fn mask32(prefix: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0)
}

fn mask128(prefix: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0)
}

/// An IPv4-mapped IPv6 address as its IPv4 address; anything else as is.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Allow {
    /// A host name, lowercase, without a trailing dot.
    Host(String),
    /// `*.suffix`: the names under `suffix` (stored with its leading dot).
    Under(String),
    Net(Cidr),
    Loopback,
    Private,
}

/// Which destinations a browser session may reach. The default refuses every
/// special range and name listed in the [module docs](self).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EgressPolicy {
    allow: Vec<Allow>,
}

impl EgressPolicy {
    /// Nothing but public destinations.
    pub fn closed() -> EgressPolicy {
        EgressPolicy::default()
    }

    /// Public destinations and every private and loopback one (not the metadata
    /// endpoints): what `trawl run` uses on the operator's own machine unless
    /// `TRAWL_BROWSE_ALLOW` says otherwise.
    pub fn private_networks() -> EgressPolicy {
        EgressPolicy {
            allow: vec![Allow::Private],
        }
    }

    /// An allow list: comma-separated host names, `*.domain`, addresses, CIDRs,
    /// `loopback`, `private`. Empty entries are skipped; an empty list is
    /// [`EgressPolicy::closed`].
    pub fn parse(list: &str) -> Result<EgressPolicy, AllowError> {
        let mut allow = Vec::new();
        for raw in list.split(',') {
            let entry = raw.trim();
            if entry.is_empty() {
                continue;
            }
            if allow.len() == MAX_ALLOW_ENTRIES {
                return Err(AllowError::TooMany);
            }
            let bad = |why: String| AllowError::Entry {
                entry: entry.to_owned(),
                why,
            };
            let lower = entry.to_ascii_lowercase();
            let item = match lower.as_str() {
                "loopback" => Allow::Loopback,
                "private" => Allow::Private,
                e if e.contains("://") => {
                    return Err(bad("a URL; write its host (or a CIDR)".to_owned()));
                }
                e if e.contains('/') => Allow::Net(Cidr::parse(e).map_err(bad)?),
                e => match e.trim_start_matches('[').trim_end_matches(']').parse() {
                    Ok(ip) => Allow::Net(Cidr::single(ip)),
                    Err(_) => match e.strip_prefix("*.") {
                        Some(suffix) => {
                            host_name(suffix).map_err(bad)?;
                            Allow::Under(format!(".{}", suffix.trim_end_matches('.')))
                        }
                        None => Allow::Host(host_name(e).map_err(bad)?),
                    },
                },
            };
            if !allow.contains(&item) {
                allow.push(item);
            }
        }
        Ok(EgressPolicy { allow })
    }

    /// Whether nothing beyond public destinations is open.
    pub fn is_closed(&self) -> bool {
        self.allow.is_empty()
    }

    /// The allow list, as it would be written (`loopback,10.0.0.0/8`), empty when
    /// closed.
    pub fn describe(&self) -> String {
        self.allow
            .iter()
            .map(|a| match a {
                Allow::Host(h) => h.clone(),
                Allow::Under(s) => format!("*{s}"),
                Allow::Net(c) => c.to_string(),
                Allow::Loopback => "loopback".to_owned(),
                Allow::Private => "private".to_owned(),
            })
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Whether the host name was opened by name (exactly or under a `*.` entry).
    pub fn name_allowed(&self, host: &str) -> bool {
        let host = normalize_name(host);
        self.allow.iter().any(|a| match a {
            Allow::Host(h) => *h == host,
            Allow::Under(s) => host.ends_with(s.as_str()),
            _ => false,
        })
    }

    fn reason_allowed(&self, reason: Reason) -> bool {
        self.allow.iter().any(|a| match a {
            Allow::Loopback => reason == Reason::Loopback,
            Allow::Private => reason.is_private(),
            _ => false,
        })
    }

    fn net_allowed(&self, ip: IpAddr) -> bool {
        self.allow.iter().any(|a| match a {
            Allow::Net(c) => c.contains(ip),
            _ => false,
        })
    }

    /// A host name, before it is resolved: refused when it is a metadata or
    /// local name that the list does not open. (Its addresses are checked after
    /// resolution with [`EgressPolicy::check_addr`].)
    pub fn check_name(&self, host: &str) -> Result<(), Refused> {
        if self.name_allowed(host) {
            return Ok(());
        }
        match classify_name(host) {
            Some(reason) if !self.reason_allowed(reason) => Err(Refused {
                destination: host.to_owned(),
                reason,
            }),
            _ => Ok(()),
        }
    }

    /// An address `host` resolved to (or an address as written, `host` = `None`):
    /// allowed when the host is open by name, the address by the list, or the
    /// address is in no special range.
    pub fn check_addr(&self, host: Option<&str>, ip: IpAddr) -> Result<(), Refused> {
        if host.is_some_and(|h| self.name_allowed(h)) || self.net_allowed(ip) {
            return Ok(());
        }
        match classify(ip) {
            Some(reason) if !self.reason_allowed(reason) => Err(Refused {
                destination: host.map_or_else(|| ip.to_string(), |h| format!("{h} ({ip})")),
                reason,
            }),
            _ => Ok(()),
        }
    }

    /// A URL's host as written (after WHATWG host parsing, which turns
    /// `0x7f000001`, `2130706433`, `127.1` and `0177.0.0.1` into `127.0.0.1`, as
    /// browsers do): refused when it is an address or name this policy refuses.
    /// A name that resolves to a refused address passes here; the proxy refuses
    /// it at connection time.
    pub fn check_url(&self, raw: &str) -> Result<(), UrlRefusal> {
        let url = url::Url::parse(raw.trim()).map_err(|e| UrlRefusal::NotAUrl(e.to_string()))?;
        self.check_host(url.host().ok_or(UrlRefusal::NoHost)?)
            .map_err(UrlRefusal::Refused)
    }

    /// A parsed host: an address is checked as is, a name with
    /// [`EgressPolicy::check_name`].
    pub fn check_host(&self, host: url::Host<&str>) -> Result<(), Refused> {
        match host {
            url::Host::Ipv4(ip) => self.check_addr(None, IpAddr::V4(ip)),
            url::Host::Ipv6(ip) => self.check_addr(None, IpAddr::V6(ip)),
            url::Host::Domain(d) => self.check_name(d),
        }
    }
}

impl EgressPolicy {
    /// The browse URLs of `spec` (start URLs and `goto` steps) whose host as
    /// written this policy refuses, each named by its field path; for early
    /// feedback at submission (the egress proxy is what protects).
    pub fn check_browse(&self, spec: &crate::spec::JobSpec) -> Result<(), crate::spec::SpecErrors> {
        let Some(browse) = &spec.browse else {
            return Ok(());
        };
        let mut errors = Vec::new();
        let mut check = |path: String, url: &str| {
            if let Err(UrlRefusal::Refused(r)) = self.check_url(url) {
                errors.push(crate::spec::SpecError {
                    path,
                    reason: format!("browser sessions may not reach {url}: {r}"),
                });
            }
        };
        // Start URLs by their index as written (the parsed list drops repeats).
        let written = spec.document["browse"]["urls"].as_array();
        for (i, u) in written.into_iter().flatten().enumerate() {
            if let Some(u) = u.as_str() {
                check(format!("browse.urls[{i}]"), u);
            }
        }
        for (i, step) in browse.steps.iter().enumerate() {
            if let crate::spec::Action::Goto { url } = &step.action {
                check(format!("browse.steps[{i}].goto"), url);
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(crate::spec::SpecErrors(errors))
        }
    }
}

fn normalize_name(host: &str) -> String {
    host.trim_end_matches('.').to_ascii_lowercase()
}

/// A host name entry, checked and lowercased.
fn host_name(s: &str) -> Result<String, String> {
    let h = normalize_name(s);
    let ok = !h.is_empty()
        && h.len() <= 253
        && h.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        });
    if ok {
        Ok(h)
    } else {
        Err("not a host name, address, CIDR, `loopback` or `private`".to_owned())
    }
}

/// Well-known cloud metadata host names.
const METADATA_NAMES: &[&str] = &[
    "metadata",
    "metadata.google.internal",
    "metadata.goog",
    "instance-data",
    "instance-data.ec2.internal",
];

/// Why a host name is refused by default, if it is.
pub fn classify_name(host: &str) -> Option<Reason> {
    let h = normalize_name(host);
    if METADATA_NAMES.contains(&h.as_str()) {
        return Some(Reason::Metadata);
    }
    if h == "localhost" || h.ends_with(".localhost") {
        return Some(Reason::Loopback);
    }
    if h.ends_with(".internal") || h.ends_with(".local") || h.ends_with(".home.arpa") {
        return Some(Reason::LocalName);
    }
    None
}

/// Why an address is refused by default, if it is.
pub fn classify(ip: IpAddr) -> Option<Reason> {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn in4(ip: Ipv4Addr, net: [u8; 4], prefix: u8) -> bool {
    ip.to_bits() & mask32(prefix) == u32::from_be_bytes(net) & mask32(prefix)
}

fn classify_v4(ip: Ipv4Addr) -> Option<Reason> {
    const METADATA: [[u8; 4]; 3] = [
        [169, 254, 169, 254],
        [169, 254, 170, 2],
        [100, 100, 100, 200],
    ];
    if METADATA.contains(&ip.octets()) {
        return Some(Reason::Metadata);
    }
    let ranges: &[([u8; 4], u8, Reason)] = &[
        ([0, 0, 0, 0], 8, Reason::Unspecified),
        ([10, 0, 0, 0], 8, Reason::Private),
        ([100, 64, 0, 0], 10, Reason::Shared),
        ([127, 0, 0, 0], 8, Reason::Loopback),
        ([169, 254, 0, 0], 16, Reason::LinkLocal),
        ([172, 16, 0, 0], 12, Reason::Private),
        ([192, 0, 0, 0], 24, Reason::Reserved),
        ([192, 0, 2, 0], 24, Reason::Reserved),
        ([192, 88, 99, 0], 24, Reason::Reserved),
        ([192, 168, 0, 0], 16, Reason::Private),
        ([198, 18, 0, 0], 15, Reason::Reserved),
        ([198, 51, 100, 0], 24, Reason::Reserved),
        ([203, 0, 113, 0], 24, Reason::Reserved),
        ([224, 0, 0, 0], 4, Reason::Multicast),
        ([255, 255, 255, 255], 32, Reason::Broadcast),
        ([240, 0, 0, 0], 4, Reason::Reserved),
    ];
    ranges
        .iter()
        .find(|(net, prefix, _)| in4(ip, *net, *prefix))
        .map(|(_, _, r)| *r)
}

fn classify_v6(ip: Ipv6Addr) -> Option<Reason> {
    let bits = ip.to_bits();
    let seg = ip.segments();
    let low_v4 = Ipv4Addr::from_bits(bits as u32);
    let in6 = |net: u128, prefix: u8| bits & mask128(prefix) == net & mask128(prefix);
    if ip.is_unspecified() {
        return Some(Reason::Unspecified);
    }
    if ip.is_loopback() {
        return Some(Reason::Loopback);
    }
    if ip == Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x254) {
        return Some(Reason::Metadata);
    }
    // Forms that carry an IPv4 address: judged by it.
    if let Some(v4) = ip.to_ipv4_mapped() {
        return classify_v4(v4);
    }
    if in6(0, 96) {
        // IPv4-compatible (deprecated) ::a.b.c.d.
        return classify_v4(low_v4).or(Some(Reason::Reserved));
    }
    if in6(0x0064_ff9b_0000_0000_0000_0000_0000_0000, 96) {
        return classify_v4(low_v4);
    }
    if seg[0] == 0x2002 {
        let v4 = Ipv4Addr::from_bits((bits >> 80) as u32);
        return classify_v4(v4);
    }
    let ranges: &[(u128, u8, Reason)] = &[
        (0x0064_ff9b_0001 << 80, 48, Reason::Reserved),
        (0x0100 << 112, 64, Reason::Reserved),
        (0x2001_0db8 << 96, 32, Reason::Reserved),
        (0x2001_0000 << 96, 32, Reason::Reserved),
        (0xfc00 << 112, 7, Reason::UniqueLocal),
        (0xfe80 << 112, 10, Reason::LinkLocal),
        (0xfec0 << 112, 10, Reason::Private),
        (0xff00 << 112, 8, Reason::Multicast),
    ];
    ranges
        .iter()
        .find(|(net, prefix, _)| in6(*net, *prefix))
        .map(|(_, _, r)| *r)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn special_addresses_are_refused_by_default() {
        let closed = EgressPolicy::closed();
        for (addr, reason) in [
            ("0.0.0.0", Reason::Unspecified),
            ("0.1.2.3", Reason::Unspecified),
            ("10.0.0.1", Reason::Private),
            ("10.255.255.255", Reason::Private),
            ("100.64.0.1", Reason::Shared),
            ("100.127.255.254", Reason::Shared),
            ("127.0.0.1", Reason::Loopback),
            ("127.255.0.9", Reason::Loopback),
            ("169.254.169.254", Reason::Metadata),
            ("169.254.170.2", Reason::Metadata),
            ("100.100.100.200", Reason::Metadata),
            ("169.254.1.1", Reason::LinkLocal),
            ("172.16.0.1", Reason::Private),
            ("172.31.255.255", Reason::Private),
            ("192.0.0.8", Reason::Reserved),
            ("192.0.2.1", Reason::Reserved),
            ("192.88.99.1", Reason::Reserved),
            ("192.168.1.1", Reason::Private),
            ("198.18.0.1", Reason::Reserved),
            ("198.19.255.1", Reason::Reserved),
            ("198.51.100.7", Reason::Reserved),
            ("203.0.113.7", Reason::Reserved),
            ("224.0.0.1", Reason::Multicast),
            ("239.255.255.250", Reason::Multicast),
            ("240.0.0.1", Reason::Reserved),
            ("255.255.255.255", Reason::Broadcast),
            ("::", Reason::Unspecified),
            ("::1", Reason::Loopback),
            ("fd00:ec2::254", Reason::Metadata),
            ("fc00::1", Reason::UniqueLocal),
            ("fdff::1", Reason::UniqueLocal),
            ("fe80::1", Reason::LinkLocal),
            ("febf::1", Reason::LinkLocal),
            ("fec0::1", Reason::Private),
            ("ff02::1", Reason::Multicast),
            ("2001:db8::1", Reason::Reserved),
            ("2001::1", Reason::Reserved),
            ("100::1", Reason::Reserved),
            ("64:ff9b:1::1", Reason::Reserved),
            // IPv4 carried in IPv6.
            ("::ffff:127.0.0.1", Reason::Loopback),
            ("::ffff:10.0.0.1", Reason::Private),
            ("::ffff:169.254.169.254", Reason::Metadata),
            ("::127.0.0.1", Reason::Loopback),
            ("::10.0.0.1", Reason::Private),
            ("::8.8.8.8", Reason::Reserved),
            ("64:ff9b::127.0.0.1", Reason::Loopback),
            ("64:ff9b::a9fe:a9fe", Reason::Metadata),
            ("2002:7f00:0001::1", Reason::Loopback),
            ("2002:0a00:0001::", Reason::Private),
            ("2002:c0a8:0101::5", Reason::Private),
        ] {
            let e = closed.check_addr(None, ip(addr)).unwrap_err();
            assert_eq!(e.reason, reason, "{addr}");
        }
    }

    #[test]
    fn public_addresses_pass() {
        let closed = EgressPolicy::closed();
        for addr in [
            "8.8.8.8",
            "1.1.1.1",
            "93.184.215.14",
            "100.63.255.255",
            "100.128.0.0",
            "172.15.255.255",
            "172.32.0.0",
            "192.167.255.255",
            "192.169.0.0",
            "198.17.255.255",
            "198.20.0.0",
            "223.255.255.255",
            "169.253.255.255",
            "11.0.0.0",
            "2606:4700::1111",
            "2a00:1450:4001::200e",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2002:0808:0808::1",
        ] {
            assert_eq!(closed.check_addr(None, ip(addr)), Ok(()), "{addr}");
        }
    }

    /// Every address of every IPv4 /8 in steps: refused exactly when the
    /// standard library (or the ranges it lacks) says it is special, the same as
    /// its mapped, compatible, NAT64 and 6to4 forms.
    #[test]
    fn every_ipv6_form_of_an_ipv4_address_is_judged_like_it() {
        let closed = EgressPolicy::closed();
        for bits in (0u32..=u32::MAX).step_by(0x0001_3579) {
            let v4 = Ipv4Addr::from_bits(bits);
            let want = classify_v4(v4);
            let std_special = v4.is_private()
                || v4.is_loopback()
                || v4.is_link_local()
                || v4.is_multicast()
                || v4.is_broadcast()
                || v4.is_unspecified()
                || v4.is_documentation()
                || v4.octets()[0] == 0
                || v4.octets()[0] >= 240;
            if std_special {
                assert!(want.is_some(), "{v4}");
            }
            let mapped = IpAddr::V6(v4.to_ipv6_mapped());
            let nat64 = IpAddr::V6(Ipv6Addr::from_bits(
                (0x0064_ff9b_u128 << 96) | u128::from(bits),
            ));
            let six_to_four = IpAddr::V6(Ipv6Addr::from_bits(
                (0x2002_u128 << 112) | (u128::from(bits) << 80) | 1,
            ));
            for form in [mapped, nat64, six_to_four] {
                assert_eq!(
                    closed.check_addr(None, form).err().map(|e| e.reason),
                    want,
                    "{form} of {v4}"
                );
            }
        }
    }

    #[test]
    fn urls_are_judged_by_their_host_as_a_browser_parses_it() {
        let closed = EgressPolicy::closed();
        for (url, reason) in [
            ("http://127.0.0.1:8080/", Reason::Loopback),
            ("http://169.254.169.254/latest/meta-data/", Reason::Metadata),
            ("http://10.0.0.1/", Reason::Private),
            ("http://[::1]:4222/", Reason::Loopback),
            ("http://0x7f000001/", Reason::Loopback),
            ("http://2130706433/", Reason::Loopback),
            ("http://127.1/", Reason::Loopback),
            ("http://0177.0.0.1/", Reason::Loopback),
            ("http://0x7f.1/", Reason::Loopback),
            ("http://[::ffff:7f00:1]/", Reason::Loopback),
            ("http://[::ffff:169.254.169.254]/", Reason::Metadata),
            (
                "http://metadata.google.internal/computeMetadata/v1/",
                Reason::Metadata,
            ),
            ("http://METADATA.Google.Internal./", Reason::Metadata),
            ("http://metadata/", Reason::Metadata),
            ("http://localhost:3000/", Reason::Loopback),
            ("http://api.localhost/", Reason::Loopback),
            ("http://db.corp.internal/", Reason::LocalName),
            ("http://printer.local/", Reason::LocalName),
            ("https://0/", Reason::Unspecified),
        ] {
            match closed.check_url(url) {
                Err(UrlRefusal::Refused(r)) => assert_eq!(r.reason, reason, "{url}"),
                other => panic!("{url}: {other:?}"),
            }
        }
        assert_eq!(closed.check_url("https://example.com/a"), Ok(()));
        assert_eq!(closed.check_url("http://8.8.8.8/"), Ok(()));
        assert!(matches!(
            closed.check_url("not a url"),
            Err(UrlRefusal::NotAUrl(_))
        ));
    }

    #[test]
    fn browse_specs_are_checked_url_by_url() {
        let spec = crate::spec::JobSpec::parse(
            "name: b\nbrowse:\n  urls: [\"https://shop.example/\", \"http://0x7f000001/\", \"http://metadata.google.internal/\"]\n  geos: [us]\n  steps:\n    - goto: \"http://[::1]:4222/\"\n    - wait_for: {text: x}\n",
        )
        .unwrap();
        let errs = EgressPolicy::closed().check_browse(&spec).unwrap_err();
        assert_eq!(
            errs.paths(),
            vec!["browse.urls[1]", "browse.urls[2]", "browse.steps[0].goto"]
        );
        assert!(
            errs.0[0].reason.contains("loopback"),
            "{}",
            errs.0[0].reason
        );
        assert!(
            errs.0[1].reason.contains("metadata"),
            "{}",
            errs.0[1].reason
        );
        assert_eq!(
            EgressPolicy::parse("loopback,metadata.google.internal")
                .unwrap()
                .check_browse(&spec),
            Ok(())
        );
    }

    #[test]
    fn refusals_name_the_destination_and_the_reason() {
        let e = EgressPolicy::closed()
            .check_addr(Some("shop.test"), ip("127.0.0.1"))
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "shop.test (127.0.0.1) is a loopback address (not allowed by TRAWL_BROWSE_ALLOW)"
        );
        assert_eq!(e.reason.code(), "loopback");
    }

    #[test]
    fn allow_lists_open_what_they_name() {
        let p = EgressPolicy::parse(" shop.test, *.corp.example ,10.1.0.0/16,[fd12::1], ").unwrap();
        assert_eq!(
            p.describe(),
            "shop.test,*.corp.example,10.1.0.0/16,fd12::1/128"
        );
        assert_eq!(p.check_addr(Some("shop.test"), ip("127.0.0.1")), Ok(()));
        assert_eq!(p.check_addr(Some("SHOP.test."), ip("10.9.9.9")), Ok(()));
        assert_eq!(
            p.check_addr(Some("a.corp.example"), ip("192.168.0.1")),
            Ok(())
        );
        assert!(
            p.check_addr(Some("corp.example"), ip("192.168.0.1"))
                .is_err()
        );
        assert_eq!(p.check_addr(None, ip("10.1.2.3")), Ok(()));
        assert_eq!(p.check_addr(None, ip("::ffff:10.1.2.3")), Ok(()));
        assert!(p.check_addr(None, ip("10.2.0.1")).is_err());
        assert_eq!(p.check_addr(None, ip("fd12::1")), Ok(()));
        assert!(p.check_addr(None, ip("fd12::2")).is_err());
        assert!(p.check_addr(Some("other.test"), ip("127.0.0.1")).is_err());
        assert!(p.check_url("http://127.0.0.1/").is_err());

        let lo = EgressPolicy::parse("loopback").unwrap();
        assert_eq!(lo.check_url("http://127.0.0.1:9/"), Ok(()));
        assert_eq!(lo.check_url("http://[::1]/"), Ok(()));
        assert_eq!(lo.check_url("http://localhost/"), Ok(()));
        assert!(lo.check_url("http://10.0.0.1/").is_err());
        assert!(lo.check_url("http://169.254.169.254/").is_err());

        let private = EgressPolicy::parse("PRIVATE").unwrap();
        assert_eq!(private, EgressPolicy::private_networks());
        for open in [
            "http://10.0.0.1/",
            "http://127.1/",
            "http://[fd00::1]/",
            "http://nas.local/",
        ] {
            assert_eq!(private.check_url(open), Ok(()), "{open}");
        }
        // `private` does not open the metadata endpoints; naming them does.
        for closed in [
            "http://169.254.169.254/",
            "http://metadata.google.internal/",
            "http://224.0.0.1/",
        ] {
            assert!(private.check_url(closed).is_err(), "{closed}");
        }
        let meta = EgressPolicy::parse("169.254.169.254,metadata.google.internal").unwrap();
        assert_eq!(meta.check_url("http://169.254.169.254/"), Ok(()));
        assert_eq!(meta.check_url("http://metadata.google.internal/"), Ok(()));

        assert!(EgressPolicy::parse("").unwrap().is_closed());
        assert!(EgressPolicy::parse(" , ").unwrap().is_closed());
    }

    #[test]
    fn bad_allow_entries_are_named() {
        for (list, entry, why) in [
            ("loopback,10.0.0.0/33", "10.0.0.0/33", "prefix"),
            ("10.0.0.1/8", "10.0.0.1/8", "host bits"),
            ("nope/8", "nope/8", "not an IP address"),
            ("http://x.test", "http://x.test", "a URL"),
            ("a..b", "a..b", "not a host name"),
            ("*.", "*.", "not a host name"),
        ] {
            match EgressPolicy::parse(list) {
                Err(AllowError::Entry { entry: e, why: w }) => {
                    assert_eq!(e, entry);
                    assert!(w.contains(why), "{list}: {w}");
                }
                other => panic!("{list}: {other:?}"),
            }
        }
        let many = vec!["a.test"; MAX_ALLOW_ENTRIES + 1]
            .iter()
            .enumerate()
            .map(|(i, h)| format!("{i}{h}"))
            .collect::<Vec<_>>()
            .join(",");
        assert_eq!(EgressPolicy::parse(&many), Err(AllowError::TooMany));
    }
}
