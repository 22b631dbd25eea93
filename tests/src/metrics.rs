//! Scraping a `/metrics` endpoint the way Prometheus would read it: through the Prometheus
//! project's own OpenMetrics parser (PyPI `prometheus_client`, `tests/metrics/scrape.py`),
//! which refuses text that breaks the format.

use std::time::Duration;

use serde_json::{Value, json};

use crate::python::run_script;

/// Each URL's `status`, `content_type` and, when it answered 200, its `families` by name
/// (each with its `type` and `samples`: `[name, labels, value]`).
pub async fn scrape(urls: &[String]) -> Value {
    run_script(
        "metrics/scrape.py",
        &json!({ "urls": urls }),
        Duration::from_secs(60),
    )
    .await
}

/// [`scrape`] sending `accept` as the Accept header (`application/openmetrics-text` asks
/// for OpenMetrics, with exemplars); a sample with an exemplar has it as its fourth item
/// (`labels`, `value`, `timestamp`).
pub async fn scrape_accepting(urls: &[String], accept: &str) -> Value {
    run_script(
        "metrics/scrape.py",
        &json!({ "urls": urls, "accept": accept }),
        Duration::from_secs(60),
    )
    .await
}

/// The value of the sample `name` of `family` whose labels include `labels`.
pub fn sample(family: &Value, name: &str, labels: &Value) -> Option<f64> {
    family["samples"].as_array()?.iter().find_map(|s| {
        let matches = s[0] == name
            && labels
                .as_object()
                .is_some_and(|want| want.iter().all(|(k, v)| &s[1][k] == v));
        matches.then(|| s[2].as_f64()).flatten()
    })
}
