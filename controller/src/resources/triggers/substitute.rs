//! The only values a delivery may put into a trigger's target: `{pr}` (a number), `{sha}`
//! (40 hex) and `{branch}` (a branch name), each validated before use, so a pull request
//! from a fork cannot point the agent anywhere new. Inside a target's host a value may be
//! letters, digits and `-` only (a host label); elsewhere a branch keeps its `/` and `.`
//! but never `..`, `@`, `:`, `?`, `#`, `%`, `\`, a space or a control character.

/// The longest branch name taken.
pub const MAX_BRANCH: usize = 255;
/// The longest repository path taken (`owner/repo`, GitLab's `group/sub/repo`).
pub const MAX_REPO: usize = 150;

/// The values one delivery substitutes, each already validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Values {
    pub pr: Option<u64>,
    pub sha: Option<String>,
    pub branch: Option<String>,
}

impl Values {
    /// Values a new trigger's target is checked with.
    pub fn sample() -> Values {
        Values {
            pr: Some(1),
            sha: Some("0".repeat(40)),
            branch: Some("main".into()),
        }
    }
}

/// A commit id: 40 hex digits, as lower case.
pub fn sha(text: &str) -> Result<String, String> {
    if text.len() == 40 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(text.to_ascii_lowercase())
    } else {
        Err(format!("commit {:?} is not 40 hex digits", shorten(text)))
    }
}

/// A branch name as git takes it (`git check-ref-format --branch`), narrowed to the
/// characters a URL carries as they are: letters, digits, `.`, `_`, `-`, `+` and `/`.
pub fn branch(text: &str) -> Result<String, String> {
    let refuse = |why: &str| Err(format!("branch {:?} refused: {why}", shorten(text)));
    if text.is_empty() || text.len() > MAX_BRANCH {
        return refuse(&format!("a branch is 1 to {MAX_BRANCH} characters"));
    }
    if let Some(c) = text
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '+' | '/')))
    {
        return refuse(&format!("{c:?} is not taken in a branch name"));
    }
    if text.contains("..") || text.contains("//") {
        return refuse("no \"..\" or \"//\"");
    }
    if text.starts_with(['/', '.', '-']) || text.ends_with(['/', '.']) || text.ends_with(".lock") {
        return refuse("it starts or ends as no branch may");
    }
    if text.split('/').any(|part| part.starts_with('.')) {
        return refuse("a part starts with \".\"");
    }
    Ok(text.to_string())
}

/// A repository's path (`owner/repo`, or GitLab's `group/subgroup/repo`).
pub fn repo(text: &str) -> Result<String, String> {
    let parts: Vec<&str> = text.split('/').collect();
    let part_ok = |p: &&str| {
        !p.is_empty()
            && !p.starts_with('.')
            && p.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    };
    if text.len() <= MAX_REPO && parts.len() >= 2 && parts.iter().all(part_ok) {
        Ok(text.to_string())
    } else {
        Err(format!("repository {:?} is not owner/repo", shorten(text)))
    }
}

/// A text cut for a reason line: what a sender wrote is never echoed at length.
pub fn shorten(text: &str) -> String {
    let cut: String = text.chars().take(80).collect();
    cut.chars().filter(|c| !c.is_control()).collect()
}

/// Whether a value may stand in a URL's host: one host label's characters.
fn host_safe(value: &str) -> bool {
    !value.is_empty() && value.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
}

/// `template` with its placeholders replaced. A placeholder the delivery has no value
/// for, or whose value may not stand where it is (a host), refuses the delivery.
pub fn substitute(template: &str, values: &Values) -> Result<String, String> {
    // The host part: after `://`, up to the first `/`, `?` or `#`.
    let host_start = template.find("://").map_or(0, |at| at + 3);
    let host_end = template[host_start..]
        .find(['/', '?', '#'])
        .map_or(template.len(), |at| host_start + at);
    let mut out = String::with_capacity(template.len() + 64);
    let mut at = 0;
    while let Some(open) = template[at..].find('{') {
        let open = at + open;
        out.push_str(&template[at..open]);
        let rest = &template[open..];
        let (name, value) = if rest.starts_with("{pr}") {
            ("pr", values.pr.map(|n| n.to_string()))
        } else if rest.starts_with("{sha}") {
            ("sha", values.sha.clone())
        } else if rest.starts_with("{branch}") {
            ("branch", values.branch.clone())
        } else {
            out.push('{');
            at = open + 1;
            continue;
        };
        let Some(value) = value else {
            return Err(format!(
                "the target names {{{name}}} and this delivery has none"
            ));
        };
        if open >= host_start && open < host_end && !host_safe(&value) {
            return Err(format!(
                "{{{name}}} stands in the target's host, and {:?} is not a host label",
                shorten(&value)
            ));
        }
        out.push_str(&value);
        at = open + name.len() + 2;
    }
    out.push_str(&template[at..]);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn values(branch: &str) -> Values {
        Values {
            pr: Some(12),
            sha: Some("a".repeat(40)),
            branch: Some(branch.into()),
        }
    }

    #[test]
    fn placeholders_take_validated_values_only() {
        let v = values("feature/x-1");
        assert_eq!(
            substitute("http://127.0.0.1:8080/pr/{pr}/{branch}?c={sha}", &v).unwrap(),
            format!(
                "http://127.0.0.1:8080/pr/12/feature/x-1?c={}",
                "a".repeat(40)
            )
        );
        assert_eq!(
            substitute("http://pr-{pr}.preview.test", &v).unwrap(),
            "http://pr-12.preview.test"
        );
        assert!(
            substitute("http://{branch}.preview.test", &v).is_err(),
            "a / in a host"
        );
        assert_eq!(
            substitute("http://h/{other}", &v).unwrap(),
            "http://h/{other}"
        );
        let none = Values {
            pr: None,
            sha: None,
            branch: None,
        };
        assert!(substitute("http://h/{pr}", &none).is_err());
        for bad in [
            "x@evil.example",
            "../etc",
            "a..b",
            "a b",
            "a:b",
            "a?b",
            "a@{1}",
            "-x",
            "x.lock",
            "a//b",
            "%2e%2e",
            "a\\b",
            "a#b",
            "",
        ] {
            assert!(branch(bad).is_err(), "{bad}");
        }
        for good in [
            "main",
            "feature/x",
            "release-1.2",
            "dependabot/npm_and_yarn/x+y",
        ] {
            assert_eq!(branch(good).unwrap(), good);
        }
        assert!(
            sha(&"A".repeat(40)).is_ok() && sha(&"g".repeat(40)).is_err() && sha("abc").is_err()
        );
        assert!(repo("octo/hello").is_ok() && repo("group/sub/r").is_ok());
        for bad in ["octo", "octo/../x", "/x", "a/b c", "a/.git"] {
            assert!(repo(bad).is_err(), "{bad}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 512,
            rng_seed: proptest::test_runner::RngSeed::Fixed(33),
            ..ProptestConfig::default()
        })]

        /// No input panics; whatever passes the validator is free of what could move a
        /// URL elsewhere, and substituted into a path leaves the host as it was.
        #[test]
        fn only_validated_values_substitute(text in "\\PC{0,80}", raw in proptest::collection::vec(any::<u8>(), 0..64)) {
            let lossy = String::from_utf8_lossy(&raw).to_string();
            for input in [text.as_str(), lossy.as_str()] {
                let _ = sha(input);
                let _ = repo(input);
                if let Ok(ok) = branch(input) {
                    prop_assert!(!ok.contains("..") && !ok.contains('@') && !ok.contains(':'));
                    prop_assert!(!ok.contains('?') && !ok.contains('#') && !ok.contains('%'));
                    prop_assert!(!ok.chars().any(|c| c.is_control() || c.is_whitespace()));
                    let url = substitute("http://127.0.0.1:9/t/{branch}", &values(&ok)).unwrap();
                    prop_assert!(url.starts_with("http://127.0.0.1:9/t/"));
                    if let Ok(hosted) = substitute("http://{branch}.test/", &values(&ok)) {
                        prop_assert!(hosted.ends_with(".test/"));
                        prop_assert!(hosted[7..hosted.len() - 7].chars().all(|c| c.is_ascii_alphanumeric() || c == '-'));
                    }
                }
                let _ = substitute(input, &values("main"));
            }
        }
    }
}
