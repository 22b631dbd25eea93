//! `iohr-controller token list`: the tokens as a table or JSON, never a secret.

use iohr_controller::store::{TokenListing, format_ms};
use serde_json::json;

pub fn render(tokens: &[TokenListing], as_json: bool) -> String {
    if as_json {
        let list: Vec<_> = tokens
            .iter()
            .map(|t| {
                json!({
                    "id": t.id, "account": t.account, "scopes": t.scopes, "person": t.person,
                    "created_at": format_ms(t.created_at),
                    "last_used_at": t.last_used_at.map(format_ms),
                    "revoked_at": t.revoked_at.map(format_ms),
                })
            })
            .collect();
        return format!("{}\n", json!(list));
    }
    let header = [
        "ID",
        "ACCOUNT",
        "SCOPES",
        "PERSON",
        "CREATED",
        "LAST USED",
        "STATUS",
    ];
    let mut rows: Vec<[String; 7]> = vec![header.map(str::to_string)];
    for t in tokens {
        rows.push([
            t.id.clone(),
            t.account.clone(),
            t.scopes.join(","),
            t.person.clone().unwrap_or_else(|| "-".to_string()),
            format_ms(t.created_at),
            t.last_used_at.map_or("never".to_string(), format_ms),
            t.revoked_at.map_or("live".to_string(), |at| {
                format!("revoked {}", format_ms(at))
            }),
        ]);
    }
    table(&rows)
}

/// Rows as columns padded to their widest cell, two spaces apart (the admin commands'
/// tables).
pub fn table<const N: usize>(rows: &[[String; N]]) -> String {
    let widths: Vec<usize> = (0..N)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_read_as_a_table_without_secrets() {
        let tokens = [
            TokenListing {
                id: "t1".into(),
                account: "default".into(),
                scopes: vec!["reliability:run".into(), "reliability:read".into()],
                person: None,
                created_at: 0,
                last_used_at: Some(60_000),
                revoked_at: None,
            },
            TokenListing {
                id: "t2".into(),
                account: "acme".into(),
                scopes: vec!["reliability:audit".into()],
                person: Some("ada".into()),
                created_at: 0,
                last_used_at: None,
                revoked_at: Some(120_000),
            },
        ];
        let text = render(&tokens, false);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("ID  ACCOUNT  SCOPES"), "{text}");
        assert!(
            lines[1].contains("1970-01-01T00:01:00.000Z  live"),
            "{text}"
        );
        assert!(
            lines[2].ends_with("never                     revoked 1970-01-01T00:02:00.000Z"),
            "{text}"
        );
        let json: serde_json::Value = serde_json::from_str(&render(&tokens, true)).expect("json");
        assert_eq!(json[1]["person"], "ada");
        assert_eq!(json[1]["last_used_at"], serde_json::Value::Null);
    }
}
