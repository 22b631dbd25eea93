//! The one deny-list of addresses and host names that runs (on an agent holding it) and
//! webhooks (on the controller) may not reach, and the operator's exceptions to it
//! (`CIDR|HOST[:PORT]`: the agent's `--allow-target`, the controller's
//! `--allow-webhook-target`). What each side does with a refusal (when it checks, the
//! controller's own addresses, the text a tenant reads) stays with that side: the agent's
//! `egress.rs`, the controller's `outbox/egress.rs`.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use ipnet::IpNet;

/// Why the deny-list refuses an address or a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DenyClass {
    Unspecified,
    Loopback,
    LinkLocal,
    Metadata,
    Private,
    SharedAddressSpace,
    UniqueLocal,
    NotUnicast,
    /// One of the controller's own addresses (the caller knows them; [`classify`] never
    /// answers this).
    Controller,
    /// `localhost` and names under `.localhost`.
    LocalName,
    /// A cloud metadata service's name.
    MetadataName,
    /// A name under `.internal` or `.local`, private by definition. Webhooks refuse it
    /// by name; an agent judges it on the addresses it resolves to (an operator's agent
    /// tests services so named).
    PrivateName,
}

impl DenyClass {
    /// The class in a sentence: "a loopback address (127.0.0.0/8, ::1)".
    pub fn describe(self) -> &'static str {
        match self {
            DenyClass::Unspecified => "an unspecified address (0.0.0.0/8, ::)",
            DenyClass::Loopback => "a loopback address (127.0.0.0/8, ::1)",
            DenyClass::LinkLocal => "a link-local address (169.254.0.0/16, fe80::/10, fec0::/10)",
            DenyClass::Metadata => "a cloud metadata address",
            DenyClass::Private => "a private address (RFC 1918)",
            DenyClass::SharedAddressSpace => "a shared address (100.64.0.0/10, RFC 6598)",
            DenyClass::UniqueLocal => "a unique-local IPv6 address (fc00::/7)",
            DenyClass::NotUnicast => "not a unicast address (multicast, broadcast, reserved)",
            DenyClass::Controller => "an address of the controller",
            DenyClass::LocalName => "a local host name (localhost)",
            DenyClass::MetadataName => "a cloud metadata host name",
            DenyClass::PrivateName => "a private host name (.internal, .local)",
        }
    }

    /// The class in a word or two, as in "10.1.2.3 is a private (RFC 1918) address".
    pub fn short(self) -> &'static str {
        match self {
            DenyClass::Unspecified => "unspecified",
            DenyClass::Loopback => "loopback",
            DenyClass::LinkLocal => "link-local",
            DenyClass::Metadata => "metadata",
            DenyClass::Private => "private (RFC 1918)",
            DenyClass::SharedAddressSpace => "shared (RFC 6598)",
            DenyClass::UniqueLocal => "unique-local",
            DenyClass::NotUnicast => "multicast or reserved",
            DenyClass::Controller => "controller",
            DenyClass::LocalName => "local",
            DenyClass::MetadataName => "metadata",
            DenyClass::PrivateName => "private",
        }
    }
}

/// Host names of cloud metadata services, refused before they are resolved.
const METADATA_NAMES: [&str; 6] = [
    "metadata.google.internal",
    "metadata.goog",
    "metadata",
    "instance-data",
    "instance-data.ec2.internal",
    "metadata.azure.com",
];

/// Suffixes of names private by definition ([`DenyClass::PrivateName`]).
const PRIVATE_SUFFIXES: [&str; 2] = [".internal", ".local"];

/// Metadata services: AWS's and GCP's link-local one, and those at addresses no other
/// class covers or another class would name less clearly (Azure's wire server, Alibaba's
/// in the shared space, Oracle's, AWS's IPv6 one in the unique-local space).
const METADATA_ADDRESSES: [IpAddr; 5] = [
    IpAddr::V4(Ipv4Addr::new(169, 254, 169, 254)),
    IpAddr::V4(Ipv4Addr::new(168, 63, 129, 16)),
    IpAddr::V4(Ipv4Addr::new(100, 100, 100, 200)),
    IpAddr::V4(Ipv4Addr::new(192, 0, 0, 192)),
    IpAddr::V6(Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254)),
];

/// A host name as compared: lower case, without the brackets of an IPv6 literal or the
/// trailing dot of a fully qualified name.
pub fn normal_host(host: &str) -> String {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .trim_end_matches('.')
        .to_ascii_lowercase()
}

/// An IPv4 address carried in IPv6 as mapped (`::ffff:a.b.c.d`) as the IPv4 address it
/// is: the socket reaches that address.
pub fn canonical(ip: IpAddr) -> IpAddr {
    ip.to_canonical()
}

/// The deny-list's class of a host name, if it has one.
pub fn classify_name(host: &str) -> Option<DenyClass> {
    let host = normal_host(host);
    if host == "localhost" || host.ends_with(".localhost") {
        Some(DenyClass::LocalName)
    } else if METADATA_NAMES.contains(&host.as_str()) {
        Some(DenyClass::MetadataName)
    } else if PRIVATE_SUFFIXES.iter().any(|s| host.ends_with(s)) {
        Some(DenyClass::PrivateName)
    } else {
        None
    }
}

/// The deny-list's class of an address, if it has one. IPv6 addresses that carry an IPv4
/// one (IPv4-mapped, IPv4-compatible `::a.b.c.d`, NAT64 `64:ff9b::/96`, 6to4
/// `2002::/16`) are judged as the IPv4 address they reach.
pub fn classify(ip: IpAddr) -> Option<DenyClass> {
    let ip = canonical(ip);
    if METADATA_ADDRESSES.contains(&ip) {
        return Some(DenyClass::Metadata);
    }
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => match carried_v4(v6) {
            Some(v4) => classify(IpAddr::V4(v4)),
            None => classify_v6(v6),
        },
    }
}

/// The IPv4 address an IPv6 one carries, for the forms that reach it.
fn carried_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let v4 = |hi: u16, lo: u16| {
        let [a, b] = hi.to_be_bytes();
        let [c, d] = lo.to_be_bytes();
        Ipv4Addr::new(a, b, c, d)
    };
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        Some(v4(s[6], s[7]))
    } else if s[0] == 0x2002 {
        Some(v4(s[1], s[2]))
    } else if s[..6] == [0; 6] && !ip.is_unspecified() && !ip.is_loopback() {
        Some(v4(s[6], s[7]))
    } else {
        None
    }
}

fn classify_v4(ip: Ipv4Addr) -> Option<DenyClass> {
    let [a, b, ..] = ip.octets();
    Some(if a == 0 {
        DenyClass::Unspecified
    } else if ip.is_loopback() {
        DenyClass::Loopback
    } else if ip.is_link_local() {
        DenyClass::LinkLocal
    } else if ip.is_private() {
        DenyClass::Private
    } else if a == 100 && (b & 0xc0) == 64 {
        DenyClass::SharedAddressSpace
    } else if a >= 224 {
        // Multicast (224/4), reserved (240/4) and the broadcast address.
        DenyClass::NotUnicast
    } else {
        return None;
    })
}

fn classify_v6(ip: Ipv6Addr) -> Option<DenyClass> {
    let first = ip.segments()[0];
    Some(if ip.is_unspecified() {
        DenyClass::Unspecified
    } else if ip.is_loopback() {
        DenyClass::Loopback
    } else if first & 0xffc0 == 0xfe80 || first & 0xffc0 == 0xfec0 {
        // Link-local, and the deprecated site-local fec0::/10.
        DenyClass::LinkLocal
    } else if first & 0xfe00 == 0xfc00 {
        DenyClass::UniqueLocal
    } else if first & 0xff00 == 0xff00 {
        DenyClass::NotUnicast
    } else {
        return None;
    })
}

/// One exception to the deny-list (`--allow-target`, `--allow-webhook-target`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllowRule {
    /// Addresses in a network (a single address is a /32 or /128), on one port or any.
    Net { net: IpNet, port: Option<u16> },
    /// A host name as a URL spells it (lower case, no trailing dot): every address it
    /// resolves to, on one port or any. The operator trusts that name's DNS.
    Host { host: String, port: Option<u16> },
}

/// Why a text is not an exception.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?} is not CIDR|HOST[:PORT] (e.g. 10.0.0.0/8, 127.0.0.1:8080, [fd00::1]:443, api.internal)"
)]
pub struct AllowRuleError(pub String);

impl AllowRule {
    /// `CIDR`, `IP`, `IP:PORT`, `CIDR:PORT`, `[IPv6]:PORT`, `[IPv6/LEN]:PORT`, `HOST`,
    /// `HOST:PORT`; surrounding white space is ignored.
    pub fn parse(text: &str) -> Result<AllowRule, AllowRuleError> {
        let bad = || AllowRuleError(text.to_string());
        let trimmed = text.trim();
        let (subject, port) = if let Some(rest) = trimmed.strip_prefix('[') {
            // [IPv6 or CIDR] with an optional :PORT after the bracket.
            let (inside, after) = rest.split_once(']').ok_or_else(bad)?;
            let port = match after {
                "" => None,
                _ => Some(parse_port(after.strip_prefix(':').ok_or_else(bad)?).ok_or_else(bad)?),
            };
            let net = parse_net(inside).ok_or_else(bad)?;
            return Ok(AllowRule::Net { net, port });
        } else if trimmed.matches(':').count() > 1 {
            // A bare IPv6 address or network: no port (bracket it to give one).
            (trimmed, None)
        } else {
            match trimmed.rsplit_once(':') {
                Some((subject, port)) => (subject, Some(parse_port(port).ok_or_else(bad)?)),
                None => (trimmed, None),
            }
        };
        if let Some(net) = parse_net(subject) {
            return Ok(AllowRule::Net { net, port });
        }
        let host = normal_host(subject);
        let name_like = !host.is_empty()
            && host.len() <= 253
            && host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
            // Digits and dots only is a mistyped address, not a name.
            && !host.chars().all(|c| c.is_ascii_digit() || c == '.')
            && host.split('.').all(|label| !label.is_empty() && label.len() <= 63);
        // A closing bracket without its opening one is a typo, not a name.
        if !name_like || subject.ends_with(']') {
            return Err(bad());
        }
        Ok(AllowRule::Host { host, port })
    }

    /// The port this entry is held to, if any.
    pub fn port(&self) -> Option<u16> {
        match self {
            AllowRule::Net { port, .. } | AllowRule::Host { port, .. } => *port,
        }
    }

    fn port_matches(&self, wanted: u16) -> bool {
        self.port().is_none_or(|p| p == wanted)
    }

    /// Whether this entry names `host` (compared as [`normal_host`]) and lets through
    /// `port`.
    pub fn names(&self, host: &str, port: u16) -> bool {
        matches!(self, AllowRule::Host { host: name, .. } if *name == normal_host(host))
            && self.port_matches(port)
    }

    /// Whether this entry's network holds `addr` (as [`canonical`]) and lets through its
    /// port.
    pub fn covers(&self, addr: SocketAddr) -> bool {
        matches!(self, AllowRule::Net { net, .. } if net.contains(&canonical(addr.ip())))
            && self.port_matches(addr.port())
    }

    /// Whether this entry lets through `addr`, reached by the name `host`.
    pub fn allows(&self, host: &str, addr: SocketAddr) -> bool {
        self.covers(addr) || self.names(host, addr.port())
    }
}

impl fmt::Display for AllowRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (subject, port) = match self {
            AllowRule::Net { net, port } => {
                let single = net.prefix_len() == net.max_prefix_len();
                let text = if single {
                    net.addr().to_string()
                } else {
                    net.to_string()
                };
                match (net, port) {
                    (IpNet::V6(_), Some(_)) => (format!("[{text}]"), port),
                    _ => (text, port),
                }
            }
            AllowRule::Host { host, port } => (host.clone(), port),
        };
        match port {
            Some(port) => write!(f, "{subject}:{port}"),
            None => f.write_str(&subject),
        }
    }
}

impl std::str::FromStr for AllowRule {
    type Err = AllowRuleError;
    fn from_str(text: &str) -> Result<AllowRule, AllowRuleError> {
        AllowRule::parse(text)
    }
}

fn parse_port(text: &str) -> Option<u16> {
    let digits = !text.is_empty() && text.len() <= 5 && text.bytes().all(|b| b.is_ascii_digit());
    digits
        .then(|| text.parse().ok())
        .flatten()
        .filter(|&p| p > 0)
}

/// An address or a network (host bits cleared), an IPv4-mapped address as its IPv4 one.
fn parse_net(text: &str) -> Option<IpNet> {
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(IpNet::from(canonical(ip)));
    }
    let net = text.parse::<IpNet>().ok()?;
    Some(net.trunc())
}

#[cfg(test)]
#[path = "egress_tests.rs"]
mod tests;
