//! `iohr reliability secrets list | set | delete`: the account's secrets, which specs use as
//! `${secret:NAME}`. A value never appears on the command line (shell history, `ps`): `set`
//! reads it from standard input or from an environment variable the caller names.

use std::io::Read;

use clap::Subcommand;
use serde_json::{Value, json};

use crate::Ctx;
use crate::client::segment;
use crate::error::{Failure, Result};
use crate::output::{Table, emit, emit_json};

const PATH: &str = "/v1/reliability/secrets";

/// The most read from standard input: the API's own limit on a value is far below it.
const MAX_VALUE_READ: u64 = 64 * 1024;

#[derive(Subcommand, Debug)]
pub enum SecretsCommand {
    /// The account's secrets: names, who set them and when; never a value.
    List,
    /// Store a secret, or replace its value (needs an admin's token: reliability:admin).
    /// The value is read from standard input (one trailing newline dropped), or from
    /// --from-env.
    Set {
        /// The secret's name: A-Z, 0-9 and '_', at most 64.
        name: String,
        /// Read the value from this environment variable instead of standard input.
        #[arg(long, value_name = "VAR")]
        from_env: Option<String>,
    },
    /// Delete a secret (needs an admin's token).
    Delete {
        /// The secret's name.
        name: String,
    },
}

fn secret_path(name: &str) -> Result<String> {
    Ok(format!("{PATH}/{}", segment("the secret's name", name)?))
}

/// The value to store: the named variable, or standard input without one trailing newline
/// (what `echo` and a heredoc add).
fn value(from_env: Option<&str>) -> Result<String> {
    if let Some(var) = from_env {
        return std::env::var(var)
            .map_err(|_| Failure::usage(format!("the environment variable {var} is not set")));
    }
    let mut text = String::new();
    std::io::stdin()
        .take(MAX_VALUE_READ)
        .read_to_string(&mut text)
        .map_err(|e| Failure::usage(format!("cannot read the value from standard input: {e}")))?;
    Ok(without_trailing_newline(text))
}

fn without_trailing_newline(mut text: String) -> String {
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
    text
}

pub async fn execute(ctx: &Ctx, command: SecretsCommand) -> Result<u8> {
    match command {
        SecretsCommand::List => {
            let raw = ctx.api.get(PATH).await?;
            if ctx.json {
                return emit_json(&raw).map(|()| 0);
            }
            let secrets = raw["secrets"]
                .as_array()
                .ok_or_else(|| Failure::protocol("the answer lists no secrets"))?;
            if secrets.is_empty() {
                emit("no secrets")?;
            } else {
                let mut table = Table::new(&["NAME", "UPDATED", "BY"]);
                for secret in secrets {
                    table.row([
                        text(secret, "name"),
                        text(secret, "updated_at"),
                        text(secret, "updated_by"),
                    ]);
                }
                emit(&table.render())?;
            }
        }
        SecretsCommand::Set { name, from_env } => {
            let path = secret_path(&name)?;
            let value = value(from_env.as_deref())?;
            let raw = ctx.api.put(&path, &json!({ "value": value })).await?;
            if ctx.json {
                emit_json(&raw)?;
            } else {
                emit(&format!("set secret {name}"))?;
            }
        }
        SecretsCommand::Delete { name } => {
            ctx.api.delete(&secret_path(&name)?).await?;
            if ctx.json {
                emit_json(&json!({ "deleted": name }))?;
            } else {
                emit(&format!("deleted secret {name}"))?;
            }
        }
    }
    Ok(0)
}

fn text(value: &Value, key: &str) -> String {
    value[key].as_str().unwrap_or("-").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_trailing_newline_is_dropped_and_nothing_else() {
        assert_eq!(without_trailing_newline("s3cret\n".into()), "s3cret");
        assert_eq!(without_trailing_newline("s3cret\r\n".into()), "s3cret");
        assert_eq!(without_trailing_newline("s3cret\n\n".into()), "s3cret\n");
        assert_eq!(without_trailing_newline(" s3cret ".into()), " s3cret ");
    }
}
