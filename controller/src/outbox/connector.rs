//! The TCP connector of webhook deliveries: it resolves the host itself, judges every
//! address by the [`EgressPolicy`], and connects only to an address it judged, so what a
//! name resolves to at connection (not at creation) is what is checked, and no second
//! resolution can send the connection elsewhere (DNS rebinding). TLS goes on top
//! (hyper-rustls), with the URL's name for SNI and verification.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper::Uri;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::egress::{EgressPolicy, Refusal};

/// Why a delivery's connection was not made.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The policy refused every address (or the name): nothing was sent.
    #[error("refused by the webhook target policy: {0}")]
    Denied(#[from] Refusal),
    #[error("the url has no host")]
    NoHost,
    #[error("resolving {host}: {source}")]
    Resolve {
        host: String,
        #[source]
        source: std::io::Error,
    },
    #[error("connecting to {addr}: {source}")]
    Connect {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

#[derive(Debug, Clone)]
pub struct GuardedConnector {
    policy: Arc<EgressPolicy>,
}

impl GuardedConnector {
    pub fn new(policy: Arc<EgressPolicy>) -> GuardedConnector {
        GuardedConnector { policy }
    }
}

impl tower::Service<Uri> for GuardedConnector {
    type Response = TokioIo<TcpStream>;
    type Error = ConnectError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, ConnectError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), ConnectError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let policy = self.policy.clone();
        Box::pin(async move {
            let (host, port) = EgressPolicy::host_and_port(&uri).ok_or(ConnectError::NoHost)?;
            let addrs = checked_addresses(&policy, &host, port).await?;
            let mut last = None;
            for addr in addrs {
                match TcpStream::connect(addr).await {
                    Ok(stream) => {
                        let _ = stream.set_nodelay(true);
                        return Ok(TokioIo::new(stream));
                    }
                    Err(source) => last = Some(ConnectError::Connect { addr, source }),
                }
            }
            Err(last.unwrap_or(ConnectError::NoHost))
        })
    }
}

/// The addresses of `host` the policy allows, in the resolver's order; an error when it
/// allows none.
pub async fn checked_addresses(
    policy: &EgressPolicy,
    host: &str,
    port: u16,
) -> Result<Vec<SocketAddr>, ConnectError> {
    let resolved: Vec<SocketAddr> = match host.parse::<std::net::IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => {
            policy.check_name(host, port)?;
            tokio::net::lookup_host((host, port))
                .await
                .map_err(|source| ConnectError::Resolve {
                    host: host.to_string(),
                    source,
                })?
                .collect()
        }
    };
    let mut refusal = None;
    let allowed: Vec<SocketAddr> = resolved
        .into_iter()
        .filter(|addr| match policy.check_addr(host, *addr) {
            Ok(()) => true,
            Err(why) => {
                refusal.get_or_insert(why);
                false
            }
        })
        .collect();
    if allowed.is_empty() {
        return Err(ConnectError::Denied(refusal.unwrap_or(
            Refusal::Unresolved {
                host: host.to_string(),
            },
        )));
    }
    Ok(allowed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// getaddrinfo reads `127.1` and `2130706433` as 127.0.0.1: the URL's check lets them
    /// by as names, the connection's check refuses what they resolve to.
    #[tokio::test]
    async fn names_resolving_to_a_denied_address_are_refused_at_connection() {
        let policy = EgressPolicy::default();
        for host in ["127.1", "2130706433", "localhost"] {
            match checked_addresses(&policy, host, 9).await {
                Err(ConnectError::Denied(_)) => {}
                other => panic!("{host}: {other:?}"),
            }
        }
        let opened = EgressPolicy::new(vec!["127.0.0.0/8".parse().unwrap()], &[]);
        assert_eq!(
            checked_addresses(&opened, "127.1", 9).await.unwrap(),
            vec![SocketAddr::from(([127, 0, 0, 1], 9))]
        );
    }
}
