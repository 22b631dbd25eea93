//! The command line that replays a scenario unchanged: the canonical spec inline, so the
//! command alone is the scenario (no file that may change between the two runs).

use super::spec::ScenarioSpec;

/// One word for a POSIX shell: bare when it holds only safe characters, otherwise in
/// single quotes with each `'` written `'\''`.
pub fn shell_quote(text: &str) -> String {
    let safe = !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_./:@%+=,-".contains(&b));
    if safe {
        text.to_string()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

/// `iohr-agent exec --kind scenario --target <base URL> --spec-json '<spec>' --json`.
pub fn replay_command(base_url: &str, spec: &ScenarioSpec) -> String {
    format!(
        "iohr-agent exec --kind scenario --target {} --spec-json {} --json",
        shell_quote(base_url),
        shell_quote(&spec.canonical_json())
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn quoting_survives_quotes_and_shell_syntax() {
        assert_eq!(
            shell_quote("http://127.0.0.1:8080"),
            "http://127.0.0.1:8080"
        );
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote("${env:X} $(x) `y`"), "'${env:X} $(x) `y`'");
    }

    #[test]
    fn the_command_carries_the_canonical_spec() {
        let spec = ScenarioSpec::from_json(&json!({
            "slug": "s", "ops": ["POST /o {\"who\": \"O'Brien\"}"],
            "headers": {"Authorization": "${env:TOKEN}"},
        }))
        .expect("valid");
        let command = replay_command("http://127.0.0.1:8080", &spec);
        assert!(
            command.starts_with(
                "iohr-agent exec --kind scenario --target http://127.0.0.1:8080 --spec-json '{"
            ),
            "{command}"
        );
        assert!(command.ends_with("}' --json"), "{command}");
        assert!(command.contains(r#"O'\''Brien"#), "{command}");
        assert!(
            command.contains(r#""Authorization":"${env:TOKEN}""#),
            "{command}"
        );
    }
}
