//! `iohr reliability scenarios create`: store a named, versioned spec.

use std::path::PathBuf;

use clap::Subcommand;
use iohr_domain::RunKind;
use serde::Deserialize;
use serde_json::json;

use crate::Ctx;
use crate::error::{Failure, Result};
use crate::output::{Table, emit, emit_json};
use crate::run::read_json_file;

#[derive(Subcommand, Debug)]
pub enum ScenariosCommand {
    /// Store a spec as a scenario; its version is the hash of its canonical JSON.
    Create {
        /// The scenario's id: the name its versions, runs and findings are grouped under.
        #[arg(long, value_name = "NAME")]
        name: String,
        /// The kind of run the spec is for (checks, load, scenario, faults, capacity,
        /// replay).
        #[arg(long, value_name = "KIND")]
        kind: RunKind,
        /// A JSON file with the spec (`-` reads stdin).
        #[arg(long, value_name = "FILE")]
        spec: PathBuf,
    },
}

#[derive(Debug, Deserialize)]
struct Created {
    id: String,
    version: String,
    kind: String,
    #[serde(default)]
    created_at: Option<String>,
}

pub async fn execute(ctx: &Ctx, command: ScenariosCommand) -> Result<u8> {
    let ScenariosCommand::Create { name, kind, spec } = command;
    let spec = read_json_file("--spec", &spec)?;
    let raw = ctx
        .api
        .post(
            "/v1/reliability/scenarios",
            &json!({"name": name, "kind": kind, "spec": spec}),
        )
        .await?;
    let created = Created::deserialize(&raw)
        .map_err(|e| Failure::protocol(format!("the answer is not a scenario: {e}")))?;
    if ctx.json {
        emit_json(&raw)?;
        return Ok(0);
    }
    let mut t = Table::plain();
    t.row(["id", &created.id]);
    t.row(["version", &created.version]);
    t.row(["kind", &created.kind]);
    t.row(["created", created.created_at.as_deref().unwrap_or("-")]);
    emit(&t.render())?;
    Ok(0)
}
