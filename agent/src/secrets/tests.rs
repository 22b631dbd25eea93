use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

use super::*;

#[test]
fn patterns_are_names_or_prefixes() {
    assert_eq!(
        SecretPattern::parse("API_TOKEN"),
        Ok(SecretPattern::Name("API_TOKEN".into()))
    );
    assert_eq!(
        SecretPattern::parse("IOHR_SECRET_*"),
        Ok(SecretPattern::Prefix("IOHR_SECRET_".into()))
    );
    for bad in ["", "*", "A*B", "A-B", "A B", "**", "A**", "${env:A}"] {
        assert!(SecretPattern::parse(bad).is_err(), "{bad:?} parsed");
    }
}

#[test]
fn the_default_grants_nothing_and_says_which_flag_would() {
    let refusal = SecretGrant::default().check("HOME").expect_err("refused");
    assert!(refusal.is_refused());
    let text = refusal.to_string();
    assert!(
        text.contains("HOME") && text.contains("--secret-env"),
        "{text}"
    );
    assert!(text.contains("granted: none"), "{text}");
}

#[test]
fn a_grant_lets_through_only_what_matches() {
    let grant = SecretGrant::Only(vec![
        SecretPattern::parse("SOME_*").expect("pattern"),
        SecretPattern::parse("TOKEN").expect("pattern"),
    ]);
    assert_eq!(grant.check("SOME_SECRET"), Ok(()));
    assert_eq!(grant.check("TOKEN"), Ok(()));
    assert!(grant.check("TOKEN2").is_err());
    assert!(grant.check("SOME").is_err());
    let text = grant.check("PATH").expect_err("refused").to_string();
    assert!(text.contains("granted: SOME_*, TOKEN"), "{text}");
    assert!(SecretGrant::Platform.check("SOME_SECRET").is_err());
    assert_eq!(SecretGrant::All.check("PATH"), Ok(()));
}

/// Any text: a pattern parses only from `[A-Za-z0-9_]+\*?`, prints back as it was given,
/// and a prefix matches exactly the names that start with it.
#[test]
fn parsing_any_text_never_panics_and_round_trips() {
    let config = Config {
        cases: 512,
        failure_persistence: None,
        ..Config::default()
    };
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &[38; 32]);
    let mut runner = TestRunner::new_with_rng(config, rng);
    runner
        .run(&(".{0,12}", "[A-Z_]{0,6}"), |(text, name)| {
            let wellformed = {
                let stem = text.strip_suffix('*').unwrap_or(&text);
                !stem.is_empty() && stem.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            };
            match SecretPattern::parse(&text) {
                Ok(pattern) => {
                    prop_assert!(wellformed);
                    prop_assert_eq!(pattern.to_string(), text.clone());
                    let stem = text.trim_end_matches('*');
                    let expected = if text.ends_with('*') {
                        name.starts_with(stem)
                    } else {
                        name == text
                    };
                    prop_assert_eq!(pattern.matches(&name), expected);
                }
                Err(_) => prop_assert!(!wellformed),
            }
            Ok(())
        })
        .expect("property holds");
}
