//! Enrollment, agent side: the key pair made on the agent's host, the request that
//! carries its public key, and the identity files once the controller signed it.
//!
//! The new key is written (mode 0600) beside the identity before anything is sent, and
//! takes the place of `agent.key` only with the certificate that matches it: a failed
//! enrollment leaves a previous identity as it was.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rcgen::{CertificateParams, DnType, KeyPair};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use x509_parser::prelude::FromDer;

use crate::{AgentIdentityFiles, CertError, create_dir, write_private, write_public};

/// A key pair waiting for its certificate.
pub struct PendingKey {
    files: AgentIdentityFiles,
    /// The PEM request to send.
    pub csr_pem: String,
}

fn pending_key_path(files: &AgentIdentityFiles) -> PathBuf {
    files.dir.join("agent.key.enrolling")
}

impl PendingKey {
    /// Makes the key pair in `dir` and a request signed with it. The request's subject
    /// is only a hint: the controller names the agent from its token.
    pub fn create(dir: &Path) -> Result<PendingKey, CertError> {
        let files = AgentIdentityFiles::in_dir(dir);
        create_dir(dir)?;
        let key = KeyPair::generate()?;
        write_private(&pending_key_path(&files), &key.serialize_pem())?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params
            .distinguished_name
            .push(DnType::CommonName, "iohr agent enrollment");
        let csr_pem = params.serialize_request(&key)?.pem()?;
        Ok(PendingKey { files, csr_pem })
    }

    /// Installs the signed certificate with its key, the CA and the agent's name, in the
    /// layout `iohr-controller agent-cert` writes.
    pub fn install(
        self,
        cert_pem: &str,
        ca_pem: &str,
        agent: &str,
    ) -> Result<AgentIdentityFiles, CertError> {
        let files = self.files;
        let staged_cert = files.dir.join("agent.pem.enrolling");
        write_public(&staged_cert, cert_pem)?;
        write_public(&files.ca_cert(), ca_pem)?;
        write_public(&files.name(), agent)?;
        rename(&pending_key_path(&files), &files.key())?;
        rename(&staged_cert, &files.cert())?;
        Ok(files)
    }

    /// Forgets the key (enrollment failed).
    pub fn discard(self) {
        let _ = std::fs::remove_file(pending_key_path(&self.files));
    }
}

fn rename(from: &Path, to: &Path) -> Result<(), CertError> {
    std::fs::rename(from, to).map_err(|source| CertError::Io {
        path: to.to_path_buf(),
        source,
    })
}

/// When a certificate starts and stops working.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CertLifetime {
    pub not_before: SystemTime,
    pub not_after: SystemTime,
}

impl CertLifetime {
    /// Reads the validity of the first certificate in a PEM file.
    pub fn of_pem_file(path: &Path) -> Result<CertLifetime, CertError> {
        let not_pem = || CertError::NotPem {
            path: path.to_path_buf(),
        };
        let pem = crate::read(path)?;
        let der = CertificateDer::from_pem_slice(pem.as_bytes()).map_err(|_| not_pem())?;
        let (_, cert) = x509_parser::certificate::X509Certificate::from_der(der.as_ref())
            .map_err(|_| not_pem())?;
        let at = |t: x509_parser::time::ASN1Time| {
            let secs = Duration::from_secs(t.timestamp().unsigned_abs());
            let when = if t.timestamp() >= 0 {
                SystemTime::UNIX_EPOCH.checked_add(secs)
            } else {
                SystemTime::UNIX_EPOCH.checked_sub(secs)
            };
            when.unwrap_or(SystemTime::UNIX_EPOCH)
        };
        Ok(CertLifetime {
            not_before: at(cert.validity().not_before),
            not_after: at(cert.validity().not_after),
        })
    }

    /// When to ask for the next certificate: two thirds into this one's lifetime, which
    /// leaves a third of it for the retries of a controller that is away.
    pub fn renew_at(&self) -> SystemTime {
        let lifetime = self
            .not_after
            .duration_since(self.not_before)
            .unwrap_or_default();
        let two_thirds = (lifetime / 3).checked_mul(2).unwrap_or(lifetime);
        self.not_before
            .checked_add(two_thirds)
            .unwrap_or(self.not_after)
    }
}
