//! `iohr-agent enroll`: make the key pair here, have the controller sign it, and write
//! the identity `iohr-agent run --identity` reads.

use anyhow::Context;
use iohr_certs::enrolling::PendingKey;
use iohr_certs::{CaFingerprint, EnrollmentToken};

use crate::cli::EnrollArgs;

pub async fn enroll(args: EnrollArgs) -> anyhow::Result<()> {
    let token: EnrollmentToken = args.token.parse().context("--token")?;
    let pin: CaFingerprint = match &args.ca_fingerprint {
        Some(given) => given.parse().context("--ca-fingerprint")?,
        None => token.ca.clone(),
    };
    let pending = PendingKey::create(&args.identity)
        .with_context(|| format!("making the key in {}", args.identity.display()))?;
    let answer =
        match iohr_agent::enroll::enroll(&args.controller, &token, &pin, pending.csr_pem.clone())
            .await
        {
            Ok(answer) => answer,
            Err(error) => {
                pending.discard();
                return Err(error.into());
            }
        };
    let files = pending
        .install(&answer.certificate_pem, &answer.ca_pem, &answer.agent_name)
        .with_context(|| format!("writing the identity in {}", args.identity.display()))?;
    println!(
        "enrolled agent {} of account {}: wrote {}, {}, {}",
        answer.agent_name,
        answer.account,
        files.key().display(),
        files.cert().display(),
        files.ca_cert().display()
    );
    println!(
        "certificate valid until {} (controller CA {pin})",
        format_ms(answer.not_after_ms)
    );
    Ok(())
}

fn format_ms(ms: i64) -> String {
    let t =
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    humantime::format_rfc3339_seconds(t).to_string()
}
