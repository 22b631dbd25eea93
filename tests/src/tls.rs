//! HTTPS for tests: a rustls client (ring provider, given explicitly) trusting one CA
//! file, and one request over a fresh TLS connection with the protocol ALPN chose.

use std::path::Path;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A client configuration trusting only the certificates in `ca` (PEM), offering `alpn`.
pub fn client_config(ca: &Path, alpn: &[&[u8]]) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).expect("CA file") {
        roots.add(cert.expect("a PEM certificate")).expect("a CA");
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("TLS versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

/// Sends `request` (an absolute `https://127.0.0.1:PORT/...` URI) on a new TLS
/// connection, as HTTP/2 if ALPN chose `h2`, else HTTP/1.1; the answer and the protocol.
pub async fn send(
    config: &Arc<rustls::ClientConfig>,
    mut request: Request<Full<Bytes>>,
) -> Result<(Response<Incoming>, Option<Vec<u8>>), BoxError> {
    let authority = request
        .uri()
        .authority()
        .ok_or("no authority in the URI")?
        .clone();
    let tcp = TcpStream::connect(authority.as_str()).await?;
    let name = rustls::pki_types::ServerName::try_from(authority.host().to_string())?;
    let tls = TlsConnector::from(config.clone())
        .connect(name, tcp)
        .await?;
    let alpn = tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
    let io = TokioIo::new(tls);
    if alpn.as_deref() == Some(b"h2") {
        let (mut sender, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), io).await?;
        tokio::spawn(conn);
        Ok((sender.send_request(request).await?, alpn))
    } else {
        // HTTP/1.1 by hand: origin-form target and a Host header.
        let path = request
            .uri()
            .path_and_query()
            .map_or("/".to_string(), |p| p.to_string());
        *request.uri_mut() = path.parse()?;
        request
            .headers_mut()
            .insert("host", authority.as_str().parse()?);
        let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await?;
        tokio::spawn(conn);
        Ok((sender.send_request(request).await?, alpn))
    }
}
