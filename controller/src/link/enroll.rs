//! `Enrollment.Enroll` on the agent link's port: an enrollment token and a certificate
//! request in, the agent's certificate out.
//!
//! The caller has no client certificate yet, so the token is its only credential: it is
//! checked first (before the request is parsed), consumed atomically with the agent's new
//! certificate, and every refusal is a status whose message starts with its code.

use std::time::Duration;

use iohr_certs::csr::{CsrError, MAX_CSR_PEM, SignedAgent, sign_agent_csr};
use iohr_certs::{ControllerPki, EnrollmentToken};
use iohr_proto::link::enrollment_server::Enrollment;
use iohr_proto::link::{EnrollRequest, EnrollResponse};
use tonic::{Request, Response, Status};

use crate::store::{Consumed, Store, TokenRefusal, now_ms};

/// The largest enroll request taken: a token and a request of at most 16 KiB.
pub const MAX_ENROLL_MESSAGE: usize = 20 * 1024;

/// How long the certificates it signs live (`serve --enrolled-cert-validity`).
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct EnrollmentConfig {
    /// How long an enrolled agent's certificate is valid: 1d to 90d, default 7d. The
    /// agent renews it before then, or enrolls again with a new token once it has expired.
    #[arg(long, value_name = "DURATION", default_value = "7d",
          value_parser = iohr_domain::duration::between(DAY, 90 * DAY))]
    pub enrolled_cert_validity: Duration,
    /// The older form of --enrolled-cert-validity, in days.
    #[arg(long, hide = true, conflicts_with = "enrolled_cert_validity",
          value_parser = clap::value_parser!(i64).range(1..=90))]
    pub enrolled_cert_days: Option<i64>,
}

const DAY: Duration = Duration::from_secs(24 * 3600);

impl EnrollmentConfig {
    /// The certificates' lifetime, from whichever flag was given.
    pub fn lifetime(&self) -> Duration {
        match self.enrolled_cert_days.and_then(|d| u32::try_from(d).ok()) {
            Some(days) => DAY * days,
            None => self.enrolled_cert_validity,
        }
    }
}

impl Default for EnrollmentConfig {
    fn default() -> Self {
        EnrollmentConfig {
            enrolled_cert_validity: DAY * iohr_certs::ENROLLED_VALID_DAYS.unsigned_abs() as u32,
            enrolled_cert_days: None,
        }
    }
}

/// Signs agents' certificate requests with the controller's CA: enrollment's and
/// renewal's one way to a certificate, so both give the same lifetime and answer.
#[derive(Clone)]
pub struct Signer {
    pki: ControllerPki,
    ca_pem: String,
    lifetime: Duration,
}

impl Signer {
    pub fn new(pki: ControllerPki, ca_pem: String, config: EnrollmentConfig) -> Signer {
        Signer {
            pki,
            ca_pem,
            lifetime: config.lifetime(),
        }
    }

    /// Signs `csr_pem`'s key as agent `agent` of `account`; a request that is not right
    /// is INVALID_ARGUMENT `invalid_csr`.
    pub async fn sign(
        &self,
        csr_pem: String,
        account: &str,
        agent: &str,
    ) -> Result<SignedAgent, Status> {
        if csr_pem.len() > MAX_CSR_PEM {
            return Err(Status::invalid_argument(
                "invalid_csr: the request is larger than 16 KiB",
            ));
        }
        let (pki, account, agent, lifetime) = (
            self.pki.clone(),
            account.to_string(),
            agent.to_string(),
            self.lifetime,
        );
        // Reading the CA key and signing touch the disk: off the async workers.
        tokio::task::spawn_blocking(move || {
            sign_agent_csr(&pki, &csr_pem, &account, &agent, lifetime)
        })
        .await
        .map_err(|e| Status::internal(format!("signing_failed: {e}")))?
        .map_err(|e| match e {
            CsrError::Invalid(why) => Status::invalid_argument(format!("invalid_csr: {why}")),
            CsrError::Cert(error) => {
                tracing::error!(%error, "signing an agent certificate failed");
                Status::internal(format!("signing_failed: {error}"))
            }
        })
    }

    /// The answer that carries a signed certificate.
    pub fn response(&self, signed: SignedAgent, agent: String, account: String) -> EnrollResponse {
        EnrollResponse {
            certificate_pem: signed.cert_pem,
            ca_pem: self.ca_pem.clone(),
            agent_name: agent,
            account,
            not_after_ms: signed.not_after.unix_timestamp().saturating_mul(1000),
        }
    }
}

pub struct EnrollmentService {
    store: Store,
    signer: Signer,
}

impl EnrollmentService {
    pub fn new(store: Store, signer: Signer) -> EnrollmentService {
        EnrollmentService { store, signer }
    }
}

fn refused(refusal: TokenRefusal) -> Status {
    let why = match refusal {
        TokenRefusal::Invalid => "no enrollment token has this id and secret",
        TokenRefusal::Used => "this enrollment token was used already; create another",
        TokenRefusal::Expired => "this enrollment token has expired; create another",
    };
    Status::unauthenticated(format!("{}: {why}", refusal.code()))
}

pub(super) fn store_failed(error: impl std::fmt::Display) -> Status {
    tracing::error!(%error, "enrollment: the store failed");
    Status::unavailable(format!("store_unavailable: {error}"))
}

#[tonic::async_trait]
impl Enrollment for EnrollmentService {
    async fn enroll(
        &self,
        request: Request<EnrollRequest>,
    ) -> Result<Response<EnrollResponse>, Status> {
        let EnrollRequest { token, csr_pem } = request.into_inner();
        let token: EnrollmentToken = token
            .parse()
            .map_err(|e| Status::unauthenticated(format!("enrollment_token_invalid: {e}")))?;
        let now = now_ms();
        let grant = self
            .store
            .enrollment_grant(&token.id, &token.secret, now)
            .await
            .map_err(store_failed)?
            .map_err(|refusal| {
                tracing::warn!(token = %token.id, code = refusal.code(), "refused an enrollment");
                refused(refusal)
            })?;
        let signed = self
            .signer
            .sign(csr_pem, &grant.account, &grant.agent_name)
            .await?;
        match self
            .store
            .consume_enrollment(&grant, &token.secret, &signed.fingerprint, now_ms())
            .await
            .map_err(store_failed)?
        {
            Consumed::Enrolled { agent_id } => {
                tracing::info!(agent = %grant.agent_name, %agent_id, token = %token.id,
                    fingerprint = %signed.fingerprint, "agent enrolled");
            }
            Consumed::Refused(refusal) => return Err(refused(refusal)),
        }
        Ok(Response::new(self.signer.response(
            signed,
            grant.agent_name,
            grant.account,
        )))
    }
}

#[cfg(test)]
mod flag_tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Serve {
        #[command(flatten)]
        enrollment: EnrollmentConfig,
    }

    fn lifetime(args: &[&str]) -> Result<Duration, clap::Error> {
        Serve::try_parse_from(std::iter::once("serve").chain(args.iter().copied()))
            .map(|s| s.enrollment.lifetime())
    }

    #[test]
    fn the_validity_is_a_duration_and_the_days_flag_still_works() {
        assert_eq!(
            lifetime(&[]).unwrap(),
            EnrollmentConfig::default().lifetime()
        );
        assert_eq!(lifetime(&[]).unwrap(), DAY * 7);
        assert_eq!(
            lifetime(&["--enrolled-cert-validity", "36h"]).unwrap(),
            Duration::from_secs(36 * 3600)
        );
        assert_eq!(lifetime(&["--enrolled-cert-days", "3"]).unwrap(), DAY * 3);
        for refused in [
            &["--enrolled-cert-validity", "1h"][..],
            &["--enrolled-cert-validity", "91d"],
            &["--enrolled-cert-days", "0"],
            &[
                "--enrolled-cert-days",
                "2",
                "--enrolled-cert-validity",
                "2d",
            ],
        ] {
            assert!(lifetime(refused).is_err(), "{refused:?}");
        }
    }
}
