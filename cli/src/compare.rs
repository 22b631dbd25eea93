//! `iohr reliability compare BEFORE AFTER`: what is different now, as a pull request
//! wants it. Exit status: 0 unchanged or improved, 1 regressed, 2 refused or an error.

use clap::{Args, ValueEnum};
use iohr_domain::compare::{Comparison, Verdict};

use crate::Ctx;
use crate::client::query;
use crate::error::{Failure, Result};
use crate::output::{emit, emit_json};

#[derive(Args, Debug)]
pub struct CompareArgs {
    /// The run before the change.
    pub before: String,
    /// The run after it.
    pub after: String,
    /// `text` (default) or `markdown` (for a pull request).
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Changes smaller than this share are noise (default 0.02).
    #[arg(long)]
    pub noise_floor: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Text,
    Markdown,
}

pub async fn execute(ctx: &Ctx, args: CompareArgs) -> Result<u8> {
    let path = format!(
        "/v1/reliability/compare{}",
        query(&[
            ("before", Some(args.before.clone())),
            ("after", Some(args.after.clone())),
            ("noise_floor", args.noise_floor.map(|f| f.to_string())),
        ])
    );
    let raw = ctx.api.get(&path).await?;
    let comparison: Comparison = serde_json::from_value(raw.clone())
        .map_err(|e| Failure::protocol(format!("the answer is not a comparison: {e}")))?;
    if ctx.json {
        emit_json(&raw)?;
    } else {
        emit(&render(&comparison, args.format))?;
    }
    Ok(match comparison.verdict {
        Verdict::Regressed => 1,
        Verdict::Improved | Verdict::Unchanged => 0,
    })
}

fn render(comparison: &Comparison, format: Format) -> String {
    match format {
        Format::Text => comparison
            .lines()
            .iter()
            .map(|l| format!("{l}\n"))
            .collect(),
        Format::Markdown => comparison.markdown(),
    }
}
