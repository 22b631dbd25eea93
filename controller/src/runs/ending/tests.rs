use iohr_domain::RunStatus;
use iohr_domain::finding::{FindingKind, RunFinding, Sighting};
use serde_json::json;

use super::{ending_events, finds, last_frames};
use crate::store::tests::{seed, sqlite_store};
use crate::store::{Ending, FINDING_CREATED, RUN_FINISHED};

fn ending(status: RunStatus, result: Option<serde_json::Value>) -> Ending {
    Ending {
        status,
        reason: None,
        result,
        units_spent: None,
    }
}

fn finding(id: &str, seen: Sighting) -> RunFinding {
    RunFinding {
        id: id.to_string(),
        signature: format!("sig-{id}"),
        kind: FindingKind::CheckFailed,
        subject: "GET /".to_string(),
        title: "t".to_string(),
        detail: "d".to_string(),
        seen,
    }
}

/// Only a verdict with a result finds; a checks run ending `error` or `cancelled` does
/// not (its kind does not find on error).
#[tokio::test]
async fn an_ending_finds_only_with_a_verdict_and_a_result() {
    let store = sqlite_store().await;
    let (_, run) = seed(&store).await;
    let result = json!({"checks": []});
    for (status, finds_in) in [
        (RunStatus::Passed, true),
        (RunStatus::Failed, true),
        (RunStatus::Error, false),
        (RunStatus::Cancelled, false),
    ] {
        let with = ending(status, Some(result.clone()));
        assert_eq!(finds(&run, &with).is_some(), finds_in, "{status}");
        assert!(finds(&run, &ending(status, None)).is_none(), "{status}");
    }
}

/// A `finding.created` per new finding only, then `run.finished`; the last frames a
/// `finding` per finding then `finished`, numbered on.
#[tokio::test]
async fn an_endings_events_and_last_frames() {
    let store = sqlite_store().await;
    let (_, run) = seed(&store).await;
    let found = [
        finding("a", Sighting::New),
        finding("b", Sighting::SeenAgain),
        finding("c", Sighting::Reopened),
    ];
    let events = ending_events(&run, RunStatus::Failed, &found);
    let types: Vec<&str> = events.iter().map(|(t, _)| *t).collect();
    assert_eq!(types, [FINDING_CREATED, RUN_FINISHED]);
    assert_eq!(events[0].1["finding_id"], "a");
    assert_eq!(events[1].1["status"], "failed");
    assert_eq!(events[1].1["run_id"], run.id.as_str());

    let frames = last_frames(&run.id, 7, &found, RunStatus::Failed, Some("why"), 42);
    let shape: Vec<(u64, &str)> = frames.iter().map(|f| (f.number, f.kind.as_str())).collect();
    assert_eq!(
        shape,
        [
            (8, "finding"),
            (9, "finding"),
            (10, "finding"),
            (11, "finished")
        ]
    );
    assert_eq!(
        frames[3].payload,
        json!({"status": "failed", "reason": "why"})
    );
    let none = last_frames(&run.id, 0, &[], RunStatus::Cancelled, None, 42);
    assert_eq!(none.len(), 1);
    assert_eq!(
        none[0].payload,
        json!({"status": "cancelled", "reason": null})
    );
}
