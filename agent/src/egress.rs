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
use std::net::{IpAddr, SocketAddr};

pub use iohr_domain::egress::{AllowRule, AllowRuleError, DenyClass, classify};
use iohr_domain::egress::{canonical, classify_name, normal_host};
use tokio::net::TcpStream;

/// The class of a name the agent refuses before resolving it: a local or metadata name.
/// A name under `.internal` or `.local` (which webhooks refuse by name) is judged on the
/// addresses it resolves to, as every other name: an operator's agent tests services so
/// named.
fn refused_name(host: &str) -> Option<DenyClass> {
    classify_name(host).filter(|class| *class != DenyClass::PrivateName)
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

    /// This policy with more exceptions: a platform agent's for one run, with the run's
    /// account's entries from the offer (set by the controller's operator).
    pub fn allowing(&self, more: impl IntoIterator<Item = AllowRule>) -> Egress {
        let mut egress = self.clone();
        egress.allow.extend(more);
        egress
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
        if let Some(class) = refused_name(host) {
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
            let named = self.allow.iter().any(|rule| rule.names(host, port));
            if let (false, Some(class)) = (named, refused_name(host)) {
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
