//! `iohr-controller agent-token create`: a one-time enrollment token for one agent.

use std::time::Duration;

use anyhow::{Context, bail};
use clap::Subcommand;
use iohr_certs::{ControllerPki, EnrollmentToken};
use iohr_controller::store::{format_ms, now_ms};

use crate::{StoreArgs, find_account};

/// The longest an enrollment token may wait to be used.
const MAX_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

#[derive(Subcommand)]
pub enum AgentTokenCommand {
    /// Create a one-time enrollment token for agent NAME of account A; it is printed once,
    /// alone on the last line, and holds the CA's fingerprint for `iohr-agent enroll`.
    Create {
        #[command(flatten)]
        store: StoreArgs,
        #[arg(long)]
        account: String,
        /// The agent's name (1 to 64 of A-Z a-z 0-9 . _ -). An agent of that name that
        /// exists gets a new certificate in place of its old one.
        #[arg(long, value_parser = parse_agent_name)]
        agent: String,
        /// How long the token may wait to be used, such as 30m or 2d (1s to 7d).
        #[arg(long, default_value = "1h", value_parser = parse_ttl)]
        ttl: Duration,
    },
}

fn parse_ttl(text: &str) -> Result<Duration, String> {
    let ttl = humantime::parse_duration(text).map_err(|e| format!("{e} (such as 1h or 2d)"))?;
    if ttl < Duration::from_secs(1) || ttl > MAX_TTL {
        return Err("must be between 1s and 7d".into());
    }
    Ok(ttl)
}

fn parse_agent_name(text: &str) -> Result<String, String> {
    let fits = (1..=64).contains(&text.len())
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if fits {
        Ok(text.to_string())
    } else {
        Err("1 to 64 of A-Z a-z 0-9 . _ -".into())
    }
}

pub async fn run(command: AgentTokenCommand) -> anyhow::Result<()> {
    let AgentTokenCommand::Create {
        store,
        account,
        agent,
        ttl,
    } = command;
    let pki = ControllerPki::in_data_dir(&store.data_dir);
    if !pki.exists() {
        bail!(
            "no CA in {}: run `iohr-controller init` first",
            pki.dir.display()
        );
    }
    let (_, ca) = iohr_certs::csr::ca_with_fingerprint(&pki).context("reading the CA")?;
    let store = store.open().await?;
    let account = find_account(&store, &account).await?;
    let mut random = [0u8; iohr_certs::token::SECRET_BYTES];
    rand::fill(&mut random);
    let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
    let expires_at = now_ms().saturating_add(ttl_ms);
    let secret = hex::encode(random);
    let id = store
        .create_enrollment_token(&account.id, &agent, &secret, expires_at)
        .await?;
    let token = EnrollmentToken {
        id,
        secret,
        ca: ca.clone(),
    };
    println!(
        "enrollment token {} for agent {agent} of account {}, one use, expires {}",
        token.id,
        account.name,
        format_ms(expires_at)
    );
    println!("controller CA {ca}");
    println!("{}", token.to_text());
    Ok(())
}
