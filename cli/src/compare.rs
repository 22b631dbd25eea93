//! `iohr reliability compare BEFORE AFTER`: what is different now, as a pull request
//! wants it. BEFORE may be `baseline` (also as `--before baseline AFTER`): the after run's
//! found baseline (`GET /runs/{id}/baseline`). Exit status: 0 unchanged or improved,
//! 1 regressed, 2 refused, no baseline, or an error.

use clap::{Args, ValueEnum};
use iohr_domain::compare::{Comparison, Verdict};

use crate::Ctx;
use crate::client::query;
use crate::error::{Failure, Result};
use crate::output::{emit, emit_json};

#[derive(Args, Debug)]
pub struct CompareArgs {
    /// BEFORE AFTER: the run before the change (or `baseline`: the after run's found
    /// baseline) and the run after it; only AFTER with --before.
    #[arg(value_name = "RUN", num_args = 1..=2, required = true)]
    pub runs: Vec<String>,
    /// The run before the change, or `baseline`, given as a flag.
    #[arg(long, value_name = "ID|baseline")]
    pub before: Option<String>,
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

/// BEFORE and AFTER from the positional runs and `--before`.
fn before_after(args: &CompareArgs) -> Result<(String, String)> {
    match (&args.before, args.runs.as_slice()) {
        (Some(before), [after]) => Ok((before.clone(), after.clone())),
        (None, [before, after]) => Ok((before.clone(), after.clone())),
        (Some(_), _) => Err(Failure::usage("with --before, give only the AFTER run")),
        (None, _) => Err(Failure::usage(
            "give BEFORE and AFTER (or --before BEFORE AFTER)",
        )),
    }
}

pub async fn execute(ctx: &Ctx, args: CompareArgs) -> Result<u8> {
    let (before, after) = before_after(&args)?;
    let path = format!(
        "/v1/reliability/compare{}",
        query(&[
            ("before", Some(before)),
            ("after", Some(after)),
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
