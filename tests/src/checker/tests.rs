//! The checker catches a planted violation of each promise, and passes a history that
//! keeps them all (hand-made; partition.rs feeds it doctored real histories too).

use super::*;
use crate::history::{Bounds, CutSpan, Fault, Leases, Request, Run, Seen, Stream};

const BOUNDS: Bounds = Bounds {
    stop_ms: 4_000,
    slack_ms: 2_000,
    fault_ms: 1_000,
};

fn request(at_ms: u64, agent: &str, run: &str) -> Request {
    Request {
        at_ms,
        agent: agent.to_string(),
        run: Some(run.to_string()),
    }
}

fn seen(at_ms: u64, status: &str, reason: Option<&str>) -> Seen {
    Seen {
        at_ms,
        status: status.to_string(),
        reason: reason.map(str::to_string),
        confirmed: false,
    }
}

fn stream(n: u64) -> Stream {
    let mut frames: Vec<(Option<u64>, String)> =
        (1..n).map(|i| (Some(i), "load".to_string())).collect();
    frames.push((Some(n), "finished".to_string()));
    Stream {
        replica: "r1".to_string(),
        frames,
    }
}

/// Scenario 1 as it should go: edge-1 runs `r1` from 0 to 10 s, is cut at 10 s and stops
/// at once; the run ends `agent lost` at 19 s; after the heal at 25 s, `r2` runs on edge-2
/// from 30 s to 32 s and passes. A fault of `r3` (30 s deadline) is undone 3 s after its
/// agent's cut.
fn good() -> History {
    let mut requests: Vec<Request> = (0..100).map(|i| request(i * 100, "edge-1", "r1")).collect();
    requests.extend((0..20).map(|i| request(30_000 + i * 100, "edge-2", "r2")));
    History {
        test: "good".to_string(),
        bounds: BOUNDS,
        agents: BTreeMap::new(),
        requests,
        runs: vec![
            Run {
                id: "r1".to_string(),
                exclusive: true,
                acknowledged: true,
                exists_after: true,
                statuses: vec![
                    seen(0, "running", None),
                    seen(19_000, "error", Some("agent lost")),
                ],
                streams: vec![stream(12)],
            },
            Run {
                id: "r2".to_string(),
                exclusive: true,
                acknowledged: true,
                exists_after: true,
                statuses: vec![seen(29_900, "running", None), seen(32_500, "passed", None)],
                streams: vec![
                    stream(5),
                    Stream {
                        replica: "r2".to_string(),
                        ..stream(5)
                    },
                ],
            },
        ],
        cuts: vec![CutSpan {
            agent: "edge-1".to_string(),
            what: "Port(4242)".to_string(),
            from_ms: 10_000,
            to_ms: Some(25_000),
            silences_controller: true,
        }],
        faults: vec![Fault {
            run: "r3".to_string(),
            agent: "edge-1".to_string(),
            applied_ms: 9_000,
            deadline_ms: 39_000,
            undone_ms: Some(13_000),
        }],
        leases: vec![
            leases(0, &[("edge-1", &["r1"]), ("edge-2", &[])]),
            leases(19_000, &[("edge-1", &[]), ("edge-2", &[])]),
            leases(29_900, &[("edge-1", &[]), ("edge-2", &["r2"])]),
            leases(32_500, &[("edge-1", &[]), ("edge-2", &[])]),
        ],
        api_errors: Vec::new(),
        store_lossy: false,
    }
}

fn leases(at_ms: u64, held: &[(&str, &[&str])]) -> Leases {
    Leases {
        at_ms,
        held: held
            .iter()
            .map(|(agent, runs)| {
                let runs = runs.iter().map(ToString::to_string).collect();
                (agent.to_string(), runs)
            })
            .collect(),
    }
}

/// The promises `history` breaks, each once.
fn broken(history: &History) -> Vec<Promise> {
    let mut promises: Vec<Promise> = check(history).into_iter().map(|v| v.promise).collect();
    promises.sort();
    promises.dedup();
    promises
}

#[test]
fn a_history_that_keeps_every_promise_passes() {
    assert_eq!(check(&good()), vec![]);
}

#[test]
fn one_run_on_two_agents_at_once_is_caught() {
    let mut h = good();
    h.requests.push(request(5_000, "edge-2", "r1"));
    assert_eq!(broken(&h), vec![Promise::Exclusive]);
}

#[test]
fn one_agent_running_two_exclusive_runs_is_caught() {
    let mut h = good();
    h.requests.push(request(31_000, "edge-2", "r1b"));
    h.requests.push(request(31_500, "edge-2", "r1b"));
    h.runs.push(Run {
        id: "r1b".to_string(),
        exclusive: true,
        ..h.runs[1].clone()
    });
    assert_eq!(broken(&h), vec![Promise::Exclusive]);
    // A non-exclusive run beside it is allowed.
    h.runs.last_mut().expect("r1b").exclusive = false;
    assert_eq!(broken(&h), vec![]);
}

#[test]
fn leases_of_one_run_on_two_agents_or_two_runs_on_one_are_caught() {
    // The controller lists r2 on both agents in one look.
    let mut h = good();
    h.leases
        .push(leases(30_000, &[("edge-1", &["r2"]), ("edge-2", &["r2"])]));
    assert_eq!(broken(&h), vec![Promise::Exclusive]);
    // edge-2 holds r1 and r2 at once.
    let mut h = good();
    h.leases.push(leases(
        30_000,
        &[("edge-1", &[]), ("edge-2", &["r1", "r2"])],
    ));
    assert_eq!(broken(&h), vec![Promise::Exclusive]);
    // Not when one of them is not exclusive.
    h.runs[0].exclusive = false;
    assert_eq!(broken(&h), vec![]);
}

#[test]
fn load_after_the_stop_bound_is_caught() {
    let mut h = good();
    // edge-1 goes on sending r1 7 s into its cut.
    h.requests.push(request(17_000, "edge-1", "r1"));
    assert_eq!(broken(&h), vec![Promise::StopsInBound]);
    // Inside the bound it may.
    let mut h = good();
    h.requests.push(request(15_500, "edge-1", "r1"));
    assert_eq!(broken(&h), vec![]);
}

#[test]
fn a_slot_handed_on_or_a_run_ended_inside_the_bound_is_caught() {
    // The store ends the run `agent lost` 2 s into the cut, when edge-1 may still send
    // (inside the 4 s stop bound).
    let mut h = good();
    h.runs[0].statuses[1].at_ms = 12_000;
    assert_eq!(broken(&h), vec![Promise::StopsInBound]);
    // The cut agent's run reaches another agent inside the bound (after the first stopped,
    // so not at once).
    let mut h = good();
    h.requests.push(request(13_000, "edge-2", "r1"));
    h.runs[0].statuses[1].at_ms = 20_000;
    assert_eq!(broken(&h), vec![Promise::StopsInBound]);
}

#[test]
fn a_second_ending_or_none_is_caught() {
    let mut h = good();
    h.runs[1].statuses.push(seen(33_000, "failed", None));
    assert_eq!(broken(&h), vec![Promise::OneEnding]);
    let mut h = good();
    h.runs[1].statuses.pop();
    assert_eq!(broken(&h), vec![Promise::OneEnding]);
    // A request after the ending.
    let mut h = good();
    h.requests.push(request(32_600, "edge-2", "r2"));
    assert_eq!(broken(&h), vec![Promise::OneEnding]);
}

#[test]
fn a_gap_a_repeat_or_a_missing_finish_is_caught() {
    for doctor in [
        // A gap: frame 3 missing.
        |s: &mut Stream| {
            s.frames.remove(2);
        },
        // A repeat: frame 2 twice.
        |s: &mut Stream| {
            let twice = s.frames[1].clone();
            s.frames.insert(2, twice);
        },
        // No `finished`.
        |s: &mut Stream| {
            s.frames.pop();
        },
        // Two of them.
        |s: &mut Stream| {
            let n = s.frames.len() as u64;
            s.frames.push((Some(n + 1), "finished".to_string()));
        },
    ] {
        let mut h = good();
        // On the second replica's stream only.
        doctor(&mut h.runs[1].streams[1]);
        assert_eq!(
            broken(&h),
            vec![Promise::Frames],
            "{:?}",
            h.runs[1].streams[1]
        );
    }
}

#[test]
fn a_fault_past_its_bound_is_caught() {
    // Its agent was cut at 10 s: the dead man's switch had to undo it by 16 s + 1 s.
    let mut h = good();
    h.faults[0].undone_ms = Some(18_000);
    assert_eq!(broken(&h), vec![Promise::FaultBound]);
    // Never undone.
    h.faults[0].undone_ms = None;
    assert_eq!(broken(&h), vec![Promise::FaultBound]);
    // Without a cut, its deadline plus the bound.
    let mut h = good();
    h.cuts.clear();
    h.faults[0].undone_ms = Some(39_900);
    assert_eq!(broken(&h), vec![]);
    h.faults[0].undone_ms = Some(40_100);
    assert_eq!(broken(&h), vec![Promise::FaultBound]);
}

#[test]
fn a_lost_run_or_a_lost_confirmation_is_caught() {
    let mut h = good();
    h.runs[1].exists_after = false;
    assert_eq!(broken(&h), vec![Promise::Acknowledged]);
    let mut h = good();
    for s in &mut h.runs[1].statuses {
        s.confirmed = true;
    }
    assert_eq!(broken(&h), vec![]);
    h.runs[1].statuses[1].confirmed = false;
    assert_eq!(broken(&h), vec![Promise::Acknowledged]);
}

#[test]
fn a_history_reads_back_as_written() {
    let h = good();
    let text = serde_json::to_string(&h).expect("serialise");
    let back: History = serde_json::from_str(&text).expect("deserialise");
    assert_eq!(back, h);
}
