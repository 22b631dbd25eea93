//! Which addresses a run may connect to: the one check every connect path of the agent
//! calls (checks and scenario through [`crate::http_client`], load, replay and capacity
//! through [`crate::load::client::Endpoint`], the faults run's proxy upstream), on the
//! addresses the target's host name resolves to at connect time, so that a name which
//! resolves to an allowed address when a run starts and to a denied one later (DNS
//! rebinding) is still refused: only checked addresses are ever dialled.
//!
//! The deny-list is on for platform agents (their runs come from every account) and for
//! an agent started with `--deny-private`; otherwise an agent reaches what its host can,
//! as it did (an operator's own agent sits next to its private targets). An operator's
//! `--allow-target CIDR|HOST[:PORT]` lets through what it names, whatever the deny-list.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use ipnet::IpNet;
use tokio::net::TcpStream;

/// One `--allow-target` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllowRule {
    /// Addresses in a network (a single address is a /32 or /128), on one port or any.
    Net { net: IpNet, port: Option<u16> },
    /// A host name as the target's URL spells it (lower case, no trailing dot): every
    /// address it resolves to, on one port or any. The operator trusts that name's DNS.
    Host { host: String, port: Option<u16> },
}

/// Why an `--allow-target` value is not an entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?} is not CIDR|HOST[:PORT] (e.g. 10.0.0.0/8, 127.0.0.1:8080, [fd00::1]:443, api.internal)"
)]
pub struct AllowRuleError(pub String);

impl AllowRule {
    pub fn parse(text: &str) -> Result<AllowRule, AllowRuleError> {
        let bad = || AllowRuleError(text.to_string());
        let (subject, port) = if let Some(rest) = text.strip_prefix('[') {
            // [IPv6 or CIDR] with an optional :PORT after the bracket.
            let (inside, after) = rest.split_once(']').ok_or_else(bad)?;
            let port = match after {
                "" => None,
                _ => Some(parse_port(after.strip_prefix(':').ok_or_else(bad)?).ok_or_else(bad)?),
            };
            let net = parse_net(inside).ok_or_else(bad)?;
            return Ok(AllowRule::Net { net, port });
        } else if text.matches(':').count() > 1 {
            // A bare IPv6 address or network: no port (bracket it to give one).
            (text, None)
        } else {
            match text.rsplit_once(':') {
                Some((subject, port)) => (subject, Some(parse_port(port).ok_or_else(bad)?)),
                None => (text, None),
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
        if !name_like {
            return Err(bad());
        }
        Ok(AllowRule::Host { host, port })
    }

    fn port_matches(port: Option<u16>, wanted: u16) -> bool {
        port.is_none_or(|p| p == wanted)
    }

    /// Whether this entry lets through `addr`, reached by the name `host`.
    pub fn allows(&self, host: &str, addr: SocketAddr) -> bool {
        match self {
            AllowRule::Net { net, port } => {
                net.contains(&canonical(addr.ip())) && Self::port_matches(*port, addr.port())
            }
            AllowRule::Host { host: name, port } => {
                *name == normal_host(host) && Self::port_matches(*port, addr.port())
            }
        }
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

/// An address or a network (host bits cleared).
fn parse_net(text: &str) -> Option<IpNet> {
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(IpNet::from(canonical(ip)));
    }
    let net = text.parse::<IpNet>().ok()?;
    Some(net.trunc())
}

/// A host name as compared: lower case, without the brackets of an IPv6 literal or the
/// trailing dot of a fully qualified name.
fn normal_host(host: &str) -> String {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .trim_end_matches('.')
        .to_ascii_lowercase()
}

/// An IPv4 address carried in IPv6 (mapped `::ffff:a.b.c.d`) as the IPv4 address it is:
/// the socket reaches that address.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

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
    Controller,
    LocalName,
    MetadataName,
}

impl DenyClass {
    pub fn describe(self) -> &'static str {
        match self {
            DenyClass::Unspecified => "an unspecified address (0.0.0.0/8, ::)",
            DenyClass::Loopback => "a loopback address (127.0.0.0/8, ::1)",
            DenyClass::LinkLocal => "a link-local address (169.254.0.0/16, fe80::/10)",
            DenyClass::Metadata => "a cloud metadata address",
            DenyClass::Private => "a private address (RFC 1918)",
            DenyClass::SharedAddressSpace => "a shared address (100.64.0.0/10, RFC 6598)",
            DenyClass::UniqueLocal => "a unique-local IPv6 address (fc00::/7)",
            DenyClass::NotUnicast => "not a unicast address (multicast, broadcast, reserved)",
            DenyClass::Controller => "an address of the controller",
            DenyClass::LocalName => "a local host name (localhost)",
            DenyClass::MetadataName => "a cloud metadata host name",
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

/// Metadata services on addresses no other class covers (Azure's wire server, Alibaba's
/// and Oracle's metadata services).
const METADATA_V4: [Ipv4Addr; 3] = [
    Ipv4Addr::new(168, 63, 129, 16),
    Ipv4Addr::new(100, 100, 100, 200),
    Ipv4Addr::new(192, 0, 0, 192),
];

/// The deny-list's class of a host name, if it has one.
pub fn classify_name(host: &str) -> Option<DenyClass> {
    let host = normal_host(host);
    if host == "localhost" || host.ends_with(".localhost") {
        Some(DenyClass::LocalName)
    } else if METADATA_NAMES.contains(&host.as_str()) {
        Some(DenyClass::MetadataName)
    } else {
        None
    }
}

/// The deny-list's class of an address, if it has one.
pub fn classify(ip: IpAddr) -> Option<DenyClass> {
    match canonical(ip) {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn classify_v4(ip: Ipv4Addr) -> Option<DenyClass> {
    let [a, b, ..] = ip.octets();
    if a == 0 {
        Some(DenyClass::Unspecified)
    } else if ip.is_loopback() {
        Some(DenyClass::Loopback)
    } else if ip == Ipv4Addr::new(169, 254, 169, 254) || METADATA_V4.contains(&ip) {
        Some(DenyClass::Metadata)
    } else if ip.is_link_local() {
        Some(DenyClass::LinkLocal)
    } else if ip.is_private() {
        Some(DenyClass::Private)
    } else if a == 100 && (b & 0xc0) == 64 {
        Some(DenyClass::SharedAddressSpace)
    } else if a >= 224 {
        // Multicast (224/4), reserved (240/4) and the broadcast address.
        Some(DenyClass::NotUnicast)
    } else {
        None
    }
}

fn classify_v6(ip: Ipv6Addr) -> Option<DenyClass> {
    let segments = ip.segments();
    if ip.is_unspecified() {
        return Some(DenyClass::Unspecified);
    }
    if ip.is_loopback() {
        return Some(DenyClass::Loopback);
    }
    // IPv4 reached through IPv6: NAT64 (64:ff9b::/96), IPv4-compatible (::/96) and 6to4
    // (2002::/16) carry an IPv4 address the packets end up at.
    let tail = Ipv4Addr::new(
        (segments[6] >> 8) as u8,
        segments[6] as u8,
        (segments[7] >> 8) as u8,
        segments[7] as u8,
    );
    if segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0] || segments[..6] == [0; 6] {
        return classify_v4(tail);
    }
    if segments[0] == 0x2002 {
        let embedded = Ipv4Addr::new(
            (segments[1] >> 8) as u8,
            segments[1] as u8,
            (segments[2] >> 8) as u8,
            segments[2] as u8,
        );
        return classify_v4(embedded);
    }
    match segments[0] {
        s if s & 0xffc0 == 0xfe80 => Some(DenyClass::LinkLocal),
        s if s & 0xfe00 == 0xfc00 => Some(DenyClass::UniqueLocal),
        s if s & 0xff00 == 0xff00 => Some(DenyClass::NotUnicast),
        _ => None,
    }
}

/// A target the policy refuses: by name (before resolving it) or by an address it
/// resolved to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    pub host: String,
    pub addr: Option<SocketAddr>,
    pub class: DenyClass,
}

impl fmt::Display for Denied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.addr {
            Some(addr) if addr.ip().to_string() == normal_host(&self.host) => {
                write!(f, "address {addr}")?
            }
            Some(addr) => write!(f, "host {} (resolved to {addr})", self.host)?,
            None => write!(f, "host {}", self.host)?,
        }
        write!(
            f,
            " is denied by this agent's target policy: {}; its operator may allow it with `iohr-agent run --allow-target CIDR|HOST[:PORT]`",
            self.class.describe()
        )
    }
}

/// Why a connection was not made.
#[derive(Debug, thiserror::Error)]
pub enum EgressError {
    #[error("{0}")]
    Denied(Denied),
    #[error("resolving {host}: {source}")]
    Resolve {
        host: String,
        source: std::io::Error,
    },
    #[error("{0} resolves to no address")]
    NoAddress(String),
    #[error("{0}")]
    Connect(std::io::Error),
    #[error("target {0:?}: not an http(s) URL with a host")]
    Target(String),
}

impl From<EgressError> for std::io::Error {
    fn from(error: EgressError) -> std::io::Error {
        match error {
            EgressError::Connect(e) => e,
            EgressError::Denied(_) => {
                std::io::Error::new(std::io::ErrorKind::PermissionDenied, error.to_string())
            }
            other => std::io::Error::other(other.to_string()),
        }
    }
}

/// An agent's target policy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Egress {
    /// Whether the deny-list applies (platform agents, `--deny-private`).
    deny: bool,
    allow: Vec<AllowRule>,
    /// The controller's own addresses, denied with the deny-list.
    controllers: Vec<IpAddr>,
}

impl Egress {
    /// Nothing denied: what the agent's host can reach (`exec`, an operator's own agent).
    pub fn open() -> Egress {
        Egress::default()
    }

    pub fn new(deny: bool, allow: Vec<AllowRule>, controllers: Vec<IpAddr>) -> Egress {
        Egress {
            deny,
            allow,
            controllers: controllers.into_iter().map(canonical).collect(),
        }
    }

    /// This policy with the deny-list on (a platform agent's, whatever its flags).
    pub fn denying(&self) -> Egress {
        Egress {
            deny: true,
            ..self.clone()
        }
    }

    pub fn is_denying(&self) -> bool {
        self.deny
    }

    /// Whether a connection to `addr`, reached by the name `host`, is allowed.
    pub fn check(&self, host: &str, addr: SocketAddr) -> Result<(), Denied> {
        if !self.deny || self.allow.iter().any(|rule| rule.allows(host, addr)) {
            return Ok(());
        }
        let denied = |class| Denied {
            host: normal_host(host),
            addr: Some(addr),
            class,
        };
        if let Some(class) = classify_name(host) {
            return Err(denied(class));
        }
        if let Some(class) = classify(addr.ip()) {
            return Err(denied(class));
        }
        if self.controllers.contains(&canonical(addr.ip())) {
            return Err(denied(DenyClass::Controller));
        }
        Ok(())
    }

    /// The addresses of `host:port` this policy lets a run connect to, resolved now; an
    /// error when there is none (the first refusal names why).
    pub async fn resolve(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, EgressError> {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if self.deny {
            // A metadata or local name is refused before any lookup goes out for it,
            // unless an entry names it.
            let named = self.allow.iter().any(|rule| {
                matches!(rule, AllowRule::Host { host: h, port: p }
                    if *h == normal_host(host) && AllowRule::port_matches(*p, port))
            });
            if let (false, Some(class)) = (named, classify_name(host)) {
                return Err(EgressError::Denied(Denied {
                    host: normal_host(host),
                    addr: None,
                    class,
                }));
            }
        }
        let resolved = tokio::net::lookup_host((host, port))
            .await
            .map_err(|source| EgressError::Resolve {
                host: host.to_string(),
                source,
            })?;
        let mut allowed = Vec::new();
        let mut refused = None;
        for addr in resolved {
            match self.check(host, addr) {
                Ok(()) => allowed.push(addr),
                Err(denied) => {
                    refused.get_or_insert(denied);
                }
            }
        }
        match (allowed.is_empty(), refused) {
            (false, _) => Ok(allowed),
            (true, Some(denied)) => Err(EgressError::Denied(denied)),
            (true, None) => Err(EgressError::NoAddress(host.to_string())),
        }
    }

    /// A TCP connection to `host:port` on an address this policy allows, resolved now.
    /// Without the deny-list, exactly what `TcpStream::connect` does.
    pub async fn connect(&self, host: &str, port: u16) -> Result<TcpStream, EgressError> {
        if !self.deny {
            let host = host.trim_start_matches('[').trim_end_matches(']');
            return TcpStream::connect((host, port))
                .await
                .map_err(EgressError::Connect);
        }
        let mut last = None;
        for addr in self.resolve(host, port).await? {
            match TcpStream::connect(addr).await {
                Ok(tcp) => return Ok(tcp),
                Err(e) => last = Some(e),
            }
        }
        Err(EgressError::Connect(last.unwrap_or_else(|| {
            std::io::Error::other("no address to connect to")
        })))
    }

    /// Refuses a run's target at once when every address it names is denied, so the run
    /// ends with the reason before anything is sent. Each connection checks again.
    pub async fn preflight(&self, target: &str) -> Result<(), EgressError> {
        if !self.deny {
            return Ok(());
        }
        let (host, port) = host_port(target)?;
        self.resolve(&host, port).await.map(|_| ())
    }
}

/// The host and port of an `http(s)://` URL (the scheme's port when none is given).
pub fn host_port(target: &str) -> Result<(String, u16), EgressError> {
    let bad = || EgressError::Target(target.to_string());
    let uri: hyper::Uri = target.parse().map_err(|_| bad())?;
    let default = match uri.scheme_str() {
        Some("http") => 80,
        Some("https") => 443,
        _ => return Err(bad()),
    };
    let host = uri.host().ok_or_else(bad)?;
    Ok((host.to_string(), uri.port_u16().unwrap_or(default)))
}

#[cfg(test)]
mod tests;
