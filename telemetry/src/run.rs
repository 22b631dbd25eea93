//! A run's life on the controller as spans, recorded when the run ends from what the
//! store holds. Its phases span processes and replicas (one replica takes the POST,
//! another may lease it and end it; a restart may fall between), so no live span could
//! hold them: the ending replica writes them with the stored instants, under the run's
//! derived ids (see the crate's docs).
//!
//! `run` (root: created to ended), with children `queued` (created to the agent's
//! accepting its lease), `leased` (accepted to the agent's first frame), `executing`
//! (first frame to last frame; the per-second frames are one span with their count, not a
//! span each) and `ended` (last frame to the ending; its outcome as `iohr.run.status`).
//! A phase the run never reached (cancelled while queued, say) is left out.

use std::borrow::Cow;
use std::time::{Duration, SystemTime};

use opentelemetry::KeyValue;
use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceState};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator, SpanData, SpanEvents, SpanLinks};

/// What the store knows of an ended run; instants in Unix milliseconds.
#[derive(Debug, Clone)]
pub struct RunLife<'a> {
    pub run_id: &'a str,
    pub kind: &'a str,
    pub account_id: &'a str,
    pub agent_id: Option<&'a str>,
    pub status: &'a str,
    pub reason: Option<&'a str>,
    pub created_ms: i64,
    /// When an agent accepted its lease.
    pub started_ms: Option<i64>,
    pub first_frame_ms: Option<i64>,
    pub last_frame_ms: Option<i64>,
    pub frames: u64,
    pub ended_ms: i64,
}

/// The run's spans, in the order they start.
pub fn spans(life: &RunLife<'_>) -> Vec<SpanData> {
    let trace_id = crate::run_trace_id(life.run_id);
    let root = crate::run_span_id(life.run_id);
    let ids = RandomIdGenerator::default();
    let mut common = vec![KeyValue::new("iohr.run_id", life.run_id.to_string())];
    common.push(KeyValue::new("iohr.run.kind", life.kind.to_string()));
    common.push(KeyValue::new(
        "iohr.account_id",
        life.account_id.to_string(),
    ));
    if let Some(agent) = life.agent_id {
        common.push(KeyValue::new("iohr.agent_id", agent.to_string()));
    }
    let outcome = || {
        let mut attributes = vec![KeyValue::new("iohr.run.status", life.status.to_string())];
        if let Some(reason) = life.reason {
            attributes.push(KeyValue::new("iohr.run.reason", reason.to_string()));
        }
        attributes
    };
    let span = |name: &'static str, id: SpanId, parent: SpanId, from: i64, to: i64, extra| {
        let mut attributes = common.clone();
        attributes.extend::<Vec<KeyValue>>(extra);
        SpanData {
            span_context: SpanContext::new(
                trace_id,
                id,
                TraceFlags::SAMPLED,
                false,
                TraceState::NONE,
            ),
            parent_span_id: parent,
            parent_span_is_remote: false,
            span_kind: SpanKind::Internal,
            name: Cow::Borrowed(name),
            start_time: at(from),
            end_time: at(to.max(from)),
            attributes,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: if matches!(life.status, "error") {
                Status::error(life.reason.unwrap_or("error").to_string())
            } else {
                Status::Unset
            },
            instrumentation_scope: crate::SCOPE.get().cloned().unwrap_or_default(),
        }
    };
    let end = life.ended_ms;
    let mut out = vec![span(
        "run",
        root,
        SpanId::INVALID,
        life.created_ms,
        end,
        outcome(),
    )];
    let started = life.started_ms;
    out.push(span(
        "queued",
        ids.new_span_id(),
        root,
        life.created_ms,
        started.unwrap_or(end),
        Vec::new(),
    ));
    if let Some(started) = started {
        out.push(span(
            "leased",
            ids.new_span_id(),
            root,
            started,
            life.first_frame_ms.unwrap_or(end),
            Vec::new(),
        ));
        if let (Some(first), Some(last)) = (life.first_frame_ms, life.last_frame_ms) {
            out.push(span(
                "executing",
                ids.new_span_id(),
                root,
                first,
                last,
                vec![KeyValue::new(
                    "iohr.frames",
                    i64::try_from(life.frames).unwrap_or(i64::MAX),
                )],
            ));
        }
    }
    let last = life.last_frame_ms.or(started).unwrap_or(life.created_ms);
    out.push(span("ended", ids.new_span_id(), root, last, end, outcome()));
    out
}

/// Queues the run's spans for export (nothing when export is off).
pub fn record(life: &RunLife<'_>) {
    if !crate::enabled() {
        return;
    }
    for span in spans(life) {
        crate::export::offer(span);
    }
}

fn at(ms: i64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A load run's life (created 1 s, ended 9 s, 5 frames), leased at `started` and
    /// framed from the first to the second of `frames`; the exporter's tests use it too.
    pub(crate) fn life(started: Option<i64>, frames: Option<(i64, i64)>) -> RunLife<'static> {
        RunLife {
            run_id: "r1",
            kind: "load",
            account_id: "a1",
            agent_id: Some("g1"),
            status: "passed",
            reason: None,
            created_ms: 1_000,
            started_ms: started,
            first_frame_ms: frames.map(|f| f.0),
            last_frame_ms: frames.map(|f| f.1),
            frames: 5,
            ended_ms: 9_000,
        }
    }

    fn names(spans: &[SpanData]) -> Vec<&str> {
        spans.iter().map(|s| s.name.as_ref()).collect()
    }

    #[test]
    fn a_run_that_ran_has_every_phase_under_its_root() {
        let spans = spans(&life(Some(2_000), Some((3_000, 8_000))));
        assert_eq!(
            names(&spans),
            ["run", "queued", "leased", "executing", "ended"]
        );
        let root = &spans[0];
        assert_eq!(root.span_context.span_id(), crate::run_span_id("r1"));
        assert_eq!(root.parent_span_id, SpanId::INVALID);
        for child in &spans[1..] {
            assert_eq!(child.parent_span_id, root.span_context.span_id());
            assert_eq!(child.span_context.trace_id(), crate::run_trace_id("r1"));
            assert!(child.start_time >= root.start_time && child.end_time <= root.end_time);
        }
        let starts: Vec<SystemTime> = spans[1..].iter().map(|s| s.start_time).collect();
        assert!(starts.is_sorted(), "phases in order");
        assert_eq!(spans[1].end_time, at(2_000));
        assert_eq!(spans[3].start_time, at(3_000));
        assert_eq!(spans[4].start_time, at(8_000));
        assert!(
            spans[4]
                .attributes
                .contains(&KeyValue::new("iohr.run.status", "passed"))
        );
    }

    #[test]
    fn a_run_cancelled_while_queued_has_no_lease_phases() {
        let spans = spans(&life(None, None));
        assert_eq!(names(&spans), ["run", "queued", "ended"]);
        assert_eq!(spans[1].end_time, at(9_000));
    }
}
