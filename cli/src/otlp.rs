//! `iohr reliability otlp show | set | delete`: the account's OpenTelemetry export, where
//! its runs' per-second figures go as OTLP metrics. A header's value (an API key) never
//! appears on the command line (shell history, `ps`): `set` reads each from an
//! environment variable the caller names, and `show` lists the headers' names only.

use std::collections::BTreeMap;

use clap::Subcommand;
use serde_json::{Value, json};

use crate::Ctx;
use crate::error::{Failure, Result};
use crate::output::{emit, emit_json};

const PATH: &str = "/v1/reliability/otlp";

#[derive(Subcommand, Debug)]
pub enum OtlpCommand {
    /// The account's export: its endpoint, its headers' names, and the load frames
    /// exported and dropped.
    Show,
    /// Export the account's runs to an OTLP/HTTP collector, or replace the export (its
    /// headers with it).
    Set {
        /// The collector's base URL (as OTEL_EXPORTER_OTLP_ENDPOINT); metrics go to
        /// ENDPOINT/v1/metrics.
        #[arg(long, value_name = "URL")]
        endpoint: String,
        /// A header sent with every export, its value read from an environment variable:
        /// NAME=VAR (repeatable).
        #[arg(long = "header-from-env", value_name = "NAME=VAR")]
        headers: Vec<String>,
    },
    /// Stop exporting (the export and its counts are deleted).
    Delete,
}

/// The headers to send, each value read from the variable its argument names.
fn headers(args: &[String]) -> Result<BTreeMap<String, String>> {
    let mut headers = BTreeMap::new();
    for arg in args {
        let Some((name, var)) = arg.split_once('=') else {
            return Err(Failure::usage(format!(
                "--header-from-env {arg}: write NAME=VAR (the header's name, the variable holding its value)"
            )));
        };
        let value = std::env::var(var)
            .map_err(|_| Failure::usage(format!("the environment variable {var} is not set")))?;
        headers.insert(name.to_string(), value);
    }
    Ok(headers)
}

fn describe(export: &Value) -> String {
    let text = |key: &str| export[key].as_str().unwrap_or("-").to_string();
    let names: Vec<&str> = export["headers"]
        .as_array()
        .map(|h| h.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    format!(
        "endpoint  {}\nheaders   {}\nexported  {} frames (last {})\ndropped   {} frames (last error {} at {})",
        text("endpoint"),
        if names.is_empty() {
            "-".to_string()
        } else {
            names.join(", ")
        },
        export["exported_frames"],
        text("last_exported_at"),
        export["dropped_frames"],
        text("last_error"),
        text("last_error_at"),
    )
}

pub async fn execute(ctx: &Ctx, command: OtlpCommand) -> Result<u8> {
    match command {
        OtlpCommand::Show => {
            let raw = ctx.api.get(PATH).await?;
            if ctx.json {
                return emit_json(&raw).map(|()| 0);
            }
            emit(&describe(&raw))?;
        }
        OtlpCommand::Set {
            endpoint,
            headers: args,
        } => {
            let body = json!({ "endpoint": endpoint, "headers": headers(&args)? });
            let raw = ctx.api.put(PATH, &body).await?;
            if ctx.json {
                emit_json(&raw)?;
            } else {
                emit(&format!("exporting to {endpoint}"))?;
            }
        }
        OtlpCommand::Delete => {
            ctx.api.delete(PATH).await?;
            if ctx.json {
                emit_json(&json!({ "deleted": "otlp" }))?;
            } else {
                emit("the OpenTelemetry export is deleted")?;
            }
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_names_the_variable_its_value_is_in() {
        // PATH: a variable every test process has, read as any other.
        let read = headers(&["x-api-key=PATH".to_string()]).unwrap();
        assert_eq!(read["x-api-key"], std::env::var("PATH").unwrap());
        assert!(headers(&["x-api-key".to_string()]).is_err());
        assert!(headers(&["x-api-key=IOHR_TEST_OTLP_UNSET".to_string()]).is_err());
    }
}
