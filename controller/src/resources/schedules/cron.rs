//! Cron expressions as crontab writes them, evaluated in UTC, with `croner`.
//!
//! Five fields, minute first (crontab's), or six with a leading seconds field; days of
//! the week 0-7 with 0 and 7 Sunday (POSIX, as croner counts them), names (`MON`, `JAN`)
//! and `@hourly`-style nicknames. When both day of month and day of week are restricted,
//! a day matching either fires (crontab's rule; croner's default, `dom_and_dow` off);
//! when either field starts with `*` (`*/2`), a day must match both, as Vixie cron reads
//! it (croner ORs unless a field is exactly `*`, so such fields get croner's `+`).
//! Years (a seventh field) are refused. UTC has no daylight saving time, so no fire is
//! repeated or lost twice a year.

use std::str::FromStr;

use chrono::{DateTime, Utc};
use croner::Cron;

/// The longest expression accepted.
pub const MAX_CRON: usize = 200;

/// Fires looked at to find the shortest gap between two fires (see [`Expression::min_gap_ms`]).
const GAP_SAMPLES: usize = 100;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cron {text:?}: {why}")]
pub struct CronError {
    pub text: String,
    pub why: String,
}

/// A parsed expression.
#[derive(Debug, Clone)]
pub struct Expression {
    text: String,
    cron: Cron,
}

impl Expression {
    pub fn parse(text: &str) -> Result<Expression, CronError> {
        let error = |why: String| CronError {
            text: text.chars().take(MAX_CRON).collect(),
            why,
        };
        if text.len() > MAX_CRON {
            return Err(error(format!("longer than {MAX_CRON} characters")));
        }
        let trimmed = text.trim();
        let fields = trimmed.split_whitespace().count();
        let nickname = trimmed.starts_with('@');
        if !nickname && !(5..=6).contains(&fields) {
            return Err(error(format!(
                "{fields} fields; give 5 (minute hour day-of-month month day-of-week, as crontab) \
                 or 6 (a seconds field first)"
            )));
        }
        if nickname && fields != 1 {
            return Err(error("a nickname such as @hourly stands alone".into()));
        }
        let cron = Cron::from_str(&as_crontab_reads_it(trimmed))
            .map_err(|e| error(field_at_fault(trimmed).unwrap_or_else(|| e.to_string())))?;
        let expression = Expression {
            text: trimmed.to_string(),
            cron,
        };
        // An expression that never fires (`0 0 31 2 *`) is refused here, not at each tick.
        if expression.next_after(0).is_none() {
            return Err(error("it never fires".into()));
        }
        Ok(expression)
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The first fire strictly after `after_ms` (Unix ms, UTC).
    pub fn next_after(&self, after_ms: i64) -> Option<i64> {
        let after = DateTime::<Utc>::from_timestamp_millis(after_ms)?;
        self.cron
            .find_next_occurrence(&after, false)
            .ok()
            .map(|t| t.timestamp_millis())
    }

    /// The latest fire at or before `at_ms`.
    pub fn latest_at_or_before(&self, at_ms: i64) -> Option<i64> {
        let at = DateTime::<Utc>::from_timestamp_millis(at_ms)?;
        self.cron
            .find_previous_occurrence(&at, true)
            .ok()
            .map(|t| t.timestamp_millis())
    }

    /// The next `n` fires strictly after `after_ms`.
    pub fn next_n(&self, after_ms: i64, n: usize) -> Vec<i64> {
        let mut fires = Vec::with_capacity(n);
        let mut at = after_ms;
        while fires.len() < n {
            match self.next_after(at) {
                Some(next) => {
                    fires.push(next);
                    at = next;
                }
                None => break,
            }
        }
        fires
    }

    /// The shortest gap between two consecutive fires after `from_ms`. Exact for the floors
    /// used (a minute, an hour): an expression with more than one second (or minute) in
    /// its set fires twice within a minute (an hour) of its first fire, so the first
    /// fires show it.
    pub fn min_gap_ms(&self, from_ms: i64) -> Option<i64> {
        let fires = self.next_n(from_ms, GAP_SAMPLES);
        fires.windows(2).map(|w| w[1] - w[0]).min()
    }
}

/// The fields of a five- and a six-field expression, with the values each takes.
const FIELDS_5: [(&str, &str); 5] = [
    ("minute", "0-59"),
    ("hour", "0-23"),
    ("day-of-month", "1-31"),
    ("month", "1-12 or JAN-DEC"),
    ("day-of-week", "0-7 (0 and 7 are Sunday) or SUN-SAT"),
];

/// Which field croner refused, and what that field takes: croner's own message names
/// neither ("Number out of bounds"). Each field is tried alone, the others `*`.
fn field_at_fault(text: &str) -> Option<String> {
    let fields: Vec<&str> = text.split_whitespace().collect();
    let names: Vec<(&str, &str)> = match fields.len() {
        5 => FIELDS_5.to_vec(),
        6 => std::iter::once(("second", "0-59"))
            .chain(FIELDS_5)
            .collect(),
        _ => return None,
    };
    (0..fields.len()).find_map(|at| {
        let alone: Vec<&str> = (0..fields.len())
            .map(|i| if i == at { fields[i] } else { "*" })
            .collect();
        Cron::from_str(&alone.join(" ")).err().map(|_| {
            let (name, range) = names[at];
            format!(
                "the {name} field {:?} is not valid: it takes {range}, lists (1,5), ranges (1-5) and steps (*/5)",
                fields[at]
            )
        })
    })
}

/// The expression croner evaluates as crontab evaluates `text`: a day-of-month or
/// day-of-week field starting with `*` makes the day rule AND (croner's `+` on the
/// day-of-week field), else a day matching either field fires.
fn as_crontab_reads_it(text: &str) -> String {
    let mut fields: Vec<String> = text.split_whitespace().map(str::to_string).collect();
    let (dom, dow) = match fields.len() {
        5 => (2, 4),
        6 => (3, 5),
        _ => return text.to_string(),
    };
    let starred = |f: &str| f.starts_with('*') || f.starts_with('?');
    if (starred(&fields[dom]) || starred(&fields[dow])) && !fields[dow].starts_with('+') {
        fields[dow] = format!("+{}", fields[dow]);
    }
    fields.join(" ")
}

/// RFC 3339 UTC with seconds, as schedules show fire times.
pub fn format_utc(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default()
}
