//! `iohr reliability gate --before ID --after ID`: the comparison a CI job fails on, in the
//! forms CI systems read. It waits (bounded) for both runs to end, compares them, prints the
//! text lines, and writes what was asked: a markdown file, a JUnit XML report (a test case
//! per check, invariant and threshold of the after run and per compared measure), and,
//! inside GitHub Actions, the job summary and one annotation per worse difference.
//!
//! `--before baseline` takes the after run's found baseline (`GET /runs/{id}/baseline`);
//! when it has none, that is not a pass or a failure: exit 3, or 0 with
//! `--allow-no-baseline` (a line on stderr says so, the JUnit case is skipped).
//!
//! Exit status: 0 unchanged or improved, 1 regressed, 2 a usage error, 3 no verdict (a run
//! that errored or was cancelled, a refused comparison, a timeout, the API unreachable, no
//! baseline).

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use iohr_domain::compare::{Comparison, Verdict};
use iohr_domain::{RunRecord, RunStatus};
use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};
use serde_json::Value;
use tokio::time::Instant;

use crate::Ctx;
use crate::client::query;
use crate::error::{Failure, Result};
use crate::output::{emit, emit_json, note};
use crate::runs::{parse_record, run_path};

/// The gate's verdicts as exit statuses.
pub const EXIT_PASSED: u8 = 0;
pub const EXIT_REGRESSED: u8 = 1;
pub const EXIT_NO_VERDICT: u8 = 3;

/// The `--before` that names the after run's found baseline.
const BASELINE: &str = "baseline";

/// How often a run not yet ended is read again.
const POLL: Duration = Duration::from_secs(1);

#[derive(Args, Debug)]
pub struct GateArgs {
    /// The run before the change, or `baseline`: the after run's found baseline.
    #[arg(long, value_name = "ID|baseline")]
    pub before: String,
    /// With --before baseline: no baseline found exits 0 (a line says so), not 3.
    #[arg(long)]
    pub allow_no_baseline: bool,
    /// With --before baseline, for an after run that names no base of its own (one a CI
    /// job started, not a trigger): the change its baseline ran for, e.g. owner/repo@main.
    #[arg(long, value_name = "CHANGE")]
    pub base: Option<String>,
    /// The run after the change.
    #[arg(long, value_name = "ID")]
    pub after: String,
    /// Changes smaller than this share are noise (default 0.02).
    #[arg(long, value_name = "SHARE")]
    pub noise_floor: Option<f64>,
    /// Write the comparison as markdown (a pull request's comment) to this file.
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,
    /// Write a JUnit XML report to this file.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Give up waiting for the runs to end after this long (exit 3), e.g. 30m.
    #[arg(long, value_name = "DURATION", default_value = "30m", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
}

/// What the gate found: a comparison, or why there is none.
enum Outcome {
    Compared(Box<Comparison>),
    NoVerdict(String),
    /// `--before baseline` found none: why, by which rule.
    NoBaseline(String),
}

pub async fn execute(ctx: &Ctx, args: GateArgs) -> Result<u8> {
    let deadline = Instant::now() + args.timeout;
    let (outcome, after) = match judge(ctx, &args, deadline).await {
        Ok(found) => found,
        // A usage error is the caller's (exit 2); anything else is no verdict.
        Err(failure) if failure.code == "usage" => return Err(failure),
        Err(failure) => (Outcome::NoVerdict(failure.to_string()), None),
    };
    let github = GithubActions::from_env();
    let markdown = match &outcome {
        Outcome::Compared(comparison) => comparison.markdown(),
        Outcome::NoVerdict(why) => format!("**no verdict**: {why}\n"),
        Outcome::NoBaseline(why) => format!("**no baseline**: {why}\n"),
    };
    match &outcome {
        Outcome::Compared(comparison) if ctx.json => {
            emit_json(&serde_json::to_value(comparison.as_ref()).unwrap_or_default())?
        }
        Outcome::Compared(comparison) => emit(&comparison.lines().join("\n"))?,
        Outcome::NoVerdict(why) => note(&format!("no verdict: {why}")),
        Outcome::NoBaseline(why) if args.allow_no_baseline => note(&format!(
            "{why}; not a pass or a failure, exit 0 as --allow-no-baseline asks"
        )),
        Outcome::NoBaseline(why) => note(why),
    }
    if let Some(path) = &args.markdown {
        write_file(path, &markdown)?;
    }
    if let Some(path) = &args.junit {
        write_file(path, &junit(&args, &outcome, after.as_ref())?)?;
    }
    if let Some(github) = github {
        github.report(&markdown, &outcome)?;
    }
    Ok(match outcome {
        Outcome::Compared(comparison) => match comparison.verdict {
            Verdict::Regressed => EXIT_REGRESSED,
            Verdict::Improved | Verdict::Unchanged => EXIT_PASSED,
        },
        Outcome::NoVerdict(_) => EXIT_NO_VERDICT,
        Outcome::NoBaseline(_) if args.allow_no_baseline => EXIT_PASSED,
        Outcome::NoBaseline(_) => EXIT_NO_VERDICT,
    })
}

/// Both runs ended, then their comparison; with the after run's record (its checks and
/// thresholds go into the JUnit report).
async fn judge(
    ctx: &Ctx,
    args: &GateArgs,
    deadline: Instant,
) -> Result<(Outcome, Option<(RunRecord, Value)>)> {
    let before_id = if args.before == BASELINE {
        let path = format!(
            "{}/baseline{}",
            run_path(&args.after)?,
            query(&[("base", args.base.clone())])
        );
        match ctx.api.get(&path).await {
            Ok(raw) => raw["run"]["id"]
                .as_str()
                .map(str::to_string)
                .ok_or_else(|| Failure::protocol("the answer is not a baseline"))?,
            Err(failure) if failure.code == "no_baseline" => {
                return Ok((Outcome::NoBaseline(failure.message), None));
            }
            Err(failure) => return Err(failure),
        }
    } else {
        args.before.clone()
    };
    let before = ended(ctx, &before_id, deadline).await?;
    let after = ended(ctx, &args.after, deadline).await?;
    let unjudged = [("before", &before.0), ("after", &after.0)]
        .into_iter()
        .find_map(|(which, run)| unjudged(which, run, args.timeout));
    if let Some(why) = unjudged {
        return Ok((Outcome::NoVerdict(why), Some(after)));
    }
    let path = format!(
        "/v1/reliability/compare{}",
        query(&[
            // `baseline` is found again by the server, which then compares a trigger's
            // base target as the after run's; a base given here is the gate's own find.
            (
                "before",
                Some(if args.base.is_some() {
                    before_id.clone()
                } else {
                    args.before.clone()
                }),
            ),
            ("after", Some(args.after.clone())),
            ("noise_floor", args.noise_floor.map(|f| f.to_string())),
        ])
    );
    let outcome = match ctx.api.get(&path).await {
        Ok(raw) => {
            Outcome::Compared(Box::new(serde_json::from_value(raw).map_err(|e| {
                Failure::protocol(format!("the answer is not a comparison: {e}"))
            })?))
        }
        Err(refused) => Outcome::NoVerdict(format!("compare refused: {refused}")),
    };
    Ok((outcome, Some(after)))
}

/// Why a run gives no verdict: still going at the deadline, or ended without measuring
/// what it was for.
fn unjudged(which: &str, run: &RunRecord, timeout: Duration) -> Option<String> {
    if !run.status.is_finished() {
        return Some(format!(
            "the {which} run {} is still {} after {}",
            run.id,
            run.status,
            humantime::format_duration(timeout)
        ));
    }
    matches!(
        run.status,
        RunStatus::Error | RunStatus::Cancelled | RunStatus::Refused
    )
    .then(|| format!("the {which} run {} ended {}", run.id, run.status))
}

/// The run's record once it has ended, or as it is at `deadline`.
async fn ended(ctx: &Ctx, id: &str, deadline: Instant) -> Result<(RunRecord, Value)> {
    let path = run_path(id)?;
    loop {
        let raw = ctx.api.get(&path).await?;
        let run = parse_record(&raw)?;
        if run.status.is_finished() || Instant::now() + POLL >= deadline {
            return Ok((run, raw));
        }
        tokio::time::sleep(POLL).await;
    }
}

fn write_file(path: &PathBuf, text: &str) -> Result<()> {
    std::fs::write(path, text)
        .map_err(|e| Failure::usage(format!("cannot write {}: {e}", path.display())))
}

/// The JUnit report: suite `compare` (a case `compare: MEASURE` per compared measure; a
/// worse difference is a failure whose message is its line: the measure, both values and
/// their intervals), and suite `after run ID` (a case per check, invariant and threshold of
/// its result). Names differ across suites: GitLab keeps the first of equal names.
fn junit(args: &GateArgs, outcome: &Outcome, after: Option<&(RunRecord, Value)>) -> Result<String> {
    let mut report = Report::new("iohr reliability gate");
    let mut compare = TestSuite::new("compare");
    match outcome {
        Outcome::Compared(comparison) => {
            for difference in &comparison.differences {
                let status = if difference.worse {
                    failure(&difference.line)
                } else {
                    TestCaseStatus::success()
                };
                let mut case = TestCase::new(format!("compare: {}", difference.measure), status);
                case.set_classname("compare")
                    .set_system_out(&difference.line);
                compare.add_test_case(case);
            }
            for measure in &comparison.unchanged {
                let mut case =
                    TestCase::new(format!("compare: {measure}"), TestCaseStatus::success());
                case.set_classname("compare");
                compare.add_test_case(case);
            }
        }
        Outcome::NoBaseline(why) => {
            let mut status = TestCaseStatus::skipped();
            status.set_message(why.clone());
            let mut case = TestCase::new(format!("{} -> {}", args.before, args.after), status);
            case.set_classname("compare");
            compare.add_test_case(case);
        }
        Outcome::NoVerdict(why) => {
            let mut status = TestCaseStatus::non_success(NonSuccessKind::Error);
            status.set_message(why.clone());
            let mut case = TestCase::new(format!("{} -> {}", args.before, args.after), status);
            case.set_classname("compare");
            compare.add_test_case(case);
        }
    }
    report.add_test_suite(compare);
    if let Some((run, raw)) = after {
        let suite_name = format!("after run {}", run.id);
        let mut suite = TestSuite::new(suite_name.clone());
        for (case_name, passed, why) in verdicts(&raw["result"]) {
            let status = if passed {
                TestCaseStatus::success()
            } else {
                failure(&why)
            };
            let mut case = TestCase::new(case_name, status);
            case.set_classname(suite_name.clone());
            suite.add_test_case(case);
        }
        report.add_test_suite(suite);
    }
    report
        .to_string()
        .map_err(|e| Failure::usage(format!("cannot write the JUnit report: {e}")))
}

fn failure(message: &str) -> TestCaseStatus {
    let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
    status.set_message(message.to_string());
    status
}

/// The checks, invariants and thresholds a result judged: `(name, passed, why not)`.
fn verdicts(result: &Value) -> Vec<(String, bool, String)> {
    let mut found = Vec::new();
    for (list, prefix) in [("checks", "check"), ("invariants", "invariant")] {
        for item in result[list].as_array().into_iter().flatten() {
            let name = item["name"].as_str().unwrap_or("-");
            let why = item["failures"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join("; ");
            found.push((
                format!("{prefix} {name}"),
                item["passed"].as_bool().unwrap_or(false),
                why,
            ));
        }
    }
    for item in result["thresholds"].as_array().into_iter().flatten() {
        let threshold = item["threshold"].as_str().unwrap_or("-");
        let observed = item["observed"].as_str().unwrap_or("-");
        found.push((
            format!("threshold {threshold}"),
            item["passed"].as_bool().unwrap_or(false),
            format!("{threshold}: observed {observed}"),
        ));
    }
    found
}

/// Where GitHub Actions reads a step's summary and annotations.
struct GithubActions {
    summary: Option<PathBuf>,
}

impl GithubActions {
    fn from_env() -> Option<GithubActions> {
        (std::env::var("GITHUB_ACTIONS").as_deref() == Ok("true")).then(|| GithubActions {
            summary: std::env::var_os("GITHUB_STEP_SUMMARY").map(PathBuf::from),
        })
    }

    /// Appends the markdown to the job summary, and prints an annotation per worse
    /// difference (`::error`) or the reason there is no verdict.
    fn report(&self, markdown: &str, outcome: &Outcome) -> Result<()> {
        if let Some(path) = &self.summary {
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| Failure::usage(format!("cannot open {}: {e}", path.display())))?;
            file.write_all(markdown.as_bytes())
                .map_err(|e| Failure::usage(format!("cannot write {}: {e}", path.display())))?;
        }
        match outcome {
            Outcome::Compared(comparison) => {
                for difference in comparison.differences.iter().filter(|d| d.worse) {
                    emit(&annotation("error", &difference.measure, &difference.line))?;
                }
            }
            Outcome::NoVerdict(why) => emit(&annotation("error", "no verdict", why))?,
            Outcome::NoBaseline(why) => emit(&annotation("notice", "no baseline", why))?,
        }
        Ok(())
    }
}

/// A workflow command: `::LEVEL title=TITLE::MESSAGE`, escaped as GitHub's toolkit does.
fn annotation(level: &str, title: &str, message: &str) -> String {
    let data = |text: &str| {
        text.replace('%', "%25")
            .replace('\r', "%0D")
            .replace('\n', "%0A")
    };
    let property = |text: &str| data(text).replace(':', "%3A").replace(',', "%2C");
    format!("::{level} title={}::{}", property(title), data(message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_annotation_escapes_what_github_reads_as_syntax() {
        assert_eq!(
            annotation("error", "p99 total: a, b", "100% worse\nsee"),
            "::error title=p99 total%3A a%2C b::100%25 worse%0Asee"
        );
    }

    #[test]
    fn a_result_gives_a_case_per_check_invariant_and_threshold() {
        let result = serde_json::json!({
            "checks": [{"name": "home", "passed": false, "failures": ["status 500, expected 200"]}],
            "invariants": [{"name": "ids", "passed": true, "failures": []}],
            "thresholds": [{"threshold": "p99<300ms", "passed": true, "observed": "120.00 ms"}]
        });
        assert_eq!(
            verdicts(&result),
            [
                (
                    "check home".to_string(),
                    false,
                    "status 500, expected 200".to_string()
                ),
                ("invariant ids".to_string(), true, String::new()),
                (
                    "threshold p99<300ms".to_string(),
                    true,
                    "p99<300ms: observed 120.00 ms".to_string()
                ),
            ]
        );
    }
}
