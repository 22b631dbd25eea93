//! Where webhooks may be sent: not into the controller's own network. A deny-list, on by
//! default, refuses loopback, link-local, private (RFC 1918), shared (RFC 6598),
//! unique-local IPv6, unspecified, multicast and reserved addresses, the cloud metadata
//! addresses and names, and the controller's own listen addresses; the operator opens
//! exceptions with `serve --allow-webhook-target CIDR|HOST[:PORT]` (repeatable).
//!
//! Judged twice: on the URL when a subscription is created (a literal address or a known
//! name, answered 422 `target_not_allowed`), and on every address a name resolves to when
//! a delivery connects (`connector.rs`), which then connects to that checked address and
//! no other, so a name that resolves elsewhere later (DNS rebinding) cannot pass.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;

use ipnet::IpNet;

/// Names that always mean the local host or a cloud's metadata service; `*.localhost`,
/// `*.internal` and `*.local` (private by definition) are refused too.
const DENIED_NAMES: [&str; 7] = [
    "localhost",
    "metadata",
    "metadata.google.internal",
    "metadata.goog",
    "metadata.azure.com",
    "instance-data",
    "instance-data.ec2.internal",
];
const DENIED_SUFFIXES: [&str; 3] = [".localhost", ".internal", ".local"];

/// Metadata services, some at addresses no other class covers (Azure's wireserver and
/// Oracle's 192.0.0.192; Alibaba's is in the shared space, named here for a clearer
/// refusal).
const METADATA_ADDRESSES: [IpAddr; 5] = [
    IpAddr::V4(Ipv4Addr::new(169, 254, 169, 254)),
    IpAddr::V4(Ipv4Addr::new(168, 63, 129, 16)),
    IpAddr::V4(Ipv4Addr::new(100, 100, 100, 200)),
    IpAddr::V4(Ipv4Addr::new(192, 0, 0, 192)),
    IpAddr::V6(Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254)),
];

/// One `--allow-webhook-target`: a network (an address is a /32 or /128) or a host name,
/// with a port or any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowRule {
    host: AllowHost,
    port: Option<u16>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum AllowHost {
    Net(IpNet),
    Name(String),
}

impl FromStr for AllowRule {
    type Err = String;

    /// `CIDR`, `IP`, `IP:PORT`, `[IPv6]:PORT`, `[IPv6/LEN]:PORT`, `HOST`, `HOST:PORT`.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let text = text.trim();
        let (host, port) = if let Some(rest) = text.strip_prefix('[') {
            let (inside, after) = rest
                .split_once(']')
                .ok_or_else(|| format!("{text:?}: a '[' without its ']'"))?;
            match after {
                "" => (inside, None),
                _ => (
                    inside,
                    Some(
                        after
                            .strip_prefix(':')
                            .ok_or_else(|| format!("{text:?}: after ']' only :PORT may follow"))?,
                    ),
                ),
            }
        } else if text.matches(':').count() == 1 {
            let (host, port) = text.split_once(':').unwrap_or((text, ""));
            (host, Some(port))
        } else {
            (text, None)
        };
        let port = port
            .map(|p| {
                p.parse::<u16>()
                    .ok()
                    .filter(|p| *p != 0)
                    .ok_or_else(|| format!("{text:?}: {p:?} is not a port (1-65535)"))
            })
            .transpose()?;
        let host = if host.contains('/') {
            AllowHost::Net(
                host.parse::<IpNet>()
                    .map_err(|e| format!("{text:?}: {host:?} is not a CIDR: {e}"))?
                    .trunc(),
            )
        } else if let Ok(ip) = host.parse::<IpAddr>() {
            AllowHost::Net(IpNet::from(ip))
        } else if is_host_name(host) {
            AllowHost::Name(normal_name(host))
        } else {
            return Err(format!(
                "{text:?}: give CIDR, IP or HOST, each with an optional :PORT"
            ));
        };
        Ok(AllowRule { host, port })
    }
}

fn is_host_name(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 253
        && text.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

/// Lower case, without the root's trailing dot: `Metadata.Google.Internal.` is the name
/// the deny-list knows.
fn normal_name(host: &str) -> String {
    host.trim_end_matches('.').to_ascii_lowercase()
}

/// Why a target is refused; its text is what the tenant and the log read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("{ip} is a {class} address, which webhooks may not reach")]
    Address { ip: IpAddr, class: &'static str },
    #[error("{host} names the local host or a metadata service, which webhooks may not reach")]
    Name { host: String },
    #[error("{addr} is the controller's own address")]
    Own { addr: SocketAddr },
    #[error("{host} resolves to no address")]
    Unresolved { host: String },
}

/// The class that denies an address, if one does. IPv6 addresses that carry an IPv4
/// one (IPv4-mapped, IPv4-compatible, NAT64 64:ff9b::/96, 6to4 2002::/16) are judged
/// as the IPv4 address they reach.
pub fn denied_class(ip: IpAddr) -> Option<&'static str> {
    if METADATA_ADDRESSES.contains(&ip) {
        return Some("metadata");
    }
    match ip.to_canonical() {
        IpAddr::V4(v4) => v4_class(v4),
        IpAddr::V6(v6) => match carried_v4(v6) {
            Some(v4) => denied_class(IpAddr::V4(v4)),
            None => v6_class(v6),
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

fn v4_class(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, ..] = ip.octets();
    Some(if ip.is_unspecified() || a == 0 {
        "unspecified"
    } else if ip.is_loopback() {
        "loopback"
    } else if ip.is_private() {
        "private (RFC 1918)"
    } else if ip.is_link_local() {
        "link-local"
    } else if a == 100 && (64..128).contains(&b) {
        "shared (RFC 6598)"
    } else if ip.is_multicast() || ip.is_broadcast() || a >= 240 {
        "multicast or reserved"
    } else {
        return None;
    })
}

fn v6_class(ip: Ipv6Addr) -> Option<&'static str> {
    Some(if ip.is_unspecified() {
        "unspecified"
    } else if ip.is_loopback() {
        "loopback"
    } else if ip.is_unicast_link_local() || (ip.segments()[0] & 0xffc0) == 0xfec0 {
        "link-local"
    } else if ip.is_unique_local() {
        "unique-local"
    } else if ip.is_multicast() {
        "multicast or reserved"
    } else {
        return None;
    })
}

fn denied_name(host: &str) -> bool {
    let host = normal_name(host);
    DENIED_NAMES.contains(&host.as_str()) || DENIED_SUFFIXES.iter().any(|s| host.ends_with(s))
}

/// The deny-list, the operator's exceptions and the controller's own addresses.
#[derive(Debug, Clone, Default)]
pub struct EgressPolicy {
    allow: Vec<AllowRule>,
    /// The listen addresses, an unspecified one (0.0.0.0, ::) expanded to every address
    /// of the host's interfaces at start-up.
    own: Vec<SocketAddr>,
}

impl EgressPolicy {
    pub fn new(allow: Vec<AllowRule>, listening: &[SocketAddr]) -> EgressPolicy {
        let mut own = Vec::new();
        for addr in listening {
            if addr.ip().is_unspecified() {
                own.extend(interface_addresses().map(|ip| SocketAddr::new(ip, addr.port())));
            } else {
                own.push(*addr);
            }
        }
        EgressPolicy { allow, own }
    }

    /// A URL's host and port (the scheme's default when none), brackets taken off an
    /// IPv6 literal. `None` when the URL has no host.
    pub fn host_and_port(uri: &hyper::Uri) -> Option<(String, u16)> {
        let host = uri.host()?;
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        let port = uri
            .port_u16()
            .unwrap_or(if uri.scheme_str() == Some("https") {
                443
            } else {
                80
            });
        Some((host.to_string(), port))
    }

    /// The check at creation: a literal address is judged as at connection; a name is
    /// refused when it names the local host or a metadata service. Other names are
    /// judged on what they resolve to, each time a delivery connects.
    pub fn check_url(&self, uri: &hyper::Uri) -> Result<(), Refusal> {
        let Some((host, port)) = Self::host_and_port(uri) else {
            return Ok(()); // url_refusal answered first
        };
        match host.parse::<IpAddr>() {
            Ok(ip) => self.check_addr(&host, SocketAddr::new(ip, port)),
            Err(_) => self.check_name(&host, port),
        }
    }

    /// A name before it is resolved.
    pub fn check_name(&self, host: &str, port: u16) -> Result<(), Refusal> {
        if denied_name(host) && !self.name_allowed(host, port) {
            return Err(Refusal::Name {
                host: normal_name(host),
            });
        }
        Ok(())
    }

    /// One address a delivery to `host` would connect to. The controller's own addresses
    /// are refused unless a rule names their port; other denied classes unless a rule
    /// covers the address (or names `host`).
    pub fn check_addr(&self, host: &str, addr: SocketAddr) -> Result<(), Refusal> {
        let ip = addr.ip().to_canonical();
        let canonical = SocketAddr::new(ip, addr.port());
        let by_net = |needs_port: bool| {
            self.allow.iter().any(|rule| match &rule.host {
                AllowHost::Net(net) => {
                    net.contains(&ip)
                        && match rule.port {
                            Some(port) => port == addr.port(),
                            None => !needs_port,
                        }
                }
                AllowHost::Name(_) => false,
            })
        };
        if self
            .own
            .iter()
            .any(|own| own.port() == addr.port() && own.ip().to_canonical() == canonical.ip())
            && !by_net(true)
        {
            return Err(Refusal::Own { addr: canonical });
        }
        match denied_class(ip) {
            Some(class) if !by_net(false) && !self.name_allowed(host, addr.port()) => {
                Err(Refusal::Address { ip, class })
            }
            _ => Ok(()),
        }
    }

    /// An operator's rule names this host (and port, when the rule has one).
    fn name_allowed(&self, host: &str, port: u16) -> bool {
        let host = normal_name(host);
        self.allow.iter().any(|rule| {
            matches!(&rule.host, AllowHost::Name(name) if *name == host)
                && rule.port.is_none_or(|p| p == port)
        })
    }
}

/// The addresses of the host's interfaces (none when they cannot be read: the listen
/// address then protects only itself).
fn interface_addresses() -> impl Iterator<Item = IpAddr> {
    let addrs = match nix::ifaddrs::getifaddrs() {
        Ok(addrs) => addrs.collect::<Vec<_>>(),
        Err(error) => {
            tracing::warn!(%error, "reading the interfaces' addresses failed");
            Vec::new()
        }
    };
    addrs.into_iter().filter_map(|ifaddr| {
        let address = ifaddr.address?;
        if let Some(v4) = address.as_sockaddr_in() {
            Some(IpAddr::V4(v4.ip()))
        } else {
            address.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip()))
        }
    })
}

#[cfg(test)]
#[path = "egress_tests.rs"]
mod tests;
