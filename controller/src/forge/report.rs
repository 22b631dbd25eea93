//! What the reporter says about a change: the commit status (state and a description of
//! at most 140 characters) and the comment (a hidden marker, then the comparison's
//! markdown, cut to the forge's limit with a link to the console's compare page).
//!
//! With no baseline the status is `success` with a description that says nothing was
//! compared: a commit status has no neutral state (GitHub's check runs do, but need a
//! GitHub App), `failure` and `error` would block a required check on the first pull
//! request of a repository, and `pending` would never end.

use iohr_domain::compare::{Comparison, Verdict};
use iohr_domain::run::RunStatus;

/// The longest comment body, in characters (GitHub refuses 65,536 and more).
pub const MAX_COMMENT_CHARS: usize = 65_535;
/// The longest status description, in characters.
pub const MAX_DESCRIPTION_CHARS: usize = 140;
/// The status's name on the forge.
pub const STATUS_CONTEXT: &str = "iohr/reliability";

/// A commit status's state, in GitHub's words (GitLab's are mapped in `gitlab.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Pending,
    Success,
    Failure,
    Error,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Pending => "pending",
            State::Success => "success",
            State::Failure => "failure",
            State::Error => "error",
        }
    }
}

/// Where a change's newest run stands with its baseline.
#[derive(Debug, Clone)]
pub enum Standing {
    /// The run is queued or running.
    Running,
    /// The run ended without a measure to compare (error, cancelled, refused).
    Ended {
        status: RunStatus,
        reason: Option<String>,
    },
    /// The run ended; its fresh before-run is still going.
    BaselineRunning { before: String },
    /// No baseline: the text says which rule found nothing.
    NoBaseline(String),
    /// A baseline was found but the two runs do not compare (the refusal's text).
    NotCompared { before: String, why: String },
    /// Compared with its baseline.
    Compared(Box<Comparison>),
}

/// What is said: the status and the comment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub state: State,
    pub description: String,
    /// The comment's body, marker first; at most [`MAX_COMMENT_CHARS`].
    pub comment: String,
    /// `cancelled` runs: GitLab has a state of its own for them.
    pub cancelled: bool,
}

/// The hidden line the change's one comment is found by.
pub fn marker(change: &str) -> String {
    // A change holding `--` or `>` would end the HTML comment early: those never match a
    // change the triggers write, and are spelled safely here.
    let safe = change.replace("--", "-\u{2010}").replace('>', "\u{203a}");
    format!("<!-- iohr-reliability:{safe} -->")
}

/// The console's compare page for two runs, on the controller's public URL when it is
/// known (`serve --public-url`), else its path.
pub fn compare_link(public_url: Option<&str>, before: &str, after: &str) -> String {
    let base = public_url.map(|u| u.trim_end_matches('/')).unwrap_or("");
    format!("{base}/console/compare?before={before}&after={after}")
}

/// The report of a change's run `run_id` (on `commit`) as it stands.
pub fn compose(
    change: &str,
    run_id: &str,
    commit: Option<&str>,
    standing: &Standing,
    public_url: Option<&str>,
) -> Report {
    let short_commit = commit.map(|c| &c[..c.len().min(7)]).unwrap_or("?");
    let head = format!("Commit `{short_commit}`, run `{run_id}`");
    let (state, description, text, link) = match standing {
        Standing::Running => (
            State::Pending,
            "Reliability runs are going".to_string(),
            format!("**running**\n\n{head} is going; this comment is edited when it ends."),
            None,
        ),
        Standing::Ended { status, reason } => {
            let why = reason.as_deref().unwrap_or("no reason given");
            (
                State::Error,
                format!("The run ended {status}: {why}"),
                format!("**{status}**\n\n{head} ended {status}: {why}. Nothing was compared."),
                None,
            )
        }
        Standing::BaselineRunning { before } => (
            State::Pending,
            "The baseline run is going".to_string(),
            format!(
                "**waiting for the baseline**\n\n{head} ended; its baseline `{before}` is still going."
            ),
            None,
        ),
        Standing::NoBaseline(why) => (
            State::Success,
            format!("No baseline, not compared: {why}"),
            format!(
                "**no baseline**\n\n{head}: no baseline to compare with ({why}). Not compared: neither a pass nor a failure."
            ),
            None,
        ),
        Standing::NotCompared { before, why } => (
            State::Error,
            format!("Not compared: {why}"),
            format!("**not compared**\n\n{head} and its baseline `{before}` do not compare: {why}"),
            Some(compare_link(public_url, before, run_id)),
        ),
        Standing::Compared(comparison) => {
            let (state, word) = match comparison.verdict {
                Verdict::Regressed => (State::Failure, "Regressed"),
                Verdict::Improved => (State::Success, "Improved"),
                Verdict::Unchanged => (State::Success, "No measurable difference"),
            };
            let worse = comparison.differences.iter().filter(|d| d.worse).count();
            let description = match comparison.verdict {
                Verdict::Regressed => format!("{word}: {worse} measure(s) worse than the baseline"),
                _ => format!("{word} against the baseline"),
            };
            (
                state,
                description,
                format!(
                    "{head} against its baseline `{}`:\n\n{}",
                    comparison.before,
                    comparison.markdown()
                ),
                Some(compare_link(public_url, &comparison.before, run_id)),
            )
        }
    };
    let cancelled = matches!(
        standing,
        Standing::Ended {
            status: RunStatus::Cancelled,
            ..
        }
    );
    Report {
        state,
        description: cut_chars(&description, MAX_DESCRIPTION_CHARS),
        comment: comment(change, &text, link.as_deref()),
        cancelled,
    }
}

/// The comment: marker, title, text and link, cut so it is at most
/// [`MAX_COMMENT_CHARS`] characters while keeping the marker and the link.
pub fn comment(change: &str, text: &str, link: Option<&str>) -> String {
    let head = format!("{}\n### iohr reliability\n\n", marker(change));
    let tail = match link {
        Some(link) => format!("\n\n[The comparison in the console]({link})\n"),
        None => "\n".to_string(),
    };
    let whole = head.chars().count() + text.chars().count() + tail.chars().count();
    if whole <= MAX_COMMENT_CHARS {
        return format!("{head}{text}{tail}");
    }
    let cut_note = match link {
        Some(link) => format!("\n\n... cut at the forge's limit: the whole comparison is at [the console]({link})\n"),
        None => "\n\n... cut at the forge's limit: the whole comparison is on the controller's compare page\n".to_string(),
    };
    let room = MAX_COMMENT_CHARS
        .saturating_sub(head.chars().count())
        .saturating_sub(cut_note.chars().count());
    format!("{head}{}{cut_note}", cut_chars(text, room))
}

/// The first `max` characters of `text`.
pub fn cut_chars(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => text[..at].to_string(),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use proptest::test_runner::RngSeed;

    const LINK: &str = "https://iohr.example/console/compare?before=b&after=a";

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, rng_seed: RngSeed::Fixed(33), ..ProptestConfig::default() })]

        /// Whatever the comparison's length and characters, the comment fits and keeps
        /// the marker and the link.
        #[test]
        fn comments_fit_and_keep_the_marker_and_the_link(
            unit in "[a-z|`é\u{1F600}\n -]{1,8}",
            repeat in 0usize..20_000,
            change in "[a-z]{1,8}/[a-z]{1,8}#[0-9]{1,5}",
        ) {
            let text = unit.repeat(repeat);
            let body = comment(&change, &text, Some(LINK));
            prop_assert!(body.chars().count() <= MAX_COMMENT_CHARS);
            let marker = marker(&change);
            prop_assert!(body.starts_with(&marker));
            prop_assert!(body.contains(LINK));
            // Not cut when it fits: the whole text is there.
            if text.chars().count() < MAX_COMMENT_CHARS - 200 {
                prop_assert!(body.contains(&text));
            }
        }
    }

    #[test]
    fn a_long_comparison_is_cut_to_the_limit_with_the_link() {
        let text = "x".repeat(200_000);
        let body = comment("o/r#1", &text, Some(LINK));
        assert_eq!(body.chars().count(), MAX_COMMENT_CHARS);
        assert!(body.contains("cut at the forge's limit"));
        assert!(body.ends_with(&format!("[the console]({LINK})\n")));
    }

    #[test]
    fn markers_cannot_end_the_html_comment_early() {
        let m = marker("o/r#1 --> <b>");
        assert_eq!(m.matches("-->").count(), 1, "{m}");
        assert!(m.ends_with(" -->"));
    }

    fn comparison(verdict: Verdict) -> Comparison {
        Comparison {
            before: "b1".into(),
            after: "a1".into(),
            verdict,
            differences: vec![iohr_domain::compare::Difference {
                measure: "p50".into(),
                worse: verdict == Verdict::Regressed,
                line: "p50 total: 10.0 ms -> 13.0 ms".into(),
                trace_ids: Vec::new(),
            }],
            unchanged: Vec::new(),
            notes: Vec::new(),
            level: 0.95,
            noise_floor: 0.02,
            samples: None,
        }
    }

    #[test]
    fn a_regression_fails_and_the_rest_succeed_with_the_markdown() {
        let public = Some("https://iohr.example");
        for (verdict, state) in [
            (Verdict::Regressed, State::Failure),
            (Verdict::Improved, State::Success),
            (Verdict::Unchanged, State::Success),
        ] {
            let compared = Standing::Compared(Box::new(comparison(verdict)));
            let report = compose("o/r#1", "a1", Some(&"c".repeat(40)), &compared, public);
            assert_eq!(report.state, state, "{verdict:?}");
            assert!(report.comment.contains(&comparison(verdict).markdown()));
            assert!(
                report
                    .comment
                    .contains("https://iohr.example/console/compare?before=b1&after=a1")
            );
            assert!(report.description.chars().count() <= MAX_DESCRIPTION_CHARS);
        }
        let waiting = Standing::BaselineRunning {
            before: "b1".into(),
        };
        assert_eq!(
            compose("o/r#1", "a1", None, &waiting, public).state,
            State::Pending
        );
        let refused = Standing::NotCompared {
            before: "b1".into(),
            why: "the runs differ".into(),
        };
        assert_eq!(
            compose("o/r#1", "a1", None, &refused, public).state,
            State::Error
        );
    }

    #[test]
    fn states_follow_the_standing() {
        let running = compose(
            "o/r#1",
            "r1",
            Some("a".repeat(40).as_str()),
            &Standing::Running,
            None,
        );
        assert_eq!(running.state, State::Pending);
        let none = compose(
            "o/r#1",
            "r1",
            None,
            &Standing::NoBaseline("no passed run on o/r@main".into()),
            None,
        );
        assert_eq!(none.state, State::Success);
        assert!(none.description.starts_with("No baseline"));
        let ended = compose(
            "o/r#1",
            "r1",
            None,
            &Standing::Ended {
                status: RunStatus::Error,
                reason: Some("x".repeat(500)),
            },
            None,
        );
        assert_eq!(ended.state, State::Error);
        assert_eq!(ended.description.chars().count(), MAX_DESCRIPTION_CHARS);
    }
}
