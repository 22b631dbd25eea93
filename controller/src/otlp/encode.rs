//! A run's load frames as OTLP metrics, encoded by the OpenTelemetry project's own
//! protobuf types (`opentelemetry-proto`): one resource per run and agent (its attributes
//! name the run, its kind, scenario and version, environment and agent), and per second:
//!
//! - `iohr.run.latency`: a delta histogram in milliseconds of that second's corrected
//!   latency, built from the frame's HdrHistogram (exact counts per bucket, [`BOUNDS_MS`]),
//!   one point for the whole run and one per operation (`iohr.operation`);
//! - `iohr.run.requests` and `iohr.run.errors`: delta sums (requests completed; failed ones:
//!   no response or a status of 400 or more);
//! - `iohr.run.rate`: a gauge of requests completed per second.
//!
//! Every point carries `iohr.phase` (`warmup` or `measure`); warm-up seconds have no
//! histogram, as their frames carry none. A latency point carries the frame's exemplars
//! (its slowest and first failed requests, those of the point's operation on an
//! operation's point): the trace id and the latency in ms, a failed one's outcome as
//! `iohr.outcome`; no span id, which the agent does not keep.

use std::collections::BTreeMap;

use iohr_domain::load::{Counts, Exemplars, LoadSecond};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Exemplar, Gauge, Histogram, HistogramDataPoint, Metric,
    NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum, exemplar, metric, number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;

/// The latency histogram's bucket bounds, in milliseconds: what a dashboard of request
/// latency usually splits at, from half a millisecond to a minute.
pub const BOUNDS_MS: [f64; 18] = [
    0.5, 1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 75.0, 100.0, 250.0, 500.0, 750.0, 1000.0, 2500.0, 5000.0,
    10000.0, 30000.0, 60000.0,
];

/// What the resource of a run's metrics says about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunMeta {
    pub run_id: String,
    pub account_id: String,
    pub kind: String,
    pub scenario_id: String,
    pub scenario_version: String,
    pub environment: String,
    /// The whole a share of a split run belongs to.
    pub share_of: Option<String>,
}

/// One second of one run from one agent, as the exporter holds it.
#[derive(Debug, Clone)]
pub struct Second {
    pub run: std::sync::Arc<RunMeta>,
    pub agent: String,
    /// When the frame was stored, in Unix milliseconds: the end of its second.
    pub at_ms: i64,
    pub load: LoadSecond,
}

fn attribute(key: &str, value: impl Into<String>) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.into())),
        }),
        ..Default::default()
    }
}

fn resource(run: &RunMeta, agent: &str) -> Resource {
    let mut attributes = vec![
        attribute("service.name", "iohr"),
        attribute("iohr.run.id", &run.run_id),
        attribute("iohr.run.kind", &run.kind),
        attribute("iohr.scenario.id", &run.scenario_id),
        attribute("iohr.scenario.version", &run.scenario_version),
        attribute("iohr.environment", &run.environment),
        attribute("deployment.environment.name", &run.environment),
        attribute("iohr.agent", agent),
    ];
    if let Some(whole) = &run.share_of {
        attributes.push(attribute("iohr.run.share_of", whole));
    }
    Resource {
        attributes,
        ..Default::default()
    }
}

/// The points of one resource, by metric.
#[derive(Default)]
struct Points {
    latency: Vec<HistogramDataPoint>,
    requests: Vec<NumberDataPoint>,
    errors: Vec<NumberDataPoint>,
    rate: Vec<NumberDataPoint>,
}

fn nanos(ms: i64) -> u64 {
    u64::try_from(ms).unwrap_or(0).saturating_mul(1_000_000)
}

/// A frame's exemplars as OTLP's, those of `operation` only when named. Trace ids that
/// are not 16 bytes of hex were refused when the frame was read: none is sent here.
fn exemplars(of: &Exemplars, operation: Option<&str>, at: u64) -> Vec<Exemplar> {
    of.slowest
        .iter()
        .chain(&of.failed)
        .filter(|e| operation.is_none_or(|name| e.operation == name))
        .filter_map(|e| {
            let trace_id = u128::from_str_radix(&e.trace_id, 16).ok()?;
            Some(Exemplar {
                filtered_attributes: e
                    .outcome
                    .iter()
                    .map(|o| attribute("iohr.outcome", o))
                    .collect(),
                time_unix_nano: at,
                trace_id: trace_id.to_be_bytes().to_vec(),
                value: Some(exemplar::Value::AsDouble(e.latency_us as f64 / 1000.0)),
                ..Default::default()
            })
        })
        .collect()
}

/// A histogram point from a frame's encoded HdrHistogram (microseconds); `None` when it
/// does not decode (the frame's other figures are still sent).
fn latency_point(
    encoded: &str,
    attributes: Vec<KeyValue>,
    (start, end): (u64, u64),
    exemplars: Vec<Exemplar>,
) -> Option<HistogramDataPoint> {
    let histogram = match iohr_domain::histogram::decode(encoded) {
        Ok(histogram) => histogram,
        Err(error) => {
            tracing::warn!(%error, "a load frame's histogram does not decode: not exported");
            return None;
        }
    };
    let mut buckets = vec![0u64; BOUNDS_MS.len() + 1];
    for value in histogram.iter_recorded() {
        let ms = value.value_iterated_to() as f64 / 1000.0;
        // Bucket i holds (bounds[i-1], bounds[i]]; the last one everything above.
        let bucket = BOUNDS_MS.partition_point(|bound| *bound < ms);
        buckets[bucket] += value.count_at_value();
    }
    let count = histogram.len();
    let empty = count == 0;
    Some(HistogramDataPoint {
        attributes,
        start_time_unix_nano: start,
        time_unix_nano: end,
        count,
        sum: Some(histogram.mean() * count as f64 / 1000.0),
        bucket_counts: buckets,
        explicit_bounds: BOUNDS_MS.to_vec(),
        min: (!empty).then(|| histogram.min() as f64 / 1000.0),
        max: (!empty).then(|| histogram.max() as f64 / 1000.0),
        exemplars,
        ..Default::default()
    })
}

fn int_point(value: u64, attributes: Vec<KeyValue>, start: u64, end: u64) -> NumberDataPoint {
    NumberDataPoint {
        attributes,
        start_time_unix_nano: start,
        time_unix_nano: end,
        value: Some(number_data_point::Value::AsInt(
            i64::try_from(value).unwrap_or(i64::MAX),
        )),
        ..Default::default()
    }
}

impl Points {
    fn add(&mut self, second: &Second) {
        let end = nanos(second.at_ms);
        let start = end.saturating_sub(1_000_000_000);
        let load = &second.load;
        let phase = || vec![attribute("iohr.phase", &load.phase)];
        let with_operation = |name: &str| {
            let mut attributes = phase();
            attributes.push(attribute("iohr.operation", name));
            attributes
        };
        let mut counts = |counts: &Counts, attributes: Vec<KeyValue>| {
            self.requests
                .push(int_point(counts.requests, attributes.clone(), start, end));
            self.errors
                .push(int_point(counts.failed(), attributes.clone(), start, end));
            self.rate.push(NumberDataPoint {
                attributes,
                time_unix_nano: end,
                value: Some(number_data_point::Value::AsDouble(counts.requests as f64)),
                ..Default::default()
            });
        };
        counts(&load.counts, phase());
        for (name, operation) in &load.operations {
            counts(&operation.counts, with_operation(name));
        }
        if let Some(encoded) = &load.histogram {
            let kept = exemplars(&load.exemplars, None, end);
            self.latency
                .extend(latency_point(encoded, phase(), (start, end), kept));
        }
        for (name, operation) in &load.operations {
            if let Some(encoded) = &operation.histogram {
                let kept = exemplars(&load.exemplars, Some(name), end);
                self.latency.extend(latency_point(
                    encoded,
                    with_operation(name),
                    (start, end),
                    kept,
                ));
            }
        }
    }

    fn metrics(self) -> Vec<Metric> {
        let delta = AggregationTemporality::Delta as i32;
        let sum = |points: Vec<NumberDataPoint>| {
            metric::Data::Sum(Sum {
                data_points: points,
                aggregation_temporality: delta,
                is_monotonic: true,
            })
        };
        let metric = |name: &str, description: &str, unit: &str, data| Metric {
            name: name.to_string(),
            description: description.to_string(),
            unit: unit.to_string(),
            data: Some(data),
            ..Default::default()
        };
        let mut metrics = Vec::new();
        if !self.latency.is_empty() {
            metrics.push(metric(
                "iohr.run.latency",
                "Corrected request latency (from the intended send time) in one second",
                "ms",
                metric::Data::Histogram(Histogram {
                    data_points: self.latency,
                    aggregation_temporality: delta,
                }),
            ));
        }
        metrics.push(metric(
            "iohr.run.requests",
            "Requests completed (answered or failed)",
            "{request}",
            sum(self.requests),
        ));
        metrics.push(metric(
            "iohr.run.errors",
            "Requests failed: no response, or a status of 400 or more",
            "{request}",
            sum(self.errors),
        ));
        metrics.push(metric(
            "iohr.run.rate",
            "Requests completed per second",
            "{request}/s",
            metric::Data::Gauge(Gauge {
                data_points: self.rate,
            }),
        ));
        metrics
    }
}

/// The export request of `seconds`, one resource per run and agent.
pub fn request(seconds: &[Second]) -> ExportMetricsServiceRequest {
    let mut by_resource: BTreeMap<(&str, &str), (&RunMeta, Points)> = BTreeMap::new();
    for second in seconds {
        by_resource
            .entry((second.run.run_id.as_str(), second.agent.as_str()))
            .or_insert_with(|| (&second.run, Points::default()))
            .1
            .add(second);
    }
    let scope = InstrumentationScope {
        name: "iohr".to_string(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        ..Default::default()
    };
    ExportMetricsServiceRequest {
        resource_metrics: by_resource
            .into_iter()
            .map(|((_, agent), (run, points))| ResourceMetrics {
                resource: Some(resource(run, agent)),
                scope_metrics: vec![ScopeMetrics {
                    scope: Some(scope.clone()),
                    metrics: points.metrics(),
                    ..Default::default()
                }],
                ..Default::default()
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iohr_domain::load::OperationSecond;
    use std::sync::Arc;

    fn second(at_ms: i64, micros: &[u64]) -> Second {
        let mut histogram = iohr_domain::histogram::latency_histogram().unwrap();
        for m in micros {
            histogram.record(*m).unwrap();
        }
        let encoded = iohr_domain::histogram::encode(&histogram).unwrap();
        let counts = Counts {
            requests: micros.len() as u64,
            responses: BTreeMap::from([
                ("2xx".to_string(), micros.len() as u64 - 1),
                ("5xx".to_string(), 1),
            ]),
            errors: BTreeMap::new(),
        };
        Second {
            run: Arc::new(RunMeta {
                run_id: "run-1".into(),
                account_id: "acct".into(),
                kind: "load".into(),
                scenario_id: "sc".into(),
                scenario_version: "v1".into(),
                environment: "staging".into(),
                share_of: None,
            }),
            agent: "agent-a".into(),
            at_ms,
            load: LoadSecond {
                second: 1,
                phase: "measure".into(),
                counts: counts.clone(),
                intended: 0,
                sent: 0,
                late: 0,
                late_held: 0,
                late_behind: 0,
                dropped: 0,
                histogram: Some(encoded.clone()),
                uncorrected_histogram: None,
                operations: BTreeMap::from([(
                    "get /".to_string(),
                    OperationSecond {
                        counts,
                        histogram: Some(encoded),
                    },
                )]),
                exemplars: Exemplars {
                    slowest: vec![iohr_domain::load::Exemplar {
                        trace_id: iohr_domain::load::trace_id(0xabc, at_ms as u64),
                        latency_us: micros.iter().copied().max().unwrap_or(1),
                        operation: "get /".into(),
                        outcome: None,
                    }],
                    failed: vec![iohr_domain::load::Exemplar {
                        trace_id: iohr_domain::load::trace_id(0xabc, 1),
                        latency_us: 5,
                        operation: "get /".into(),
                        outcome: Some("5xx".into()),
                    }],
                },
            },
        }
    }

    #[test]
    fn a_second_becomes_exact_buckets_counts_and_a_named_resource() {
        let seconds = [
            second(2_000, &[400, 1_500, 1_500, 80_000]),
            second(3_000, &[700_000, 700_000]),
        ];
        let request = request(&seconds);
        assert_eq!(request.resource_metrics.len(), 1, "one run, one agent");
        let rm = &request.resource_metrics[0];
        let attrs: BTreeMap<_, _> = rm
            .resource
            .as_ref()
            .unwrap()
            .attributes
            .iter()
            .map(|kv| {
                let Some(any_value::Value::StringValue(v)) =
                    kv.value.as_ref().unwrap().value.clone()
                else {
                    panic!()
                };
                (kv.key.clone(), v)
            })
            .collect();
        assert_eq!(attrs["iohr.run.id"], "run-1");
        assert_eq!(attrs["iohr.agent"], "agent-a");
        assert_eq!(attrs["iohr.scenario.version"], "v1");
        let metrics = &rm.scope_metrics[0].metrics;
        let latency = metrics
            .iter()
            .find(|m| m.name == "iohr.run.latency")
            .unwrap();
        let Some(metric::Data::Histogram(h)) = &latency.data else {
            panic!()
        };
        assert_eq!(
            h.data_points.len(),
            4,
            "a whole and an operation per second"
        );
        let first = &h.data_points[0];
        assert_eq!(first.count, 4);
        assert_eq!(first.bucket_counts.iter().sum::<u64>(), 4);
        assert_eq!(first.bucket_counts[0], 1, "0.4 ms <= 0.5");
        assert_eq!(first.bucket_counts[2], 2, "1.5 ms in (1, 2]");
        assert_eq!(first.bucket_counts[8], 1, "80 ms in (75, 100]");
        assert_eq!(
            (first.start_time_unix_nano, first.time_unix_nano),
            (1_000_000_000, 2_000_000_000)
        );
        assert!((first.max.unwrap() - 80.0).abs() < 0.1);
        // The second's slowest request and its failed one, on the whole and on their
        // operation's point.
        for point in &h.data_points[..2] {
            let ids: Vec<&[u8]> = point.exemplars.iter().map(|e| &e.trace_id[..]).collect();
            assert_eq!(ids.len(), 2, "{point:?}");
            assert_eq!(ids[0][..8], 0xabcu64.to_be_bytes());
            assert_eq!(ids[0][8..], 2_000u64.to_be_bytes());
            assert_eq!(
                point.exemplars[0].value,
                Some(exemplar::Value::AsDouble(80.0))
            );
            assert_eq!(
                point.exemplars[1].filtered_attributes[0].key,
                "iohr.outcome"
            );
        }
        let errors = metrics
            .iter()
            .find(|m| m.name == "iohr.run.errors")
            .unwrap();
        let Some(metric::Data::Sum(s)) = &errors.data else {
            panic!()
        };
        assert!(s.is_monotonic);
        assert_eq!(
            s.data_points[0].value,
            Some(number_data_point::Value::AsInt(1))
        );
        assert!(!prost::Message::encode_to_vec(&request).is_empty());
    }
}
