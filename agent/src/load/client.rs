//! The load engine's HTTP client: one connection per worker (HTTP/1.1 keep-alive, our own
//! driver in [`super::h1`]) or shared by a few streams (HTTP/2: ALPN `h2` over TLS,
//! prior-knowledge h2c over plain TCP, our own client in [`super::h2`]). TLS is rustls
//! with the system's roots plus an optional extra CA.

use std::path::Path;
use std::sync::Arc;

use iohr_domain::load::HttpVersion;
use rustls::pki_types::ServerName;
use tokio_rustls::TlsConnector;

use super::h1::{H1Conn, Stream};
use super::h2::{H2Conn, Reservation};
use super::request::PreparedOp;
use crate::egress::Egress;

/// Why a request got no response: the kinds `load` frames count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Failure {
    Timeout,
    Connect,
    Reset,
    Tls,
    Protocol,
}

impl Failure {
    pub const ALL: [Failure; 5] = [
        Failure::Timeout,
        Failure::Connect,
        Failure::Reset,
        Failure::Tls,
        Failure::Protocol,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Failure::Timeout => "timeout",
            Failure::Connect => "connect",
            Failure::Reset => "reset",
            Failure::Tls => "tls",
            Failure::Protocol => "protocol",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    #[error("target {0:?}: {1}")]
    Target(String, String),
    #[error("TLS roots: {0}")]
    Roots(String),
}

/// Where requests go and how to connect there.
pub struct Endpoint {
    host: String,
    port: u16,
    /// `host[:port]` as the Host header and `:authority` carry it.
    authority: String,
    scheme: &'static str,
    /// The target's path, prefixed to every operation's path (without a trailing '/').
    base_path: String,
    tls: Option<(TlsConnector, ServerName<'static>)>,
    http: HttpVersion,
    /// Which addresses a connection may go to, resolved as each is made.
    egress: Arc<Egress>,
}

impl Endpoint {
    /// `target` is `http(s)://HOST[:PORT][/BASE]`; `extra_ca` a PEM file of more roots.
    pub fn new(
        target: &str,
        http: HttpVersion,
        extra_ca: Option<&Path>,
    ) -> Result<Endpoint, EndpointError> {
        let bad = |m: &str| EndpointError::Target(target.to_string(), m.to_string());
        let uri: hyper::Uri = target.parse().map_err(|_| bad("not a URL"))?;
        let scheme = match uri.scheme_str() {
            Some("http") => "http",
            Some("https") => "https",
            _ => return Err(bad("must start with http:// or https://")),
        };
        let host = uri.host().ok_or_else(|| bad("has no host"))?;
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let port = uri
            .port_u16()
            .unwrap_or(if scheme == "https" { 443 } else { 80 });
        let authority = uri
            .authority()
            .map(|a| a.as_str().to_string())
            .ok_or_else(|| bad("has no host"))?;
        let base_path = uri.path().trim_end_matches('/').to_string();
        let tls = if scheme == "https" {
            let config = tls_config(http, extra_ca)?;
            let name = ServerName::try_from(host.clone()).map_err(|_| bad("bad TLS name"))?;
            Some((TlsConnector::from(Arc::new(config)), name))
        } else {
            None
        };
        Ok(Endpoint {
            host,
            port,
            authority,
            scheme,
            base_path,
            tls,
            http,
            egress: Arc::default(),
        })
    }

    /// The same endpoint, connecting only where `egress` allows.
    pub fn with_egress(mut self, egress: Arc<Egress>) -> Endpoint {
        self.egress = egress;
        self
    }

    pub fn authority(&self) -> &str {
        &self.authority
    }

    /// The URI a request for `path` carries: origin-form for HTTP/1.1 (with a Host
    /// header), absolute for HTTP/2 (its `:scheme` and `:authority`).
    pub fn uri_for(&self, path: &str) -> Result<hyper::Uri, EndpointError> {
        let text = match self.http {
            HttpVersion::Http1 => format!("{}{path}", self.base_path),
            HttpVersion::Http2 => format!(
                "{}://{}{}{path}",
                self.scheme, self.authority, self.base_path
            ),
        };
        text.parse()
            .map_err(|_| EndpointError::Target(text, "not a valid request URI".into()))
    }

    pub fn http(&self) -> HttpVersion {
        self.http
    }

    /// A new connection, ready for requests.
    pub async fn connect(&self) -> Result<Connection, Failure> {
        let tcp = self
            .egress
            .connect(&self.host, self.port)
            .await
            .map_err(|_| Failure::Connect)?;
        let _ = tcp.set_nodelay(true);
        let stream = match &self.tls {
            None => Stream::Plain(tcp),
            Some((connector, name)) => Stream::Tls(Box::new(
                connector
                    .connect(name.clone(), tcp)
                    .await
                    .map_err(|_| Failure::Tls)?,
            )),
        };
        match self.http {
            HttpVersion::Http1 => Ok(Connection::H1(H1Conn::new(stream))),
            HttpVersion::Http2 => Ok(Connection::H2(H2Conn::handshake(stream).await?)),
        }
    }
}

fn tls_config(
    http: HttpVersion,
    extra_ca: Option<&Path>,
) -> Result<rustls::ClientConfig, EndpointError> {
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    for cert in native.certs {
        // A system root rustls cannot parse is skipped, as browsers do.
        let _ = roots.add(cert);
    }
    if let Some(path) = extra_ca {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject;
        let certs = CertificateDer::pem_file_iter(path)
            .map_err(|e| EndpointError::Roots(format!("{}: {e}", path.display())))?;
        for cert in certs {
            let cert =
                cert.map_err(|e| EndpointError::Roots(format!("{}: {e}", path.display())))?;
            roots
                .add(cert)
                .map_err(|e| EndpointError::Roots(format!("{}: {e}", path.display())))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| EndpointError::Roots(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = match http {
        HttpVersion::Http1 => vec![b"http/1.1".to_vec()],
        HttpVersion::Http2 => vec![b"h2".to_vec()],
    };
    Ok(config)
}

/// An open connection. HTTP/2 handles are cheap clones sharing one connection.
#[derive(Debug)]
pub enum Connection {
    H1(H1Conn<Stream>),
    H2(H2Conn),
}

impl Connection {
    /// A sender for another stream on the same HTTP/2 connection.
    pub fn share(&self) -> Option<Connection> {
        match self {
            Connection::H1(_) => None,
            Connection::H2(conn) => Some(Connection::H2(conn.clone())),
        }
    }

    /// Whether the next request may use this connection (an HTTP/1.1 answer may have
    /// closed it; an HTTP/2 server may have sent GOAWAY).
    pub fn is_reusable(&self) -> bool {
        match self {
            Connection::H1(conn) => conn.is_reusable(),
            Connection::H2(conn) => conn.is_reusable(),
        }
    }

    /// Keeps a stream on an HTTP/2 connection for the next request, waiting while the
    /// server's limit is reached ([`H2Conn::reserve`]); HTTP/1.1 has nothing to keep.
    pub async fn reserve(&mut self) -> Reservation {
        match self {
            Connection::H1(_) => Reservation::None,
            Connection::H2(conn) => conn.reserve().await,
        }
    }

    /// Whether `other` is the same HTTP/2 connection (HTTP/1.1 connections are not
    /// shared: never).
    pub fn same_as(&self, other: &Connection) -> bool {
        match (self, other) {
            (Connection::H2(a), Connection::H2(b)) => a.same_as(b),
            _ => false,
        }
    }

    /// Whether the last request failed without the server processing it (HTTP/2: a
    /// GOAWAY or REFUSED_STREAM), so that it may be sent again.
    pub fn unprocessed(&self) -> bool {
        match self {
            Connection::H1(_) => false,
            Connection::H2(conn) => conn.unprocessed(),
        }
    }

    /// Sends one request, its trace id ending in `trace` when it carries the run's, and
    /// reads its body to the end (the body is counted, never kept). Returns the status.
    pub async fn send(&mut self, op: &PreparedOp, trace: u64) -> Result<u16, Failure> {
        match self {
            Connection::H1(conn) => conn.send_op(op, trace).await,
            Connection::H2(conn) => match op.h2_stamp(trace) {
                Some(fields) => conn.send_stamped(op.wire(), &fields, op.body()).await,
                None => conn.send(op.wire(), op.body()).await,
            },
        }
    }
}
