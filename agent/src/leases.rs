//! The agent's lease table: for each lease it holds, the run, the frames not yet
//! acknowledged by the controller, and the completion once the run has ended.
//!
//! Leases are keyed by lease id, so the output of an executor whose lease was revoked can
//! never be sent under a newer lease of the same run. Frames are numbered here, per run,
//! from 1. A frame leaves the table only when the controller acknowledges it, so after a
//! reconnect everything unacknowledged is resent.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use iohr_domain::RunKind;
use iohr_proto::link::{Completion, Frame, RunningLease};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// The pause before a refused completion is sent again.
const COMPLETION_RETRY: std::time::Duration = std::time::Duration::from_millis(250);

#[derive(Debug)]
pub struct Lease {
    pub lease_id: String,
    pub epoch: u64,
    pub run_id: String,
    pub kind: RunKind,
    pub cancel: CancellationToken,
    /// Stopped by the agent itself after losing the controller (not by a cancel).
    pub fenced: bool,
    next_number: u64,
    acked: u64,
    unacked: VecDeque<Frame>,
    /// Sent on the current stream up to this number (reset on reconnect).
    sent_through: u64,
    completion: Option<Completion>,
    completion_sent: bool,
    /// A refused completion is sent again no sooner than this: a store that is failing
    /// should not be met with a storm of resends.
    completion_hold: Option<std::time::Instant>,
}

/// A batch of frames of one lease, ready to send.
#[derive(Debug)]
pub struct Batch {
    pub lease_id: String,
    pub epoch: u64,
    pub run_id: String,
    pub frames: Vec<Frame>,
}

/// What a session should send now.
#[derive(Debug, Default)]
pub struct Outgoing {
    pub batches: Vec<Batch>,
    pub completions: Vec<Completion>,
}

/// Shared between the link and the executors.
#[derive(Debug, Clone, Default)]
pub struct Leases {
    table: Arc<Mutex<HashMap<String, Lease>>>,
    /// Woken when there is something new to send.
    pub changed: Arc<Notify>,
}

impl Leases {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Lease>> {
        // A panic while holding this lock would be a bug; the table stays usable.
        self.table
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn has_exclusive(&self) -> bool {
        self.lock().values().any(|l| l.kind.is_exclusive())
    }

    /// Whether any lease of this run is still held (its executor may still be running).
    pub fn holds_run(&self, run_id: &str) -> bool {
        self.lock().values().any(|l| l.run_id == run_id)
    }

    pub fn insert(
        &self,
        lease_id: &str,
        epoch: u64,
        run_id: &str,
        kind: RunKind,
    ) -> CancellationToken {
        let cancel = CancellationToken::new();
        self.lock().insert(
            lease_id.to_string(),
            Lease {
                lease_id: lease_id.to_string(),
                epoch,
                run_id: run_id.to_string(),
                kind,
                cancel: cancel.clone(),
                fenced: false,
                next_number: 1,
                acked: 0,
                unacked: VecDeque::new(),
                sent_through: 0,
                completion: None,
                completion_sent: false,
                completion_hold: None,
            },
        );
        cancel
    }

    /// Numbers and queues a frame of a lease's run.
    pub fn push_frame(&self, lease_id: &str, kind: &str, payload_json: String) {
        if let Some(lease) = self.lock().get_mut(lease_id) {
            let number = lease.next_number;
            lease.next_number += 1;
            lease.unacked.push_back(Frame {
                number,
                kind: kind.to_string(),
                payload_json,
            });
        }
        self.changed.notify_one();
    }

    /// The run ended on this agent: its completion is sent after its last frame. A run
    /// the agent stopped itself (fenced) ends `error`, not `cancelled`.
    pub fn complete(
        &self,
        lease_id: &str,
        status: &str,
        reason: &str,
        result_json: String,
        units_spent: u64,
    ) {
        if let Some(lease) = self.lock().get_mut(lease_id) {
            let (status, reason) = if lease.fenced && status == "cancelled" {
                (
                    "error",
                    "lost contact with the controller: the agent stopped the run",
                )
            } else {
                (status, reason)
            };
            lease.completion = Some(Completion {
                lease_id: lease.lease_id.clone(),
                epoch: lease.epoch,
                run_id: lease.run_id.clone(),
                status: status.to_string(),
                reason: reason.to_string(),
                result_json,
                last_frame: lease.next_number - 1,
                units_spent,
            });
        }
        self.changed.notify_one();
    }

    /// The controller stored every frame through `through`. When that is below the last
    /// frame of the batch it answers, frames went missing: send again from there.
    pub fn ack(&self, lease_id: &str, through: u64, batch_last: u64) {
        let mut table = self.lock();
        let Some(lease) = table.get_mut(lease_id) else {
            return;
        };
        lease.acked = lease.acked.max(through);
        while lease
            .unacked
            .front()
            .is_some_and(|f| f.number <= lease.acked)
        {
            lease.unacked.pop_front();
        }
        if through < batch_last {
            lease.sent_through = lease.acked;
            drop(table);
            self.changed.notify_one();
        }
    }

    /// The controller stored the completion (or has no use for it): forget the lease.
    pub fn forget(&self, lease_id: &str) -> Option<Lease> {
        self.lock().remove(lease_id)
    }

    /// The controller refused the completion (frames missing, store failing): resend
    /// from the ack, and the completion after a pause.
    pub fn rewind(&self, lease_id: &str) {
        if let Some(lease) = self.lock().get_mut(lease_id) {
            lease.sent_through = lease.acked;
            lease.completion_sent = false;
            lease.completion_hold = Some(std::time::Instant::now() + COMPLETION_RETRY);
        }
        self.changed.notify_one();
    }

    /// Cancels the executor of a lease.
    pub fn cancel(&self, lease_id: &str) -> bool {
        match self.lock().get(lease_id) {
            Some(lease) => {
                lease.cancel.cancel();
                true
            }
            None => false,
        }
    }

    /// Drops a lease the controller revoked: its executor is cancelled and nothing of it
    /// is sent again.
    pub fn revoke(&self, lease_id: &str) {
        if let Some(lease) = self.lock().remove(lease_id) {
            lease.cancel.cancel();
        }
    }

    /// Stops exclusive runs (the agent lost the controller): they must not go on loading
    /// a target nobody watches.
    pub fn fence_exclusive(&self) -> usize {
        let mut stopped = 0;
        for lease in self.lock().values_mut() {
            if lease.kind.is_exclusive()
                && lease.completion.is_none()
                && !lease.cancel.is_cancelled()
            {
                lease.fenced = true;
                lease.cancel.cancel();
                stopped += 1;
            }
        }
        stopped
    }

    /// What the hello reports: every held lease with its last acknowledged frame. A new
    /// stream starts sending from there.
    pub fn report_for_new_stream(&self) -> Vec<RunningLease> {
        self.lock()
            .values_mut()
            .map(|lease| {
                lease.sent_through = lease.acked;
                lease.completion_sent = false;
                RunningLease {
                    lease_id: lease.lease_id.clone(),
                    epoch: lease.epoch,
                    run_id: lease.run_id.clone(),
                    last_acked_frame: lease.acked,
                }
            })
            .collect()
    }

    /// Frames not yet sent on this stream (at most `max_frames` per lease), then
    /// completions whose frames have all been sent.
    pub fn take_outgoing(&self, max_frames: usize) -> Outgoing {
        let mut out = Outgoing::default();
        for lease in self.lock().values_mut() {
            let frames: Vec<Frame> = lease
                .unacked
                .iter()
                .filter(|f| f.number > lease.sent_through)
                .take(max_frames)
                .cloned()
                .collect();
            if let Some(last) = frames.last() {
                lease.sent_through = last.number;
                out.batches.push(Batch {
                    lease_id: lease.lease_id.clone(),
                    epoch: lease.epoch,
                    run_id: lease.run_id.clone(),
                    frames,
                });
            }
            let all_sent = lease.sent_through + 1 >= lease.next_number;
            let held = lease
                .completion_hold
                .is_some_and(|until| until > std::time::Instant::now());
            if let Some(completion) = lease
                .completion
                .as_ref()
                .filter(|_| all_sent && !lease.completion_sent && !held)
            {
                lease.completion_sent = true;
                out.completions.push(completion.clone());
            }
        }
        out
    }

    /// Whether anything is still waiting to be sent on this stream.
    pub fn has_outgoing(&self) -> bool {
        let now = std::time::Instant::now();
        self.lock().values().any(|l| {
            let held = l.completion_hold.is_some_and(|until| until > now);
            l.unacked.iter().any(|f| f.number > l.sent_through)
                || (l.completion.is_some() && !l.completion_sent && !held)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numbers(out: &Outgoing) -> Vec<u64> {
        out.batches
            .iter()
            .flat_map(|b| b.frames.iter().map(|f| f.number))
            .collect()
    }

    #[test]
    fn frames_stay_until_acknowledged_and_are_resent_on_a_new_stream() {
        let leases = Leases::default();
        leases.insert("l1", 1, "r1", RunKind::Checks);
        for i in 0..5 {
            leases.push_frame("l1", "check", format!("{{\"i\":{i}}}"));
        }
        assert_eq!(numbers(&leases.take_outgoing(3)), [1, 2, 3]);
        assert_eq!(numbers(&leases.take_outgoing(10)), [4, 5]);
        assert!(!leases.has_outgoing());
        leases.ack("l1", 2, 3);
        let report = leases.report_for_new_stream();
        assert_eq!(report[0].last_acked_frame, 2);
        assert_eq!(
            numbers(&leases.take_outgoing(10)),
            [3, 4, 5],
            "resent after the ack"
        );
    }

    #[test]
    fn an_ack_below_its_batch_means_a_gap_and_resends_from_it() {
        let leases = Leases::default();
        leases.insert("l1", 1, "r1", RunKind::Checks);
        for _ in 0..4 {
            leases.push_frame("l1", "check", "{}".into());
        }
        assert_eq!(numbers(&leases.take_outgoing(10)), [1, 2, 3, 4]);
        leases.ack("l1", 4, 4);
        leases.push_frame("l1", "check", "{}".into());
        leases.push_frame("l1", "check", "{}".into());
        assert_eq!(numbers(&leases.take_outgoing(1)), [5]);
        assert_eq!(numbers(&leases.take_outgoing(1)), [6]);
        leases.ack("l1", 4, 5);
        assert_eq!(
            numbers(&leases.take_outgoing(10)),
            [5, 6],
            "frame 5 was not stored: from 5 again"
        );
        leases.ack("l1", 6, 6);
        assert!(!leases.has_outgoing());
    }

    #[test]
    fn a_completion_follows_its_last_frame() {
        let leases = Leases::default();
        leases.insert("l1", 1, "r1", RunKind::Checks);
        leases.push_frame("l1", "started", "{}".into());
        leases.complete("l1", "passed", "", "{}".into(), 1);
        let out = leases.take_outgoing(10);
        assert_eq!(out.batches.len(), 1);
        assert_eq!(out.completions.len(), 1);
        assert_eq!(out.completions[0].last_frame, 1);
        assert!(
            leases.take_outgoing(10).completions.is_empty(),
            "sent once per stream"
        );
        leases.rewind("l1");
        assert!(
            leases.take_outgoing(10).completions.is_empty(),
            "not at once after a refusal"
        );
        if let Some(lease) = leases.lock().get_mut("l1") {
            lease.completion_hold = None;
        }
        assert_eq!(
            leases.take_outgoing(10).completions.len(),
            1,
            "sent again after the pause"
        );
        assert!(leases.forget("other").is_none());
        assert!(leases.forget("l1").is_some());
        assert!(leases.is_empty());
    }

    #[test]
    fn a_revoked_lease_takes_nothing_into_the_next_lease_of_its_run() {
        let leases = Leases::default();
        leases.insert("old", 1, "r1", RunKind::Checks);
        leases.revoke("old");
        leases.insert("new", 2, "r1", RunKind::Checks);
        // The old executor's late output goes nowhere.
        leases.push_frame("old", "check", "{}".into());
        leases.complete("old", "cancelled", "", "{}".into(), 0);
        let out = leases.take_outgoing(10);
        assert!(out.batches.is_empty() && out.completions.is_empty());
        assert!(leases.holds_run("r1"));
    }

    #[test]
    fn fencing_stops_only_exclusive_runs_and_they_end_in_error() {
        let leases = Leases::default();
        let load = leases.insert("l1", 1, "r1", RunKind::Load);
        let checks = leases.insert("l2", 1, "r2", RunKind::Checks);
        assert_eq!(leases.fence_exclusive(), 1);
        assert!(load.is_cancelled() && !checks.is_cancelled());
        leases.complete("l1", "cancelled", "cancelled", "{}".into(), 0);
        let out = leases.take_outgoing(10);
        assert_eq!(out.completions[0].status, "error");
        assert!(out.completions[0].reason.contains("lost contact"));
    }
}
