//! A fault whose deadline passes while the method goes on is undone at its deadline, and
//! a step of the wall clock meanwhile (an NTP step, an operator's `date -s`) moves that
//! undo neither later nor earlier: deadlines are held on the monotonic clock. The journal's
//! times are the wall clock's, step and all.

use super::*;

const HOUR_MS: i64 = 3_600_000;

/// A 2 s fault and a 1 min one applied at 1 s (after the hypothesis probe); the wall clock
/// stepped by `by_ms` at 1.5 s, during a 1 s probe; a 10 s pause (its wait for the deadline
/// reckoned after the step) then a probe keep the method going past the 2 s deadline.
/// Asserts what holds whatever the step: the short fault undone once, by its deadline,
/// before the last probe; the long one at the rollbacks.
async fn a_deadline_during_the_method(by_ms: i64) -> Journal {
    let h = Harness::new();
    let driver = Scripted {
        probe_time: Duration::from_secs(1),
        ..Scripted::default()
    };
    let mut late = probe("late", "/late");
    late["pauses"] = json!({"before": 10});
    let e = experiment(vec![
        hog("short", 1, "2s"),
        hog("long", 2, "1m"),
        probe("mid", "/mid"),
        late,
    ]);
    let step = async {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        h.clock.step_wall(by_ms);
    };
    let policy = policy();
    let (j, ()) = tokio::join!(h.run(&driver, &e, &policy, false), step);
    assert_eq!(j.status, JournalStatus::Completed, "{:?}", j.reason);
    let short = &j.ledger[0];
    assert_eq!(short.undone_by.as_deref(), Some("deadline"), "{j:?}");
    assert_eq!(short.deadline - short.applied_at, 2000);
    assert_eq!(
        h.clock.elapsed(short.applied_at),
        1000,
        "after the 1 s hypothesis probe"
    );
    assert_eq!(j.ledger[1].undone_by.as_deref(), Some("rollback"));
    let log = driver.log();
    assert!(log.contains(&"apply 1 for 2000 ms".to_string()), "{log:?}");
    assert_eq!(log.iter().filter(|l| l.as_str() == "undo 1").count(), 1);
    let undo_1 = log.iter().position(|l| l == "undo 1").unwrap();
    let late_probe = log.iter().position(|l| l == "probe /late").unwrap();
    assert!(
        undo_1 < late_probe,
        "undone before the 10 s pause ended: {log:?}"
    );
    j
}

/// The journal's deadline as a wall clock stepped by `by_ms` reads it.
fn stepped(j: &Journal, by_ms: i64) -> Option<u64> {
    Some(j.ledger[0].deadline.saturating_add_signed(by_ms))
}

#[tokio::test(start_paused = true)]
async fn a_fault_is_undone_at_its_deadline_while_the_method_goes_on() {
    let j = a_deadline_during_the_method(0).await;
    assert_eq!(
        j.ledger[0].undone_at,
        Some(j.ledger[0].deadline),
        "undone at its deadline"
    );
}

#[tokio::test(start_paused = true)]
async fn a_wall_clock_stepped_back_holds_no_fault_past_its_deadline() {
    let j = a_deadline_during_the_method(-HOUR_MS).await;
    // Undone at 3 s on the monotonic clock, which the stepped wall clock reads an hour
    // early (before, the wall clock's deadline was waited for: the rollbacks undid it).
    assert_eq!(j.ledger[0].undone_at, stepped(&j, -HOUR_MS));
}

#[tokio::test(start_paused = true)]
async fn a_wall_clock_stepped_forward_ends_no_fault_early() {
    let j = a_deadline_during_the_method(HOUR_MS).await;
    // At 3 s, not at 2 s when the 10 s pause began with the wall clock past the deadline.
    assert_eq!(j.ledger[0].undone_at, stepped(&j, HOUR_MS));
}
