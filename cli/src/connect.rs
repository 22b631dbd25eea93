//! The CLI's connections: TCP, and TLS (rustls, ring provider) for `https://` servers,
//! verified against `--ca-cert FILE` when given, else the system's roots.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper::Uri;
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tower_service::Service;

use crate::error::{Failure, Result};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The TLS client configuration: the CA file's certificates only (a private CA such as
/// the controller's `pki/ca.pem`), or without one the system's roots.
pub fn tls_config(ca_cert: Option<&Path>) -> Result<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    match ca_cert {
        Some(path) => {
            let bad = |e: &dyn std::fmt::Display| {
                Failure::usage(format!("--ca-cert {}: {e}", path.display()))
            };
            let certs = CertificateDer::pem_file_iter(path)
                .map_err(|e| bad(&e))?
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|e| bad(&e))?;
            if certs.is_empty() {
                return Err(bad(&"no PEM certificate in the file"));
            }
            for cert in certs {
                roots.add(cert).map_err(|e| bad(&e))?;
            }
        }
        None => {
            for cert in rustls_native_certs::load_native_certs().certs {
                // A system root rustls cannot parse is skipped, as browsers do.
                let _ = roots.add(cert);
            }
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Failure::usage(format!("TLS: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    // The client speaks HTTP/1.1 (its streams are SSE); the server offers h2 too.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// Connects `http://` URIs over TCP and `https://` ones over TLS on TCP.
#[derive(Clone)]
pub struct Connector {
    tcp: HttpConnector,
    tls: Option<TlsConnector>,
}

impl Connector {
    pub fn new(tcp: HttpConnector, tls: Option<rustls::ClientConfig>) -> Connector {
        let mut tcp = tcp;
        // The scheme is this connector's business: let https URIs through to TCP.
        tcp.enforce_http(false);
        Connector {
            tcp,
            tls: tls.map(|config| TlsConnector::from(Arc::new(config))),
        }
    }
}

impl Service<Uri> for Connector {
    type Response = Stream;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = std::result::Result<Stream, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<std::result::Result<(), BoxError>> {
        self.tcp.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let mut tcp = self.tcp.clone();
        let tls = self.tls.clone();
        Box::pin(async move {
            let https = uri.scheme_str() == Some("https");
            let host = uri
                .host()
                .unwrap_or_default()
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string();
            let io = tcp.call(uri).await?;
            if !https {
                return Ok(Stream::Plain(io));
            }
            let tls = tls.ok_or("an https:// address without a TLS configuration")?;
            let name = ServerName::try_from(host)?;
            let stream = tls.connect(name, io.into_inner()).await?;
            Ok(Stream::Tls(Box::new(TokioIo::new(stream))))
        })
    }
}

/// A connection of either kind.
pub enum Stream {
    Plain(TokioIo<TcpStream>),
    Tls(Box<TokioIo<TlsStream<TcpStream>>>),
}

impl Connection for Stream {
    fn connected(&self) -> Connected {
        match self {
            Stream::Plain(io) => io.connected(),
            Stream::Tls(io) => io.inner().get_ref().0.connected(),
        }
    }
}

impl Read for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(io) => Pin::new(io).poll_read(cx, buf),
            Stream::Tls(io) => Pin::new(io.as_mut()).poll_read(cx, buf),
        }
    }
}

impl Write for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(io) => Pin::new(io).poll_write(cx, buf),
            Stream::Tls(io) => Pin::new(io.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(io) => Pin::new(io).poll_flush(cx),
            Stream::Tls(io) => Pin::new(io.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(io) => Pin::new(io).poll_shutdown(cx),
            Stream::Tls(io) => Pin::new(io.as_mut()).poll_shutdown(cx),
        }
    }
}
