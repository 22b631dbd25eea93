//! What a delivery asks for once read: the change a run is started for, every value
//! validated (`resources/triggers/substitute.rs`), or why nothing is started.

use iohr_domain::Forge;

use crate::resources::triggers::substitute::{self, Values};

/// One change, validated: a pull (merge) request or a push to a branch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// `owner/repo` of the change (a pull request's base repository).
    pub repo: String,
    /// The pull (merge) request's number; none for a push.
    pub pr: Option<u64>,
    /// The head branch and commit.
    pub branch: String,
    pub sha: String,
    /// A pull request's base branch and, when the forge names it, its commit.
    pub base_branch: Option<String>,
    pub base_sha: Option<String>,
    pub forge: Option<Forge>,
}

/// What a delivery comes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    Start(Change),
    /// Not acted on: the reason, for the delivery log.
    Ignore(String),
}

/// The raw values a forge's payload names, before validation.
#[derive(Debug, Default)]
pub struct Raw<'a> {
    pub repo: Option<&'a str>,
    pub pr: Option<u64>,
    pub branch: Option<&'a str>,
    pub sha: Option<&'a str>,
    pub base_branch: Option<&'a str>,
    pub base_sha: Option<&'a str>,
}

impl Raw<'_> {
    /// Every value validated, or the first refusal as the reason to ignore.
    pub fn validate(&self, forge: Option<Forge>) -> Parsed {
        match self.checked(forge) {
            Ok(change) => Parsed::Start(change),
            Err(why) => Parsed::Ignore(why),
        }
    }

    fn checked(&self, forge: Option<Forge>) -> Result<Change, String> {
        let need = |value: Option<&str>, what: &str| {
            value
                .map(str::to_string)
                .ok_or_else(|| format!("the payload names no {what}"))
        };
        let repo = substitute::repo(&need(self.repo, "repository")?)?;
        let branch = substitute::branch(&need(self.branch, "head branch")?)?;
        let sha = substitute::sha(&need(self.sha, "head commit")?)?;
        let base_branch = self.base_branch.map(substitute::branch).transpose()?;
        let base_sha = self.base_sha.map(substitute::sha).transpose()?;
        Ok(Change {
            repo,
            pr: self.pr,
            branch,
            sha,
            base_branch,
            base_sha,
            forge,
        })
    }
}

impl Change {
    /// `owner/repo#N` for a pull request, `owner/repo@BRANCH` for a push.
    pub fn label(&self) -> String {
        match self.pr {
            Some(n) => format!("{}#{n}", self.repo),
            None => format!("{}@{}", self.repo, self.branch),
        }
    }

    /// `owner/repo@BASE` for a pull request; none for a push.
    pub fn base(&self) -> Option<String> {
        self.base_branch
            .as_ref()
            .map(|b| format!("{}@{b}", self.repo))
    }

    /// What the after-run's target is made with.
    pub fn head_values(&self) -> Values {
        Values {
            pr: self.pr,
            sha: Some(self.sha.clone()),
            branch: Some(self.branch.clone()),
        }
    }

    /// What a fresh before-run's target is made with: the base branch and its commit.
    pub fn base_values(&self) -> Values {
        Values {
            pr: self.pr,
            sha: self.base_sha.clone(),
            branch: self.base_branch.clone(),
        }
    }
}
