//! Rotating the controller's CA with an overlap, in two steps a restart of `serve` puts
//! in effect ([docs/operations.md](../../docs/operations.md#rotating-the-ca)).
//!
//! [`begin`]: a new CA signs every agent certificate from now on, and the controller and
//! its agents trust both CAs (`ca.pem` holds the new one, then the old). The server's
//! certificate stays the old CA's, so an agent that knows only the old CA still connects;
//! each agent receives the two-CA `ca.pem` with its next renewal. [`finish`], once every
//! agent has renewed (one certificate lifetime): the server's certificate is the new CA's
//! and only the new CA is trusted; a certificate of the old CA is refused from then on.

use std::net::IpAddr;
use std::path::PathBuf;

use rcgen::Issuer;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};

use crate::{
    CA_VALID_DAYS, CertError, ControllerPki, ca_params, certificate_pem, issue_server, new_ca,
    read, write_private, write_public,
};

fn previous_cert(pki: &ControllerPki) -> PathBuf {
    pki.dir.join("ca-previous.pem")
}

/// The old CA while a rotation overlaps: it still signs the server's certificate.
pub fn previous_ca(pki: &ControllerPki) -> PathBuf {
    previous_cert(pki)
}

fn previous_key(pki: &ControllerPki) -> PathBuf {
    pki.dir.join("ca-previous.key")
}

/// Whether a rotation has begun and not finished.
pub fn in_progress(pki: &ControllerPki) -> bool {
    previous_cert(pki).exists()
}

/// The certificates of a PEM file, in order.
fn certs_of(pki: &ControllerPki) -> Result<Vec<CertificateDer<'static>>, CertError> {
    let pem = read(&pki.ca_cert())?;
    let certs: Vec<_> = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|_| CertError::NotPem {
            path: pki.ca_cert(),
        })?;
    if certs.is_empty() {
        return Err(CertError::NotPem {
            path: pki.ca_cert(),
        });
    }
    Ok(certs)
}

/// Step one: a new CA, trusted beside the old one, signs agents from now on.
pub fn begin(pki: &ControllerPki) -> Result<(), CertError> {
    if in_progress(pki) {
        return Err(CertError::Rotation(
            "a CA rotation has begun already: finish it first (`ca finish`)",
        ));
    }
    let old = certs_of(pki)?;
    let old_key = read(&pki.ca_key())?;
    let (name, key, cert) = new_ca()?;
    // The old CA is kept apart first: a failure past this point leaves it recoverable.
    write_public(&previous_cert(pki), &certificate_pem(&old[0]))?;
    write_private(&previous_key(pki), &old_key)?;
    write_private(&pki.ca_key(), &key.serialize_pem())?;
    write_public(&pki.ca_name(), &name)?;
    write_public(
        &pki.ca_cert(),
        &format!("{cert}{}", certificate_pem(&old[0])),
    )
}

/// Step two: the server's certificate from the new CA, and the old CA no longer trusted.
pub fn finish(pki: &ControllerPki) -> Result<(), CertError> {
    if !in_progress(pki) {
        return Err(CertError::Rotation(
            "no CA rotation has begun (`ca rotate` begins one)",
        ));
    }
    let names = server_names(pki)?;
    let name = read(&pki.ca_name())?;
    let key = rcgen::KeyPair::from_pem(&read(&pki.ca_key())?)?;
    issue_server(
        pki,
        names,
        &Issuer::new(ca_params(name.trim(), CA_VALID_DAYS)?, &key),
    )?;
    let current = certs_of(pki)?;
    write_public(&pki.ca_cert(), &certificate_pem(&current[0]))?;
    let _ = std::fs::remove_file(previous_key(pki));
    std::fs::remove_file(previous_cert(pki)).map_err(|source| CertError::Io {
        path: previous_cert(pki),
        source,
    })
}

/// The names and addresses the server's certificate is for now.
fn server_names(pki: &ControllerPki) -> Result<Vec<String>, CertError> {
    let not_pem = || CertError::NotPem {
        path: pki.server_cert(),
    };
    let der = CertificateDer::from_pem_file(pki.server_cert()).map_err(|_| not_pem())?;
    let (_, cert) = X509Certificate::from_der(der.as_ref()).map_err(|_| not_pem())?;
    let san = cert.subject_alternative_name().map_err(|_| not_pem())?;
    let names = san
        .map(|ext| {
            ext.value
                .general_names
                .iter()
                .filter_map(|name| match name {
                    GeneralName::DNSName(dns) => Some(dns.to_string()),
                    GeneralName::IPAddress(bytes) => ip(bytes).map(|ip| ip.to_string()),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(names)
}

fn ip(bytes: &[u8]) -> Option<IpAddr> {
    match bytes.len() {
        4 => <[u8; 4]>::try_from(bytes).ok().map(IpAddr::from),
        16 => <[u8; 16]>::try_from(bytes).ok().map(IpAddr::from),
        _ => None,
    }
}
