//! `iohr-controller agent-token create`: a one-time enrollment token for one agent.

use std::time::Duration;

use anyhow::{Context, bail};
use clap::Subcommand;
use iohr_certs::{ControllerPki, EnrollmentToken};
use iohr_controller::store::{EnrollmentTokenRow, format_ms, now_ms};

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
    /// List the account's enrollment tokens: id, agent, created, expiry and whether used
    /// (never a secret).
    List {
        #[command(flatten)]
        store: StoreArgs,
        #[arg(long)]
        account: String,
        /// JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Revoke an unused enrollment token: an enrollment with it is refused from now on
    /// (`enrollment_token_invalid`). A used one cannot be revoked: `agent remove` its agent.
    Revoke {
        #[command(flatten)]
        store: StoreArgs,
        #[arg(long)]
        account: String,
        #[arg(long)]
        id: String,
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
    match command {
        AgentTokenCommand::Create {
            store,
            account,
            agent,
            ttl,
        } => create(store, &account, &agent, ttl).await,
        AgentTokenCommand::List {
            store,
            account,
            json,
        } => {
            let store = store.open().await?;
            let account = find_account(&store, &account).await?;
            let tokens = store.enrollment_tokens(&account.id).await?;
            print!("{}", render(&tokens, now_ms(), json));
            Ok(())
        }
        AgentTokenCommand::Revoke { store, account, id } => {
            let store = store.open().await?;
            let account = find_account(&store, &account).await?;
            store.revoke_enrollment_token(&account.id, &id).await?;
            println!("revoked enrollment token {id}: an enrollment with it is refused from now on");
            Ok(())
        }
    }
}

/// A token's state at `now`.
fn state(token: &EnrollmentTokenRow, now: i64) -> String {
    match token.used_at {
        Some(at) => format!("used {}", format_ms(at)),
        None if token.expires_at <= now => "expired".to_string(),
        None => "unused".to_string(),
    }
}

fn render(tokens: &[EnrollmentTokenRow], now: i64, as_json: bool) -> String {
    if as_json {
        let list: Vec<_> = tokens
            .iter()
            .map(|t| {
                serde_json::json!({
                    "id": t.id, "agent": t.agent_name,
                    "created_at": format_ms(t.created_at),
                    "expires_at": format_ms(t.expires_at),
                    "used_at": t.used_at.map(format_ms),
                })
            })
            .collect();
        return format!("{}\n", serde_json::json!(list));
    }
    let mut rows = vec![["ID", "AGENT", "CREATED", "EXPIRES", "STATUS"].map(str::to_string)];
    for t in tokens {
        rows.push([
            t.id.clone(),
            t.agent_name.clone(),
            format_ms(t.created_at),
            format_ms(t.expires_at),
            state(t, now),
        ]);
    }
    crate::token_list::table(&rows)
}

async fn create(store: StoreArgs, account: &str, agent: &str, ttl: Duration) -> anyhow::Result<()> {
    let pki = ControllerPki::in_data_dir(&store.data_dir);
    if !pki.exists() {
        bail!(
            "no CA in {}: run `iohr-controller init` first",
            pki.dir.display()
        );
    }
    let (_, ca) = iohr_certs::csr::ca_with_fingerprint(&pki).context("reading the CA")?;
    let store = store.open().await?;
    let account = find_account(&store, account).await?;
    let mut random = [0u8; iohr_certs::token::SECRET_BYTES];
    rand::fill(&mut random);
    let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
    let expires_at = now_ms().saturating_add(ttl_ms);
    let secret = hex::encode(random);
    let id = store
        .create_enrollment_token(&account.id, agent, &secret, expires_at)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_read_as_a_table_with_their_state() {
        let token = |id: &str, expires_at, used_at| EnrollmentTokenRow {
            id: id.into(),
            agent_name: "edge-1".into(),
            created_at: 0,
            expires_at,
            used_at,
        };
        let tokens = [
            token("t1", 120_000, None),
            token("t2", 120_000, Some(60_000)),
            token("t3", 30_000, None),
        ];
        let text = render(&tokens, 60_000, false);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("ID  AGENT   CREATED"), "{text}");
        assert!(lines[1].ends_with("unused"), "{text}");
        assert!(
            lines[2].ends_with("used 1970-01-01T00:01:00.000Z"),
            "{text}"
        );
        assert!(lines[3].ends_with("expired"), "{text}");
        let json: serde_json::Value =
            serde_json::from_str(&render(&tokens, 60_000, true)).expect("json");
        assert_eq!(json[1]["used_at"], "1970-01-01T00:01:00.000Z");
        assert_eq!(json[0]["used_at"], serde_json::Value::Null);
        assert!(!text.contains("hash") && !json.to_string().contains("hash"));
    }
}
