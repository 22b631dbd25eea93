//! Certificate renewal, agent side: two thirds into its certificate's lifetime, the agent
//! asks the controller for the next one on the connection its session runs on
//! (`AgentLink.Renew`), with a key made here (the private key never leaves this host).
//!
//! The session goes on as it was: a TLS connection is authenticated once, at its
//! handshake. The new certificate takes effect at the next connection, which reads the
//! identity files again ([`crate::link`]). A renewal that fails is tried again while the
//! current certificate is still valid; once it has expired the agent must enroll again.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use iohr_certs::AgentIdentityFiles;
use iohr_certs::enrolling::{CertLifetime, PendingKey};
use iohr_proto::link::RenewRequest;
use iohr_proto::link::agent_link_client::AgentLinkClient;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

/// How long a renewal call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(15);
/// Retries after a failure: a tenth of what is left of the certificate, within these.
const RETRY_MIN: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(300);

#[derive(Debug, thiserror::Error)]
enum RenewError {
    #[error(transparent)]
    Cert(#[from] iohr_certs::CertError),
    #[error("the controller refused: {}", .0.message())]
    Refused(#[from] tonic::Status),
    #[error("the controller did not answer within {CALL_TIMEOUT:?}")]
    Timeout,
}

/// Keeps the identity in `dir` renewed over `channel` until `stop` (the session's end).
pub async fn keep_renewed(channel: Channel, dir: PathBuf, stop: CancellationToken) {
    let files = AgentIdentityFiles::in_dir(&dir);
    loop {
        let lifetime = match CertLifetime::of_pem_file(&files.cert()) {
            Ok(lifetime) => lifetime,
            Err(error) => {
                tracing::warn!(%error, "cannot read the agent certificate; not renewing it");
                return;
            }
        };
        crate::metrics::certificate_expires(unix_secs(lifetime.not_after));
        let due = until(lifetime.renew_at());
        tracing::debug!(in_s = due.as_secs(), "certificate renewal scheduled");
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(due) => {}
        }
        let began = std::time::Instant::now();
        match renew_once(&channel, &dir).await {
            Ok(not_after) => {
                crate::metrics::renewed(true);
                tracing::info!(
                    took_ms = began.elapsed().as_millis() as u64,
                    expires = %humantime::format_rfc3339_seconds(not_after),
                    "certificate renewed; the next connection uses it"
                );
            }
            Err(error) => {
                crate::metrics::renewed(false);
                let wait = (until(lifetime.not_after) / 10).clamp(RETRY_MIN, RETRY_MAX);
                tracing::warn!(%error, retry_s = wait.as_secs(), "certificate renewal failed");
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(wait) => {}
                }
            }
        }
    }
}

/// One renewal: a new key, its request, the signed certificate installed with it.
async fn renew_once(channel: &Channel, dir: &std::path::Path) -> Result<SystemTime, RenewError> {
    let pending = PendingKey::create(dir)?;
    let request = RenewRequest {
        csr_pem: pending.csr_pem.clone(),
    };
    let mut client = AgentLinkClient::new(channel.clone());
    let answer = match tokio::time::timeout(CALL_TIMEOUT, client.renew(request)).await {
        Ok(Ok(answer)) => answer.into_inner(),
        Ok(Err(status)) => {
            pending.discard();
            return Err(status.into());
        }
        Err(_) => {
            pending.discard();
            return Err(RenewError::Timeout);
        }
    };
    // The CA comes from the controller this connection verified: how a CA rotation's
    // bundle reaches the agents.
    let files = pending.install(&answer.certificate_pem, &answer.ca_pem, &answer.agent_name)?;
    Ok(CertLifetime::of_pem_file(&files.cert())?.not_after)
}

/// How long from now until `at` (zero when it has passed).
fn until(at: SystemTime) -> Duration {
    at.duration_since(SystemTime::now()).unwrap_or_default()
}

fn unix_secs(at: SystemTime) -> i64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_renewal_retries_within_its_bounds() {
        let now = SystemTime::now();
        let wait = |left: Duration| (until(now + left) / 10).clamp(RETRY_MIN, RETRY_MAX);
        assert_eq!(wait(Duration::ZERO), RETRY_MIN);
        assert!(wait(Duration::from_secs(100)) <= Duration::from_secs(10));
        assert_eq!(wait(Duration::from_secs(7 * 24 * 3600)), RETRY_MAX);
    }
}
