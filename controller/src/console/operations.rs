//! A run's operations side by side, for the results that have several: a load or replay
//! result's `operations` and a scenario record's `ops`, each with its requests, error
//! rate and latency percentiles with their 95% intervals. Results of other shapes, or
//! of one operation (the totals say it), get no table.

use iohr_domain::load::LoadResult;
use iohr_domain::quantile::Percentile;
use iohr_domain::scenario_kind::record::{ScenarioRecord, op_counts};
use maud::{Markup, html};
use serde::Deserialize;

/// One row: the operation's name, requests, error rate and (label, percentile) pairs.
struct Row {
    name: String,
    requests: u64,
    error_rate: f64,
    latencies: Vec<(&'static str, Percentile)>,
}

/// `12.40 ms [12.1, 12.9]`, or why there is no estimate.
fn shown(p: &Percentile) -> String {
    match p {
        Percentile::Estimate {
            value, low, high, ..
        } => format!(
            "{:.2} ms [{:.2}, {:.2}]",
            *value as f64 / 1000.0,
            *low as f64 / 1000.0,
            *high as f64 / 1000.0
        ),
        Percentile::Insufficient { insufficient, .. } => insufficient.clone(),
    }
}

fn rows(result: &serde_json::Value) -> Vec<Row> {
    if let Ok(load) = LoadResult::deserialize(result) {
        return load
            .operations
            .iter()
            .map(|op| Row {
                name: op.name.clone(),
                requests: op.counts.requests,
                error_rate: op.error_rate,
                latencies: ["p50", "p90", "p99"]
                    .into_iter()
                    .map(|name| (name, op.latency.percentile(name)))
                    .collect(),
            })
            .collect();
    }
    if let Ok(record) = ScenarioRecord::deserialize(result) {
        return record
            .ops
            .iter()
            .map(|op| {
                let counts = op_counts(&op.by_status, &op.errors);
                Row {
                    name: format!("{} {}", op.method, op.path),
                    requests: counts.requests,
                    error_rate: counts.error_rate(),
                    latencies: vec![
                        ("p50", op.latency_us.p50.clone()),
                        ("p95", op.latency_us.p95.clone()),
                        ("p99", op.latency_us.p99.clone()),
                    ],
                }
            })
            .collect();
    }
    Vec::new()
}

/// The names of a result's operations, in its order (the table's rows').
pub fn names(result: Option<&serde_json::Value>) -> Vec<String> {
    result
        .map(rows)
        .unwrap_or_default()
        .into_iter()
        .map(|row| row.name)
        .collect()
}

/// The table of a result's operations, when it has more than one.
pub fn table(result: Option<&serde_json::Value>) -> Markup {
    render(&result.map(rows).unwrap_or_default())
}

fn render(rows: &[Row]) -> Markup {
    if rows.len() < 2 {
        return html! {};
    }
    let labels: Vec<&str> = rows[0].latencies.iter().map(|(l, _)| *l).collect();
    html! {
        h2 { "Each operation" }
        table #operations {
            thead { tr { th { "Operation" } th { "Requests" } th { "Error rate" }
                         @for label in &labels { th { (label) } } } }
            tbody {
                @for row in rows {
                    tr data-operation=(row.name) {
                        td { (row.name) }
                        td { (row.requests) }
                        td { (format!("{:.2}%", row.error_rate * 100.0)) }
                        @for (_, p) in &row.latencies { td { (shown(p)) } }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn row(name: &str) -> Row {
        let estimate = Percentile::Estimate {
            value: 12400,
            low: 12100,
            high: 12900,
            level: 0.95,
            samples: 900,
        };
        let thin = Percentile::Insufficient {
            insufficient: "insufficient samples (need 368)".into(),
            samples: 9,
        };
        Row {
            name: name.to_string(),
            requests: 10,
            error_rate: 0.1,
            latencies: vec![("p50", estimate.clone()), ("p95", estimate), ("p99", thin)],
        }
    }

    #[test]
    fn only_results_of_several_operations_get_a_table() {
        assert!(table(None).into_string().is_empty());
        assert!(
            table(Some(&json!({"passed": true})))
                .into_string()
                .is_empty()
        );
        assert!(render(&[row("GET /a")]).into_string().is_empty());
        let page = render(&[row("GET /a"), row("POST /b")]).into_string();
        assert_eq!(page.matches("<tr data-operation=").count(), 2, "{page}");
        assert!(page.contains("<th>p95</th>"));
        assert!(page.contains("12.40 ms [12.10, 12.90]"));
        assert!(page.contains("insufficient samples (need 368)"));
        assert!(page.contains("10.00%"));
    }
}
