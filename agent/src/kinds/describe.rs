//! Errors as one line of text for a record or a reason.

use std::error::Error as StdError;

/// An error and its causes on one line, without repeating a cause its parent already says.
pub fn describe(err: &(dyn StdError + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut next = Some(err);
    while let Some(e) = next {
        let text = e.to_string();
        if !parts.last().is_some_and(|p| p.contains(&text)) {
            parts.push(text);
        }
        next = e.source();
    }
    // hyper-util's top level ("client error (Connect)") says less than its cause.
    if parts.len() > 1 && parts[0].starts_with("client error (") {
        parts.remove(0);
    }
    parts.join(": ")
}
