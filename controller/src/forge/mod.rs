//! The answer back on the pull request (issue 33): for every change a forge's trigger
//! started runs for, one comment (GitHub: an issue comment on the pull request; GitLab: a
//! merge request note) found by a hidden marker and edited on every push, and a commit
//! status `iohr/reliability` on the head commit.
//!
//! - [`reporter`]: the background task, one of the outbox's consumers; it reads the
//!   account's events with its own cursor and scans for running runs, and sends what is
//!   due, retried on a stored schedule.
//! - [`report`]: what is said (state, description, markdown, the cut).
//! - [`github`], [`gitlab`]: the REST calls; [`client`]: one call, over the webhook
//!   client and its egress guard.
//! - [`credentials`]: the checks of a forge's token and API URL.

pub mod client;
pub mod credentials;
pub mod github;
pub mod gitlab;
pub mod report;
pub mod reporter;

use crate::outbox::RetrySchedule;

/// The reporter's schedule: at once, then 5 s, 30 s, 2 min, 10 min, 30 min, 1 h and 3 h
/// after the one before (about 5 hours), then given up until the change moves again.
pub const DEFAULT_FORGE_RETRY_SCHEDULE: &str = "0s,5s,30s,2m,10m,30m,1h,3h";

/// The `serve` flags of the forge reporter.
#[derive(Debug, Clone, clap::Args)]
pub struct ForgeConfig {
    /// The controller's address as people reach it (`https://iohr.example`): pull
    /// request comments and commit statuses link to its console pages. Without it they
    /// name the page's path only.
    #[arg(long, value_name = "URL", value_parser = parse_public_url)]
    pub public_url: Option<String>,
    /// Delays before each attempt of a forge report, each after the one before; a
    /// forge's `retry-after` or rate-limit reset is waited for when longer.
    #[arg(long, default_value = DEFAULT_FORGE_RETRY_SCHEDULE)]
    pub forge_retry_schedule: RetrySchedule,
    /// Forge reports of one account in flight at once.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub forge_concurrency_per_account: u32,
}

impl Default for ForgeConfig {
    fn default() -> Self {
        ForgeConfig {
            public_url: None,
            forge_retry_schedule: DEFAULT_FORGE_RETRY_SCHEDULE
                .parse()
                .unwrap_or_else(|_| RetrySchedule(vec![std::time::Duration::ZERO])),
            forge_concurrency_per_account: 2,
        }
    }
}

fn parse_public_url(text: &str) -> Result<String, String> {
    let uri: hyper::Uri = text
        .parse()
        .map_err(|e| format!("{text:?} is not a URL: {e}"))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
        return Err(format!("{text:?}: give http(s)://HOST[:PORT][/PATH]"));
    }
    if uri.query().is_some() {
        return Err(format!("{text:?}: no query"));
    }
    Ok(text.trim_end_matches('/').to_string())
}

/// What a change names on its forge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// `owner/repo` (GitLab: `group/sub/project`).
    pub repo: String,
    /// The pull (merge) request's number; `None` for a branch (`owner/repo@BRANCH`),
    /// which gets a status and no comment.
    pub number: Option<u64>,
}

/// `owner/repo#N` or `owner/repo@BRANCH`; `None` for anything else (a label a person
/// gave), which is not reported.
pub fn parse_change(change: &str) -> Option<Change> {
    // A repository's path holds neither `@` nor `#`; a branch may hold `#`.
    let (repo, number) = if let Some((repo, _branch)) = change.split_once('@') {
        (repo, None)
    } else {
        let (repo, n) = change.rsplit_once('#')?;
        (repo, Some(n.parse::<u64>().ok().filter(|n| *n > 0)?))
    };
    let segments: Vec<&str> = repo.split('/').collect();
    let fine = segments.len() >= 2
        && segments.iter().all(|s| {
            !s.is_empty()
                && *s != "."
                && *s != ".."
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        });
    fine.then(|| Change {
        repo: repo.to_string(),
        number,
    })
}

/// A commit the forge can take: 40 hex (lowercase as sent).
pub fn checked_commit(commit: Option<&str>) -> Option<String> {
    commit
        .filter(|c| c.len() == 40 && c.chars().all(|ch| ch.is_ascii_hexdigit()))
        .map(str::to_ascii_lowercase)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_name_a_repository_and_a_request_or_a_branch() {
        assert_eq!(
            parse_change("octo/hello#12"),
            Some(Change {
                repo: "octo/hello".into(),
                number: Some(12)
            })
        );
        assert_eq!(
            parse_change("grp/sub/proj@main"),
            Some(Change {
                repo: "grp/sub/proj".into(),
                number: None
            })
        );
        assert_eq!(parse_change("o/r@feat#1").map(|c| c.number), Some(None));
        for bad in [
            "core#212", "o/r#0", "o/r#x", "o/../r#1", "o/r", "o//r#1", "o/r?x#1",
        ] {
            assert_eq!(parse_change(bad), None, "{bad}");
        }
        assert_eq!(checked_commit(Some("ABC")), None);
        assert_eq!(checked_commit(Some(&"A".repeat(40))), Some("a".repeat(40)));
    }
}
