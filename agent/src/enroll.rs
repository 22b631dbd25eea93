//! Enrollment, agent side: find the controller's CA by its pinned fingerprint, then send
//! the token and the request over TLS verified against that CA only.
//!
//! The first connection sends nothing: its handshake fails unless the server's chain
//! holds a certificate with the pinned fingerprint and the server's certificate verifies
//! against it (for the dialled name). The second, the `Enroll` call, trusts that CA and no
//! other, so the token never reaches a server the pin does not vouch for.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use iohr_certs::{CaFingerprint, EnrollmentToken};
use iohr_proto::link::enrollment_client::EnrollmentClient;
use iohr_proto::link::{EnrollRequest, EnrollResponse};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};
use tonic::transport::{Certificate, Channel, ClientTlsConfig};

/// How long each step may take.
const STEP_TIMEOUT: Duration = Duration::from_secs(15);

#[derive(Debug, thiserror::Error)]
pub enum EnrollError {
    #[error("controller address {0:?} is not an https://HOST[:PORT] URL")]
    Address(String),
    #[error("connecting to {addr}: {source}")]
    Connect {
        addr: String,
        source: std::io::Error,
    },
    #[error(
        "the controller's certificate chain holds no CA with the pinned fingerprint {pinned} (it presented {presented}); nothing was sent"
    )]
    PinMismatch { pinned: String, presented: String },
    #[error("TLS with the controller failed: {0}; nothing was sent")]
    Tls(std::io::Error),
    #[error("{0} did not answer within {STEP_TIMEOUT:?}")]
    Timeout(&'static str),
    #[error("transport: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("the controller refused the enrollment: {}", .0.message())]
    Refused(tonic::Status),
    #[error("the controller answered with a CA that is not the pinned one")]
    OtherCa,
}

/// What the verifier saw: the pinned CA, or the fingerprints of what was presented.
#[derive(Debug, Default)]
struct Seen {
    ca: Option<CertificateDer<'static>>,
    presented: Vec<String>,
}

/// Accepts a server only if its chain holds the pinned CA and verifies against it.
#[derive(Debug)]
struct PinnedCaVerifier {
    pin: CaFingerprint,
    provider: Arc<CryptoProvider>,
    seen: Mutex<Seen>,
}

impl ServerCertVerifier for PinnedCaVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let pinned = intermediates
            .iter()
            .find(|cert| CaFingerprint::of_der(cert) == self.pin);
        let Some(ca) = pinned else {
            if let Ok(mut seen) = self.seen.lock() {
                seen.presented = std::iter::once(end_entity)
                    .chain(intermediates)
                    .map(|c| CaFingerprint::of_der(c).to_string())
                    .collect();
            }
            return Err(rustls::Error::General(
                "no certificate of the chain has the pinned fingerprint".into(),
            ));
        };
        let mut roots = RootCertStore::empty();
        roots.add(ca.clone().into_owned())?;
        let verifier =
            WebPkiServerVerifier::builder_with_provider(Arc::new(roots), self.provider.clone())
                .build()
                .map_err(|e| rustls::Error::General(e.to_string()))?;
        let verified = verifier.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        )?;
        if let Ok(mut seen) = self.seen.lock() {
            seen.ca = Some(ca.clone().into_owned());
        }
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// Host and port of an `https://` URL.
fn host_port(controller: &str) -> Result<(String, u16), EnrollError> {
    let bad = || EnrollError::Address(controller.to_string());
    let uri: tonic::codegen::http::Uri = controller.parse().map_err(|_| bad())?;
    if uri.scheme_str() != Some("https") {
        return Err(bad());
    }
    let host = uri.host().ok_or_else(bad)?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Ok((host.to_string(), uri.port_u16().unwrap_or(443)))
}

/// The controller's CA, from a handshake that succeeds only with the pinned one.
pub async fn pinned_ca(
    controller: &str,
    pin: &CaFingerprint,
) -> Result<CertificateDer<'static>, EnrollError> {
    let (host, port) = host_port(controller)?;
    let name = ServerName::try_from(host.clone())
        .map_err(|_| EnrollError::Address(controller.to_string()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = Arc::new(PinnedCaVerifier {
        pin: pin.clone(),
        provider: provider.clone(),
        seen: Mutex::new(Seen::default()),
    });
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| EnrollError::Tls(std::io::Error::other(e)))?
        .dangerous()
        .with_custom_certificate_verifier(verifier.clone())
        .with_no_client_auth();
    let addr = format!("{host}:{port}");
    let connect = async {
        let tcp = tokio::net::TcpStream::connect((host.as_str(), port))
            .await
            .map_err(|source| EnrollError::Connect {
                addr: addr.clone(),
                source,
            })?;
        tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
            .map_err(EnrollError::Tls)
    };
    let handshake = tokio::time::timeout(STEP_TIMEOUT, connect)
        .await
        .map_err(|_| EnrollError::Timeout("the controller's TLS handshake"))?;
    let seen = verifier
        .seen
        .lock()
        .map(|mut seen| std::mem::take(&mut *seen))
        .unwrap_or_default();
    match (handshake, seen.ca) {
        (Ok(_stream), Some(ca)) => Ok(ca),
        (_, None) if !seen.presented.is_empty() => Err(EnrollError::PinMismatch {
            pinned: pin.to_string(),
            presented: seen.presented.join(", "),
        }),
        (Err(error), _) => Err(error),
        (Ok(_), None) => Err(EnrollError::Tls(std::io::Error::other(
            "the handshake ended without a verified chain",
        ))),
    }
}

/// Enrolls: the pinned CA first, then `Enroll` over TLS trusting only that CA.
pub async fn enroll(
    controller: &str,
    token: &EnrollmentToken,
    pin: &CaFingerprint,
    csr_pem: String,
) -> Result<EnrollResponse, EnrollError> {
    let ca = pinned_ca(controller, pin).await?;
    let ca_pem = iohr_certs::certificate_pem(&ca);
    let tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&ca_pem));
    let channel = Channel::from_shared(controller.to_string())
        .map_err(|_| EnrollError::Address(controller.to_string()))?
        .tls_config(tls)?
        .connect_timeout(STEP_TIMEOUT)
        .timeout(STEP_TIMEOUT)
        .connect()
        .await?;
    let answer = EnrollmentClient::new(channel)
        .enroll(EnrollRequest {
            token: token.to_text(),
            csr_pem,
        })
        .await
        .map_err(EnrollError::Refused)?
        .into_inner();
    // The CAs to trust from now on must hold the one pinned, whatever the answer says
    // (two during a CA rotation: the new one, then the pinned old one).
    let answered: Vec<CaFingerprint> =
        rustls::pki_types::pem::PemObject::pem_slice_iter(answer.ca_pem.as_bytes())
            .filter_map(|der: Result<CertificateDer<'_>, _>| der.ok())
            .map(|der| CaFingerprint::of_der(&der))
            .collect();
    if !answered.contains(pin) {
        return Err(EnrollError::OtherCa);
    }
    Ok(answer)
}
