use iohr_domain::{RunKind, RunStatus};
use iohr_proto::link::Completion;

use super::*;

fn table() -> (Leases, CancellationToken) {
    let leases = Leases::default();
    let cancel = leases.insert("l1", 1, "r1", RunKind::Load);
    (leases, cancel)
}

fn completion(leases: &Leases) -> Completion {
    let mut out = leases.take_outgoing(10);
    assert_eq!(out.completions.len(), 1, "exactly one completion");
    out.completions.remove(0)
}

#[tokio::test]
async fn a_panicking_executor_ends_its_run_in_error_with_the_panic_message() {
    let (leases, cancel) = table();
    let ending = Ending::new(&leases, "l1", "r1", cancel.clone());
    #[allow(clippy::panic)]
    let task = tokio::spawn(async { panic!("the plan was {}", "bad") });
    ending.finish(task.await);
    let done = completion(&leases);
    assert_eq!(done.status, "error");
    assert_eq!(done.reason, "executor failed: panicked: the plan was bad");
    assert!(
        cancel.is_cancelled(),
        "what the executor spawned is stopped"
    );
}

#[tokio::test]
async fn an_aborted_executor_ends_its_run_in_error() {
    let (leases, cancel) = table();
    let ending = Ending::new(&leases, "l1", "r1", cancel);
    let task = tokio::spawn(std::future::pending::<Outcome>());
    task.abort();
    ending.finish(task.await);
    assert_eq!(
        completion(&leases).reason,
        "executor failed: its task was aborted"
    );
}

#[test]
fn an_ending_dropped_without_an_outcome_still_ends_the_run() {
    let (leases, cancel) = table();
    drop(Ending::new(&leases, "l1", "r1", cancel.clone()));
    let done = completion(&leases);
    assert_eq!(done.status, "error");
    assert_eq!(
        done.reason,
        "executor failed: its task ended without an outcome"
    );
    assert!(cancel.is_cancelled());
}

#[test]
fn an_outcome_ends_the_run_as_it_says() {
    let (leases, cancel) = table();
    let outcome = Outcome {
        status: RunStatus::Passed,
        reason: None,
        result: serde_json::json!({"requests": 3}),
        units_spent: 3,
    };
    Ending::new(&leases, "l1", "r1", cancel.clone()).finish(Ok(outcome));
    let done = completion(&leases);
    assert_eq!((done.status.as_str(), done.units_spent), ("passed", 3));
    assert_eq!(done.result_json, r#"{"requests":3}"#);
    assert!(!cancel.is_cancelled());
}

#[test]
fn a_panic_message_is_one_bounded_line() {
    let long = format!("first line {}\nsecond", "x".repeat(2000));
    let text = panic_message(&long);
    assert!(text.starts_with("panicked: first line "));
    assert!(!text.contains("second"));
    assert_eq!(text.chars().count(), "panicked: ".len() + 500);
    assert_eq!(panic_message(&42u8), "panicked: (no message)");
}
