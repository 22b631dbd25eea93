//! Where webhooks may be sent: not into the controller's own network. A deny-list, on by
//! default, refuses loopback, link-local, private (RFC 1918), shared (RFC 6598),
//! unique-local IPv6, unspecified, multicast and reserved addresses, the cloud metadata
//! addresses and names, and the controller's own listen addresses; the operator opens
//! exceptions with `serve --allow-webhook-target CIDR|HOST[:PORT]` (repeatable), and per
//! account with `iohr-controller account allow-target` ([`EgressPolicy::with_account`]).
//!
//! Judged twice: on the URL when a subscription is created (a literal address or a known
//! name, answered 422 `target_not_allowed`), and on every address a name resolves to when
//! a delivery connects (`connector.rs`), which then connects to that checked address and
//! no other, so a name that resolves elsewhere later (DNS rebinding) cannot pass. The list
//! and the exceptions' syntax are the agent's too (`iohr_domain::egress`).

use std::net::{IpAddr, SocketAddr};

pub use iohr_domain::egress::AllowRule;
use iohr_domain::egress::{DenyClass, canonical, classify, classify_name, normal_host};

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

/// Why a cloud run's target is refused when the run is created.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "target: {ip} is {}, which runs on platform agents (executor: cloud) may not reach; the controller's operator may allow it (serve --allow-cloud-target, or for this account: account allow-target) where the platform agents allow it too (iohr-agent run --allow-target)",
    class.describe()
)]
pub struct CloudRefusal {
    pub ip: IpAddr,
    pub class: DenyClass,
}

/// The class that denies an address, if one does, in a word or two ("loopback").
pub fn denied_class(ip: IpAddr) -> Option<&'static str> {
    classify(ip).map(DenyClass::short)
}

/// The deny-list, the operator's exceptions and the controller's own addresses.
#[derive(Debug, Clone, Default)]
pub struct EgressPolicy {
    allow: Vec<AllowRule>,
    /// Exceptions for cloud runs' literal targets (`--allow-cloud-target`).
    cloud: Vec<AllowRule>,
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
        EgressPolicy {
            allow,
            cloud: Vec::new(),
            own,
        }
    }

    /// This policy with the exceptions for cloud runs' targets.
    pub fn with_cloud_targets(mut self, cloud: Vec<AllowRule>) -> EgressPolicy {
        self.cloud = cloud;
        self
    }

    /// This policy widened by one account's exceptions (`account allow-target`, set by
    /// the operator), for that account's webhooks and cloud runs only.
    pub fn with_account(&self, entries: &[String]) -> EgressPolicy {
        let mut policy = self.clone();
        for rule in account_rules(entries) {
            policy.allow.push(rule.clone());
            policy.cloud.push(rule);
        }
        policy
    }

    /// A cloud run's target (`executor: cloud`), when it is created: a literal address
    /// the platform agents' deny-list refuses (the same list) is refused here at once,
    /// unless `--allow-cloud-target` covers it. A name is left to the platform agent,
    /// which judges what it resolves to as it connects.
    pub fn check_cloud_target(&self, uri: &hyper::Uri) -> Result<(), CloudRefusal> {
        let Some((host, port)) = Self::host_and_port(uri) else {
            return Ok(());
        };
        let Ok(ip) = host.parse::<IpAddr>() else {
            return Ok(());
        };
        let addr = SocketAddr::new(ip, port);
        match classify(ip) {
            Some(class) if !self.cloud.iter().any(|rule| rule.covers(addr)) => {
                Err(CloudRefusal { ip, class })
            }
            _ => Ok(()),
        }
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
        if classify_name(host).is_some() && !self.name_allowed(host, port) {
            return Err(Refusal::Name {
                host: normal_host(host),
            });
        }
        Ok(())
    }

    /// One address a delivery to `host` would connect to. The controller's own addresses
    /// are refused unless a rule names their port; other denied classes unless a rule
    /// covers the address (or names `host`).
    pub fn check_addr(&self, host: &str, addr: SocketAddr) -> Result<(), Refusal> {
        let ip = canonical(addr.ip());
        let reached = SocketAddr::new(ip, addr.port());
        // A network's rule opens the controller's own address only when it names the port.
        let by_net = |needs_port: bool| {
            self.allow
                .iter()
                .any(|rule| rule.covers(reached) && (rule.port().is_some() || !needs_port))
        };
        if self
            .own
            .iter()
            .any(|own| own.port() == addr.port() && canonical(own.ip()) == ip)
            && !by_net(true)
        {
            return Err(Refusal::Own { addr: reached });
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
        self.allow.iter().any(|rule| rule.names(host, port))
    }
}

/// An account's stored exceptions as rules. They were parsed before they were stored;
/// one that no longer parses (a hand-edited row) is left out, loudly.
pub fn account_rules(entries: &[String]) -> Vec<AllowRule> {
    entries
        .iter()
        .filter_map(|entry| match entry.parse::<AllowRule>() {
            Ok(rule) => Some(rule),
            Err(error) => {
                tracing::warn!(entry, %error, "an account's egress exception does not parse: left out");
                None
            }
        })
        .collect()
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
