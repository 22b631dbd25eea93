//! How the controller's certificates are made and where they live.
//!
//! `init` makes a CA and a server certificate in `DATA_DIR/pki/`; `issue_agent` signs a
//! client certificate for one agent. The CA key never leaves the controller's data dir,
//! and no key is ever committed: local ones go under the data dir, which is ignored.
//!
//! An agent is known by the SHA-256 fingerprint of its certificate (see [`fingerprint`]):
//! the controller stores it when the certificate is issued and refuses any certificate it
//! does not know or whose agent was removed.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use sha2::{Digest, Sha256};
use time::{Duration, OffsetDateTime};

pub mod csr;
pub mod enrolling;
pub mod rotation;
pub mod token;

pub use token::{CaFingerprint, EnrollmentToken, TokenError};

#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("certificate generation failed: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("{0} already exists; refusing to overwrite a CA")]
    AlreadyExists(PathBuf),
    #[error("{path}: not a PEM certificate")]
    NotPem { path: PathBuf },
    #[error("the certificate's validity is out of the range of dates")]
    OutOfRange,
    #[error("{0}")]
    Rotation(&'static str),
}

/// The files of the controller's PKI inside its data dir.
#[derive(Debug, Clone)]
pub struct ControllerPki {
    pub dir: PathBuf,
}

impl ControllerPki {
    pub fn in_data_dir(data_dir: &Path) -> ControllerPki {
        ControllerPki {
            dir: data_dir.join("pki"),
        }
    }
    pub fn ca_cert(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }
    pub fn ca_key(&self) -> PathBuf {
        self.dir.join("ca.key")
    }
    /// The CA's common name, from which its issuer name is rebuilt when signing.
    pub fn ca_name(&self) -> PathBuf {
        self.dir.join("ca.name")
    }
    pub fn server_cert(&self) -> PathBuf {
        self.dir.join("server.pem")
    }
    pub fn server_key(&self) -> PathBuf {
        self.dir.join("server.key")
    }
    pub fn exists(&self) -> bool {
        self.ca_cert().exists() && self.ca_key().exists()
    }
}

/// The files an agent needs: its key, its certificate and the controller's CA.
#[derive(Debug, Clone)]
pub struct AgentIdentityFiles {
    pub dir: PathBuf,
}

impl AgentIdentityFiles {
    pub fn in_dir(dir: &Path) -> AgentIdentityFiles {
        AgentIdentityFiles {
            dir: dir.to_path_buf(),
        }
    }
    pub fn cert(&self) -> PathBuf {
        self.dir.join("agent.pem")
    }
    pub fn key(&self) -> PathBuf {
        self.dir.join("agent.key")
    }
    pub fn ca_cert(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }
    /// The agent's name as a text file, so the agent can say it in its hello.
    pub fn name(&self) -> PathBuf {
        self.dir.join("agent.name")
    }
}

/// The CA's subject. The issuer is rebuilt from it and the stored key, so signing an
/// agent's certificate later needs no certificate parser.
fn ca_params(common_name: &str, valid_days: i64) -> Result<CertificateParams, CertError> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "iohr reliability");
    dn.push(DnType::CommonName, common_name);
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let now = OffsetDateTime::now_utc();
    params.not_before = now - Duration::hours(1);
    params.not_after = now + Duration::days(valid_days);
    Ok(params)
}

const CA_VALID_DAYS: i64 = 3650;
const SERVER_VALID_DAYS: i64 = 825;
pub const AGENT_VALID_DAYS: i64 = 365;
/// An enrolled agent's certificate: days, not years (it enrolls again, or renews).
pub const ENROLLED_VALID_DAYS: i64 = 7;

/// Creates the CA and the server certificate. `server_names` are DNS names or IP
/// addresses the agents dial; loopback names are always included.
pub fn init(pki: &ControllerPki, server_names: &[String]) -> Result<(), CertError> {
    if pki.ca_key().exists() {
        return Err(CertError::AlreadyExists(pki.ca_key()));
    }
    create_dir(&pki.dir)?;
    let (ca_name, ca_key, ca_cert) = new_ca()?;
    write_public(&pki.ca_name(), &ca_name)?;
    write_private(&pki.ca_key(), &ca_key.serialize_pem())?;
    write_public(&pki.ca_cert(), &ca_cert)?;

    let mut names = vec![
        "127.0.0.1".to_string(),
        "::1".to_string(),
        "localhost".to_string(),
    ];
    names.extend(server_names.iter().cloned());
    issue_server(
        pki,
        names,
        &Issuer::new(ca_params(&ca_name, CA_VALID_DAYS)?, &ca_key),
    )
}

/// A CA of its own name: its name, key and certificate (PEM).
fn new_ca() -> Result<(String, KeyPair, String), CertError> {
    let ca_key = KeyPair::generate()?;
    // A name of its own: two controllers' CAs never look alike to a TLS peer, so a
    // certificate from another controller is "unknown issuer", not a bad signature.
    let ca_name = format!(
        "iohr reliability controller CA {}",
        &fingerprint(ca_key.public_key_pem().as_bytes())[..12]
    );
    let ca_cert = ca_params(&ca_name, CA_VALID_DAYS)?.self_signed(&ca_key)?;
    Ok((ca_name, ca_key, ca_cert.pem()))
}

/// Signs and writes the server certificate for `names` (DNS names or addresses).
fn issue_server(
    pki: &ControllerPki,
    names: Vec<String>,
    issuer: &Issuer<'_, impl rcgen::SigningKey>,
) -> Result<(), CertError> {
    let mut params = CertificateParams::new(names)?;
    params
        .distinguished_name
        .push(DnType::CommonName, "iohr reliability controller");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let now = OffsetDateTime::now_utc();
    params.not_before = now - Duration::hours(1);
    params.not_after = now + Duration::days(SERVER_VALID_DAYS);
    let server_key = KeyPair::generate()?;
    let server_cert = params.signed_by(&server_key, issuer)?;
    write_private(&pki.server_key(), &server_key.serialize_pem())?;
    write_public(&pki.server_cert(), &server_cert.pem())?;
    Ok(())
}

/// What `issue_agent` made.
#[derive(Debug, Clone)]
pub struct IssuedAgent {
    pub fingerprint: String,
    pub files: AgentIdentityFiles,
}

/// Validity of an agent certificate, relative to now (negative values make expired
/// certificates, which tests use).
#[derive(Debug, Clone, Copy)]
pub struct Validity {
    /// From now: when it starts and stops working.
    pub not_before: Duration,
    pub not_after: Duration,
}

impl Validity {
    /// Valid from now for `days` (negative: expired that long ago).
    pub fn days(days: i64) -> Validity {
        Validity {
            not_before: Duration::ZERO,
            // Past the range of dates: refused by `issue_agent`, never a panic here.
            not_after: days
                .checked_mul(86_400)
                .map_or(Duration::MAX, Duration::seconds),
        }
    }

    /// Valid from now for `lifetime` (seconds; tests use short ones to see a renewal).
    pub fn lasting(lifetime: std::time::Duration) -> Validity {
        Validity {
            not_before: Duration::ZERO,
            not_after: Duration::try_from(lifetime).unwrap_or(Duration::MAX),
        }
    }
}

impl Default for Validity {
    fn default() -> Self {
        Validity::days(AGENT_VALID_DAYS)
    }
}

/// Signs a client certificate for `agent` of `account` and writes it, its key and the CA
/// certificate into `out`.
pub fn issue_agent(
    pki: &ControllerPki,
    account: &str,
    agent: &str,
    out: &Path,
    validity: Validity,
) -> Result<IssuedAgent, CertError> {
    let ca_pem = read(&pki.ca_cert())?;

    let now = OffsetDateTime::now_utc();
    let params = agent_params(
        account,
        agent,
        now.checked_add(validity.not_before)
            .ok_or(CertError::OutOfRange)?,
        now.checked_add(validity.not_after)
            .ok_or(CertError::OutOfRange)?,
    )?;
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &ca_issuer(pki)?)?;

    let files = AgentIdentityFiles::in_dir(out);
    create_dir(out)?;
    write_private(&files.key(), &key.serialize_pem())?;
    write_public(&files.cert(), &cert.pem())?;
    write_public(&files.ca_cert(), &ca_pem)?;
    write_public(&files.name(), agent)?;
    Ok(IssuedAgent {
        fingerprint: fingerprint(cert.der()),
        files,
    })
}

/// What an agent's client certificate says, whoever made its key: the account as the
/// organisation, the agent's name as the common name, client authentication only.
fn agent_params(
    account: &str,
    agent: &str,
    not_before: OffsetDateTime,
    not_after: OffsetDateTime,
) -> Result<CertificateParams, CertError> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params
        .distinguished_name
        .push(DnType::OrganizationName, account);
    params.distinguished_name.push(DnType::CommonName, agent);
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    params.not_after = not_after;
    // Slack for clocks behind ours: an hour, or a tenth of a short lifetime, so that
    // renewal at two thirds of it stays inside it. An already expired certificate
    // (tests) still starts before it ends.
    let lifetime: Duration = not_after - not_before;
    let slack = (lifetime / 10_i32).clamp(Duration::ZERO, Duration::hours(1));
    params.not_before = if not_after > not_before {
        not_before - slack
    } else {
        not_after - Duration::days(1)
    };
    Ok(params)
}

/// The CA that signs agents' certificates, as an rcgen issuer (its key read from disk).
fn ca_issuer(pki: &ControllerPki) -> Result<Issuer<'static, KeyPair>, CertError> {
    let ca_key = KeyPair::from_pem(&read(&pki.ca_key())?)?;
    let ca_name = read(&pki.ca_name())?;
    Ok(Issuer::new(
        ca_params(ca_name.trim(), CA_VALID_DAYS)?,
        ca_key,
    ))
}

/// The SHA-256 of a certificate's DER, in hex: how the controller knows an agent.
pub fn fingerprint(der: &[u8]) -> String {
    hex::encode(Sha256::digest(der))
}

/// A certificate's DER as PEM.
pub fn certificate_pem(der: &[u8]) -> String {
    pem::encode_config(
        &pem::Pem::new("CERTIFICATE", der.to_vec()),
        pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF),
    )
}

/// The fingerprint of the first certificate in a PEM file.
pub fn fingerprint_pem_file(path: &Path) -> Result<String, CertError> {
    let der = CertificateDer::from_pem_file(path).map_err(|_| CertError::NotPem {
        path: path.to_path_buf(),
    })?;
    Ok(fingerprint(&der))
}

fn create_dir(dir: &Path) -> Result<(), CertError> {
    fs::create_dir_all(dir).map_err(|source| CertError::Io {
        path: dir.to_path_buf(),
        source,
    })
}

fn read(path: &Path) -> Result<String, CertError> {
    fs::read_to_string(path).map_err(|source| CertError::Io {
        path: path.to_path_buf(),
        source,
    })
}

fn write_public(path: &Path, text: &str) -> Result<(), CertError> {
    fs::write(path, text).map_err(|source| CertError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Keys are created readable by their owner only.
fn write_private(path: &Path, text: &str) -> Result<(), CertError> {
    use std::os::unix::fs::OpenOptionsExt;
    let io = |source| CertError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(io)?;
    file.write_all(text.as_bytes()).map_err(io)
}

#[cfg(test)]
mod tests;
