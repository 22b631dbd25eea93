//! Signing an agent's certificate signing request (enrollment, controller side).
//!
//! Only the request's public key is used, after its self-signature is checked (the
//! requester holds the private key): the subject, the extensions and the lifetime are the
//! controller's, from the enrollment token and its own settings, whatever was asked.

use rustls_pki_types::CertificateSigningRequestDer;
use rustls_pki_types::pem::PemObject;
use time::{Duration, OffsetDateTime};
use x509_parser::prelude::FromDer;

use crate::{CaFingerprint, CertError, ControllerPki, agent_params, ca_issuer, fingerprint, read};

/// Larger requests are refused unread (an EC or RSA-4096 request is a few KiB).
pub const MAX_CSR_PEM: usize = 16 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum CsrError {
    /// The request itself is wrong: the requester's fault.
    #[error("{0}")]
    Invalid(&'static str),
    /// The controller could not sign it: its own fault.
    #[error(transparent)]
    Cert(#[from] CertError),
}

/// A signed agent certificate.
#[derive(Debug, Clone)]
pub struct SignedAgent {
    pub cert_pem: String,
    pub fingerprint: String,
    pub not_after: OffsetDateTime,
}

/// The public key of a PEM request whose signature verifies.
pub fn verified_public_key(csr_pem: &str) -> Result<rcgen::SubjectPublicKeyInfo, CsrError> {
    if csr_pem.len() > MAX_CSR_PEM {
        return Err(CsrError::Invalid("the request is larger than 16 KiB"));
    }
    let der = CertificateSigningRequestDer::from_pem_slice(csr_pem.as_bytes())
        .map_err(|_| CsrError::Invalid("not a PEM CERTIFICATE REQUEST"))?;
    let (rest, csr) =
        x509_parser::certification_request::X509CertificationRequest::from_der(der.as_ref())
            .map_err(|_| CsrError::Invalid("not a PKCS#10 certificate request"))?;
    if !rest.is_empty() {
        return Err(CsrError::Invalid("bytes after the certificate request"));
    }
    csr.verify_signature().map_err(|_| {
        CsrError::Invalid("the request's signature does not verify with its own key")
    })?;
    rcgen::SubjectPublicKeyInfo::from_der(csr.certification_request_info.subject_pki.raw)
        .map_err(|_| CsrError::Invalid("the request's key is of an unsupported kind"))
}

/// Signs `csr_pem`'s key as agent `agent` of `account`, valid from now for `lifetime`.
pub fn sign_agent_csr(
    pki: &ControllerPki,
    csr_pem: &str,
    account: &str,
    agent: &str,
    lifetime: std::time::Duration,
) -> Result<SignedAgent, CsrError> {
    let key = verified_public_key(csr_pem)?;
    let lifetime = Duration::try_from(lifetime)
        .map_err(|_| CsrError::Invalid("the certificate lifetime is out of range"))?;
    let now = OffsetDateTime::now_utc();
    let params = agent_params(account, agent, now, now + lifetime).map_err(CsrError::Cert)?;
    let cert = params
        .signed_by(&key, &ca_issuer(pki)?)
        .map_err(|e| CsrError::Cert(e.into()))?;
    Ok(SignedAgent {
        cert_pem: cert.pem(),
        fingerprint: fingerprint(cert.der()),
        not_after: params.not_after,
    })
}

/// The controller CA's PEM (`ca.pem`, two CAs during a rotation) and the fingerprint
/// enrollment tokens pin: the CA that signed the server's certificate, which an enrolling
/// agent verifies the server against (the old one while a rotation overlaps).
pub fn ca_with_fingerprint(pki: &ControllerPki) -> Result<(String, CaFingerprint), CertError> {
    let pem = read(&pki.ca_cert())?;
    let signer = if crate::rotation::in_progress(pki) {
        crate::rotation::previous_ca(pki)
    } else {
        pki.ca_cert()
    };
    let signer_pem = read(&signer)?;
    let der = rustls_pki_types::CertificateDer::from_pem_slice(signer_pem.as_bytes())
        .map_err(|_| CertError::NotPem { path: signer })?;
    let pin = CaFingerprint::of_der(&der);
    Ok((pem, pin))
}
