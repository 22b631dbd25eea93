//! The API's TLS: a PEM certificate chain and key, served with ALPN `h2` and `http/1.1`
//! (gRPC `WatchRun` needs h2; the REST API and SSE work on either).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

#[derive(Debug, thiserror::Error)]
pub enum ApiTlsError {
    #[error("{path}: no PEM certificate could be read: {reason}")]
    Cert { path: PathBuf, reason: String },
    #[error("{path}: no PEM private key could be read: {reason}")]
    Key { path: PathBuf, reason: String },
    #[error("the API certificate and key do not make a TLS server configuration: {0}")]
    Config(#[from] rustls::Error),
}

/// A rustls server configuration (ring provider, given explicitly) from PEM files.
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, ApiTlsError> {
    let cert_error = |reason: String| ApiTlsError::Cert {
        path: cert.to_path_buf(),
        reason,
    };
    let certs = CertificateDer::pem_file_iter(cert)
        .map_err(|e| cert_error(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| cert_error(e.to_string()))?;
    if certs.is_empty() {
        return Err(cert_error("the file holds no certificate".into()));
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| ApiTlsError::Key {
        path: key.to_path_buf(),
        reason: e.to_string(),
    })?;
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_no_client_auth()
    .with_single_cert(certs, key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
