//! The docs as a new user reads them: every `examples/*.json` a page names exists (issue
//! 37: docs/operations.md named `examples/load.json`, which never did), and each is JSON.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every `examples/NAME.json` in `text`.
fn examples_named(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("examples/") {
        let tail = &rest[at + "examples/".len()..];
        let name: String = tail
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_' || *c == '.')
            .collect();
        if let Some(stem) = name
            .strip_suffix(".json")
            .or_else(|| name.find(".json").map(|end| &name[..end]))
        {
            found.push(format!("examples/{stem}.json"));
        }
        rest = tail;
    }
    found
}

#[test]
fn every_example_the_docs_name_exists_and_is_json() {
    let mut pages: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    pages.push(root().join("README.md"));
    let mut named = 0;
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        for example in examples_named(&text) {
            named += 1;
            let path = root().join(&example);
            let body = std::fs::read_to_string(&path).unwrap_or_else(|_| {
                panic!("{} names {example}, which does not exist", page.display())
            });
            serde_json::from_str::<serde_json::Value>(&body)
                .unwrap_or_else(|e| panic!("{example} (named in {}): {e}", page.display()));
        }
    }
    assert!(named >= 5, "the docs name examples: {named}");
}

#[test]
fn a_name_is_read_up_to_its_extension() {
    assert_eq!(
        examples_named("--spec examples/load-open.json) and examples/faults.json."),
        ["examples/load-open.json", "examples/faults.json"]
    );
    assert!(examples_named("see examples/ for more").is_empty());
}
