//! `iohr reliability forges set | list | delete | reports`: the account's forge
//! credentials, which the controller writes pull request comments and commit statuses
//! with, and its log of doing so. A token never appears on the command line (shell
//! history, `ps`): `set` reads it from an environment variable the caller names.

use clap::Subcommand;
use serde_json::{Value, json};

use crate::Ctx;
use crate::client::segment;
use crate::error::{Failure, Result};
use crate::output::{Table, emit, emit_json};

const PATH: &str = "/v1/reliability/forges";

#[derive(Subcommand, Debug)]
pub enum ForgesCommand {
    /// The forges the account has credentials for, with their API URLs; never a token.
    List,
    /// Store the account's token for a forge, or replace it (needs an admin's token:
    /// reliability:admin).
    Set {
        /// `github` or `gitlab`.
        forge: String,
        /// Read the forge's token from this environment variable.
        #[arg(long, value_name = "VAR")]
        token_from_env: String,
        /// The forge's API: GitHub Enterprise's https://HOST/api/v3, a self-hosted
        /// GitLab's https://HOST/api/v4 (default: https://api.github.com,
        /// https://gitlab.com/api/v4).
        #[arg(long, value_name = "URL")]
        api_url: Option<String>,
    },
    /// Delete the account's credentials for a forge (needs an admin's token).
    Delete {
        /// `github` or `gitlab`.
        forge: String,
    },
    /// The reporter's log: each attempt to write a change's comment and status, newest
    /// first.
    Reports {
        /// Lines, 1 to 500.
        #[arg(long, default_value_t = 20)]
        limit: u32,
    },
}

fn forge_path(forge: &str) -> Result<String> {
    Ok(format!("{PATH}/{}", segment("the forge", forge)?))
}

pub async fn execute(ctx: &Ctx, command: ForgesCommand) -> Result<u8> {
    match command {
        ForgesCommand::List => {
            let raw = ctx.api.get(PATH).await?;
            if ctx.json {
                return emit_json(&raw).map(|()| 0);
            }
            let forges = raw["forges"]
                .as_array()
                .ok_or_else(|| Failure::protocol("the answer lists no forges"))?;
            if forges.is_empty() {
                emit("no forges")?;
            } else {
                let mut table = Table::new(&["FORGE", "API", "UPDATED", "BY"]);
                for forge in forges {
                    table.row([
                        text(forge, "forge"),
                        text(forge, "api_url"),
                        text(forge, "updated_at"),
                        text(forge, "updated_by"),
                    ]);
                }
                emit(&table.render())?;
            }
        }
        ForgesCommand::Set {
            forge,
            token_from_env,
            api_url,
        } => {
            let path = forge_path(&forge)?;
            let token = std::env::var(&token_from_env).map_err(|_| {
                Failure::usage(format!(
                    "the environment variable {token_from_env} is not set"
                ))
            })?;
            let mut body = json!({ "token": token });
            if let Some(url) = api_url {
                body["api_url"] = json!(url);
            }
            let raw = ctx.api.put(&path, &body).await?;
            if ctx.json {
                emit_json(&raw)?;
            } else {
                emit(&format!("set {forge} ({})", text(&raw, "api_url")))?;
            }
        }
        ForgesCommand::Delete { forge } => {
            ctx.api.delete(&forge_path(&forge)?).await?;
            if ctx.json {
                emit_json(&json!({ "deleted": forge }))?;
            } else {
                emit(&format!("deleted {forge}"))?;
            }
        }
        ForgesCommand::Reports { limit } => {
            let raw = ctx
                .api
                .get(&format!("{PATH}/reports?limit={limit}"))
                .await?;
            if ctx.json {
                return emit_json(&raw).map(|()| 0);
            }
            let reports = raw["reports"]
                .as_array()
                .ok_or_else(|| Failure::protocol("the answer lists no reports"))?;
            if reports.is_empty() {
                emit("no reports")?;
            } else {
                let mut table = Table::new(&["AT", "CHANGE", "RUN", "STATE", "OUTCOME", "DETAIL"]);
                for report in reports {
                    let detail = match (report["detail"].as_str(), report["status_code"].as_i64()) {
                        (Some(class), Some(code)) => format!("{class} {code}"),
                        (Some(class), None) => class.to_string(),
                        _ => "-".to_string(),
                    };
                    table.row([
                        text(report, "at"),
                        text(report, "change"),
                        text(report, "run_id"),
                        text(report, "state"),
                        text(report, "outcome"),
                        detail,
                    ]);
                }
                emit(&table.render())?;
            }
        }
    }
    Ok(0)
}

fn text(value: &Value, key: &str) -> String {
    value[key].as_str().unwrap_or("-").to_string()
}
