//! Reading run records: their times, and how many runs overlapped.

use serde_json::Value;

pub fn millis(record: &Value, field: &str) -> u128 {
    let text = record[field]
        .as_str()
        .unwrap_or_else(|| panic!("{field} in {record}"));
    rfc3339_ms(text)
}

/// RFC 3339 with milliseconds (what the API writes) to milliseconds since the epoch.
pub fn rfc3339_ms(text: &str) -> u128 {
    let t = humantime::parse_rfc3339(text).unwrap_or_else(|e| panic!("{text}: {e}"));
    t.duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_millis()
}

/// The most runs whose [started_at, ended_at) intervals overlap at one instant.
pub fn max_overlap(records: &[&Value]) -> usize {
    let mut edges: Vec<(u128, i32)> = Vec::new();
    for r in records {
        edges.push((millis(r, "started_at"), 1));
        edges.push((millis(r, "ended_at"), -1));
    }
    // Ends sort before starts at the same millisecond: touching intervals do not overlap.
    edges.sort();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, delta) in edges {
        now += delta;
        most = most.max(now);
    }
    most as usize
}
