//! The end of a soak (`iohr-bench-soak`): every posted run read back through the API,
//! its status, its frames over SSE and what the simulated agents saw of it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use anyhow::Context;
use futures_util::StreamExt;
use serde_json::{Value, json};

use crate::api::Api;
use crate::soak_agent::SoakTracker;

/// One run's event stream must close (it is finished) within this.
const FRAMES_LIMIT: Duration = Duration::from_secs(10);
/// Runs read back at once.
const READ_CONCURRENCY: usize = 8;
/// Examples kept of each kind of trouble.
const EXAMPLES: usize = 20;

pub(crate) fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

pub(crate) fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// A run's frames as read back: (number, kind) of each, or why they could not be.
type FramesRead = anyhow::Result<Vec<(u64, String)>>;

/// Reads every posted run back: its status (the list), its frames (SSE), and what the
/// agents saw of it.
pub(crate) async fn read_back(
    apis: &[(String, Api)],
    created: &[String],
    frames_per_run: u64,
    tracker: &SoakTracker,
) -> anyhow::Result<Value> {
    let mut listed = None;
    for (_, api) in apis {
        match api.all_runs(created.len() / 500 + 20).await {
            Ok(runs) => {
                listed = Some(runs);
                break;
            }
            Err(error) => eprintln!("listing runs failed: {error:#}"),
        }
    }
    let listed = listed.context("no replica listed the runs")?;
    let api = apis.first().map(|(_, a)| a.clone()).context("no replica")?;
    let status: HashMap<String, String> = listed.into_iter().collect();
    let posted: HashSet<&str> = created.iter().map(String::as_str).collect();
    let mut statuses: BTreeMap<String, u64> = BTreeMap::new();
    let mut not_passed = Vec::new();
    let mut not_passed_n = 0;
    for id in created {
        let s = status
            .get(id)
            .cloned()
            .unwrap_or_else(|| "missing".to_string());
        *statuses.entry(s.clone()).or_default() += 1;
        if s != "passed" {
            not_passed_n += 1;
            if not_passed.len() < EXAMPLES {
                not_passed.push(json!([id, s]));
            }
        }
    }
    let mut extra: BTreeMap<String, u64> = BTreeMap::new();
    for (id, s) in &status {
        if !posted.contains(id.as_str()) {
            *extra.entry(s.clone()).or_default() += 1;
        }
    }
    // Frames of every ended run.
    let ended = |s: &str| matches!(s, "passed" | "failed" | "error" | "cancelled");
    let checks: Vec<(String, FramesRead)> = futures_util::stream::iter(
        created
            .iter()
            .filter(|id| status.get(*id).is_some_and(|s| ended(s)))
            .map(|id| {
                let api = api.clone();
                async move {
                    let frames = api.frames(id, FRAMES_LIMIT).await;
                    (id.clone(), frames)
                }
            }),
    )
    .buffer_unordered(READ_CONCURRENCY)
    .collect()
    .await;
    let (mut bad, mut unread, mut repeated, mut gaps, mut unfinished, mut odd_count) =
        (0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
    let mut bad_examples = Vec::new();
    for (id, frames) in &checks {
        let frames = match frames {
            Ok(f) => f,
            Err(error) => {
                unread += 1;
                if bad_examples.len() < EXAMPLES {
                    bad_examples.push(json!({"run": id, "error": format!("{error:#}")}));
                }
                continue;
            }
        };
        let numbers: Vec<u64> = frames.iter().map(|f| f.0).collect();
        let in_order = numbers.iter().enumerate().all(|(i, n)| *n == i as u64 + 1);
        let mut seen = HashSet::new();
        let dup = numbers.iter().any(|n| !seen.insert(*n));
        let finished = frames.last().is_some_and(|f| f.1 == "finished");
        let expected = frames_per_run + 1;
        if dup {
            repeated += 1;
        } else if !in_order {
            gaps += 1;
        }
        if !finished {
            unfinished += 1;
        }
        if numbers.len() as u64 != expected && status.get(id).is_some_and(|s| s == "passed") {
            odd_count += 1;
        }
        if dup || !in_order || !finished || numbers.is_empty() {
            bad += 1;
            if bad_examples.len() < EXAMPLES {
                bad_examples.push(json!({"run": id, "frames": numbers, "last": frames.last().map(|f| f.1.clone())}));
            }
        }
    }
    // What the agents saw.
    let seen = tracker.take();
    let now = Instant::now();
    let (mut twice, mut several, mut stored_twice, mut never_accepted) = (0u64, 0u64, 0u64, 0u64);
    let mut twice_examples = Vec::new();
    for id in created {
        let Some(run) = seen.get(id) else {
            never_accepted += 1;
            continue;
        };
        if run.holds.is_empty() {
            never_accepted += 1;
        }
        if run.agents() > 1 {
            several += 1;
        }
        if run.stored_by.len() > 1 {
            stored_twice += 1;
        }
        if run.placed_twice(now) {
            twice += 1;
            if twice_examples.len() < EXAMPLES {
                twice_examples.push(json!({
                    "run": id,
                    "holds": run.holds.iter().map(|h| json!([h.agent, h.lease_id])).collect::<Vec<_>>(),
                    "stored_by": run.stored_by,
                }));
            }
        }
    }
    Ok(json!({
        "runs_posted": created.len(),
        "statuses": statuses,
        "runs_not_passed": not_passed_n,
        "not_passed_examples": not_passed,
        "runs_in_store_not_posted_by_201": extra,
        "frames_checked": checks.len(),
        "runs_with_frames_lost_or_repeated": bad,
        "frames_repeated": repeated,
        "frames_missing_or_out_of_order": gaps,
        "not_ending_finished": unfinished,
        "event_stream_unread": unread,
        "passed_with_other_than_frames_plus_finished": odd_count,
        "bad_frame_examples": bad_examples,
        "runs_placed_twice": twice,
        "placed_twice_examples": twice_examples,
        "runs_accepted_by_several_agents": several,
        "runs_stored_by_two_agents": stored_twice,
        "runs_never_accepted": never_accepted,
    }))
}
