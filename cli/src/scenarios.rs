//! `iohr reliability scenarios create|list|show`: store a named, versioned spec; list the
//! names; show a name's versions (with their runs) or one version's spec.

use std::path::PathBuf;

use clap::Subcommand;
use iohr_domain::RunKind;
use serde::Deserialize;
use serde_json::json;

use crate::Ctx;
use crate::client::segment;
use crate::error::{Failure, Result};
use crate::output::{Table, emit, emit_json, or_dash};
use crate::page;
use crate::run::read_json_file;

#[derive(Subcommand, Debug)]
pub enum ScenariosCommand {
    /// Store a spec as a scenario; its version is the hash of its canonical JSON.
    Create {
        /// The scenario's id: the name its versions, runs and findings are grouped under.
        #[arg(long, value_name = "NAME")]
        name: String,
        // The kinds in the help are the registry's.
        #[arg(long, value_name = "KIND", help = format!("The kind of run the spec is for ({})", RunKind::listed("or")))]
        kind: RunKind,
        /// A JSON file with the spec (`-` reads stdin).
        #[arg(long, value_name = "FILE")]
        spec: PathBuf,
    },
    /// The account's scenario names: kind, how many versions, the newest.
    List {
        /// At most this many names on the page.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        limit: Option<u32>,
        /// The `next_cursor` of the previous page.
        #[arg(long, value_name = "C")]
        cursor: Option<String>,
    },
    /// A name's versions, newest first, with the runs of each; with --version, that
    /// version's spec.
    Show {
        /// The scenario's name.
        id: String,
        /// One version (`sha256:...`): print its spec.
        #[arg(long, value_name = "V")]
        version: Option<String>,
    },
}

#[derive(Debug, Deserialize)]
struct Created {
    id: String,
    version: String,
    kind: String,
    #[serde(default)]
    created_at: Option<String>,
    /// `created`, `named` or `exists` (older controllers say nothing).
    #[serde(default)]
    stored: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Name {
    id: String,
    kind: String,
    versions: u64,
    latest_version: String,
    latest_at: String,
}

#[derive(Debug, Deserialize)]
struct Versions {
    id: String,
    kind: String,
    versions: Vec<Version>,
}

#[derive(Debug, Deserialize)]
struct Version {
    version: String,
    created_at: String,
    runs: u64,
    last_run: Option<String>,
}

pub async fn execute(ctx: &Ctx, command: ScenariosCommand) -> Result<u8> {
    match command {
        ScenariosCommand::Create { name, kind, spec } => create(ctx, name, kind, spec).await,
        ScenariosCommand::List { limit, cursor } => {
            let filters = [("limit", limit.map(|n| n.to_string()))];
            page::list(ctx, &LISTING, &filters, cursor, render_page).await
        }
        ScenariosCommand::Show { id, version } => show(ctx, &id, version.as_deref()).await,
    }
}

async fn create(ctx: &Ctx, name: String, kind: RunKind, spec: PathBuf) -> Result<u8> {
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
    emit(&render_created(&created))?;
    Ok(0)
}

fn render_created(created: &Created) -> String {
    let mut t = Table::plain();
    t.row(["id", &created.id]);
    t.row(["version", &created.version]);
    t.row(["kind", &created.kind]);
    t.row(["created", created.created_at.as_deref().unwrap_or("-")]);
    let stored = match created.stored.as_deref() {
        Some("created") => "a new version, named ".to_string() + &created.id,
        Some("named") => format!(
            "this spec was stored already; {} now names that version too",
            created.id
        ),
        Some("exists") => format!("unchanged: {} already names this version", created.id),
        other => or_dash(other),
    };
    t.row(["stored", &stored]);
    t.render()
}

const LISTING: page::Listing = page::Listing {
    path: "/v1/reliability/scenarios",
    field: "scenarios",
    none: "no scenarios\n",
    command: "iohr reliability scenarios list",
};

fn render_page(names: &[Name], next: Option<&str>, filters: &[(&str, Option<String>)]) -> String {
    page::render(
        &LISTING,
        names,
        |names| {
            let mut t = Table::new(&["ID", "KIND", "VERSIONS", "LATEST", "SINCE"]);
            for n in names {
                t.row([
                    n.id.clone(),
                    n.kind.clone(),
                    n.versions.to_string(),
                    n.latest_version.clone(),
                    n.latest_at.clone(),
                ]);
            }
            t.render()
        },
        next,
        filters,
    )
}

async fn show(ctx: &Ctx, id: &str, version: Option<&str>) -> Result<u8> {
    let mut path = format!(
        "/v1/reliability/scenarios/{}",
        segment("the scenario ID", id)?
    );
    if let Some(version) = version {
        path.push_str(&format!("/versions/{}", segment("the version", version)?));
    }
    let raw = ctx.api.get(&path).await?;
    if ctx.json {
        emit_json(&raw)?;
        return Ok(0);
    }
    if version.is_some() {
        let spec = serde_json::to_string_pretty(&raw["spec"])
            .map_err(|e| Failure::protocol(format!("the answer has no spec: {e}")))?;
        emit(&spec)?;
        return Ok(0);
    }
    let versions = Versions::deserialize(&raw)
        .map_err(|e| Failure::protocol(format!("the answer is not a scenario: {e}")))?;
    emit(&render_versions(&versions))?;
    Ok(0)
}

fn render_versions(v: &Versions) -> String {
    let count = match v.versions.len() {
        1 => "1 version".to_string(),
        n => format!("{n} versions"),
    };
    let mut out = format!("{} ({}), {count}\n", v.id, v.kind);
    let mut t = Table::new(&["VERSION", "SINCE", "RUNS", "LAST RUN"]);
    for version in &v.versions {
        t.row([
            version.version.clone(),
            version.created_at.clone(),
            version.runs.to_string(),
            or_dash(version.last_run.as_deref()),
        ]);
    }
    out.push_str(&t.render());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storing_says_what_happened_to_the_name() {
        let created = |stored: &str| Created {
            id: "smoke".into(),
            version: "sha256:ab".into(),
            kind: "checks".into(),
            created_at: None,
            stored: Some(stored.into()),
        };
        assert!(render_created(&created("named")).contains("smoke now names that version too"));
        assert!(render_created(&created("exists")).contains("unchanged"));
        assert!(render_created(&created("created")).contains("a new version, named smoke"));
    }

    #[test]
    fn versions_read_as_a_table() {
        let text = render_versions(&Versions {
            id: "smoke".into(),
            kind: "checks".into(),
            versions: vec![Version {
                version: "sha256:ab".into(),
                created_at: "2026-12-01T10:00:00.000Z".into(),
                runs: 3,
                last_run: Some("r9".into()),
            }],
        });
        assert_eq!(
            text,
            "smoke (checks), 1 version\n\
             VERSION    SINCE                     RUNS  LAST RUN\n\
             sha256:ab  2026-12-01T10:00:00.000Z  3     r9\n"
        );
    }
}
