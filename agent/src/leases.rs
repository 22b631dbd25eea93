//! The agent's lease table: for each run it holds, the lease, the frames not yet
//! acknowledged by the controller, and the completion once the run has ended.
//!
//! Frames are numbered here, per run, from 1. A frame leaves the table only when the
//! controller acknowledges it, so after a reconnect everything unacknowledged is resent.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use iohr_domain::RunKind;
use iohr_proto::link::{Completion, Frame, RunningLease};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

#[derive(Debug)]
pub struct Lease {
    pub lease_id: String,
    pub epoch: u64,
    pub run_id: String,
    pub kind: RunKind,
    pub cancel: CancellationToken,
    next_number: u64,
    acked: u64,
    unacked: VecDeque<Frame>,
    /// Sent on the current stream up to this number (reset on reconnect).
    sent_through: u64,
    completion: Option<Completion>,
    completion_sent: bool,
}

/// What a session should send now.
#[derive(Debug, Default)]
pub struct Outgoing {
    pub frames: Vec<(String, u64, String, Vec<Frame>)>,
    pub completions: Vec<Completion>,
}

#[derive(Debug, Default)]
struct Table {
    leases: HashMap<String, Lease>,
}

/// Shared between the link and the executors.
#[derive(Debug, Clone, Default)]
pub struct Leases {
    table: Arc<Mutex<Table>>,
    /// Woken when there is something new to send.
    pub changed: Arc<Notify>,
}

impl Leases {
    fn lock(&self) -> MutexGuard<'_, Table> {
        // A panic while holding this lock would be a bug; the table stays usable.
        self.table
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn len(&self) -> usize {
        self.lock().leases.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn has_exclusive(&self) -> bool {
        self.lock().leases.values().any(|l| l.kind.is_exclusive())
    }

    pub fn insert(
        &self,
        lease_id: &str,
        epoch: u64,
        run_id: &str,
        kind: RunKind,
    ) -> CancellationToken {
        let cancel = CancellationToken::new();
        self.lock().leases.insert(
            run_id.to_string(),
            Lease {
                lease_id: lease_id.to_string(),
                epoch,
                run_id: run_id.to_string(),
                kind,
                cancel: cancel.clone(),
                next_number: 1,
                acked: 0,
                unacked: VecDeque::new(),
                sent_through: 0,
                completion: None,
                completion_sent: false,
            },
        );
        cancel
    }

    /// Numbers and queues a frame of a run.
    pub fn push_frame(&self, run_id: &str, kind: &str, payload_json: String) {
        let mut table = self.lock();
        if let Some(lease) = table.leases.get_mut(run_id) {
            let number = lease.next_number;
            lease.next_number += 1;
            lease.unacked.push_back(Frame {
                number,
                kind: kind.to_string(),
                payload_json,
            });
        }
        drop(table);
        self.changed.notify_one();
    }

    /// The run ended on this agent: its completion is sent after its last frame.
    pub fn complete(
        &self,
        run_id: &str,
        status: &str,
        reason: &str,
        result_json: String,
        units_spent: u64,
    ) {
        let mut table = self.lock();
        if let Some(lease) = table.leases.get_mut(run_id) {
            lease.completion = Some(Completion {
                lease_id: lease.lease_id.clone(),
                epoch: lease.epoch,
                run_id: run_id.to_string(),
                status: status.to_string(),
                reason: reason.to_string(),
                result_json,
                last_frame: lease.next_number - 1,
                units_spent,
            });
        }
        drop(table);
        self.changed.notify_one();
    }

    pub fn ack(&self, run_id: &str, lease_id: &str, through: u64) {
        let mut table = self.lock();
        if let Some(lease) = table
            .leases
            .get_mut(run_id)
            .filter(|l| l.lease_id == lease_id)
        {
            lease.acked = lease.acked.max(through);
            while lease
                .unacked
                .front()
                .is_some_and(|f| f.number <= lease.acked)
            {
                lease.unacked.pop_front();
            }
        }
    }

    /// The controller stored the completion (or has no use for it): forget the run.
    pub fn forget(&self, run_id: &str, lease_id: &str) -> Option<Lease> {
        let mut table = self.lock();
        let matches = table
            .leases
            .get(run_id)
            .is_some_and(|l| l.lease_id == lease_id);
        if matches {
            table.leases.remove(run_id)
        } else {
            None
        }
    }

    /// The controller asked for everything again (missing frames): resend from the ack.
    pub fn rewind(&self, run_id: &str) {
        let mut table = self.lock();
        if let Some(lease) = table.leases.get_mut(run_id) {
            lease.sent_through = lease.acked;
            lease.completion_sent = false;
        }
        drop(table);
        self.changed.notify_one();
    }

    /// Cancels the executor of a run (by lease id, or any lease when `lease_id` is empty).
    pub fn cancel(&self, run_id: &str, lease_id: &str) -> bool {
        let table = self.lock();
        let lease = table
            .leases
            .values()
            .find(|l| l.lease_id == lease_id || (lease_id.is_empty() && l.run_id == run_id));
        match lease {
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
        let mut table = self.lock();
        let run_id = table
            .leases
            .values()
            .find(|l| l.lease_id == lease_id)
            .map(|l| l.run_id.clone());
        if let Some(lease) = run_id.and_then(|id| table.leases.remove(&id)) {
            lease.cancel.cancel();
        }
    }

    /// Stops exclusive runs (the agent lost the controller): they must not go on loading
    /// a target nobody watches.
    pub fn fence_exclusive(&self) -> usize {
        let table = self.lock();
        let mut stopped = 0;
        for lease in table
            .leases
            .values()
            .filter(|l| l.kind.is_exclusive() && l.completion.is_none())
        {
            if !lease.cancel.is_cancelled() {
                lease.cancel.cancel();
                stopped += 1;
            }
        }
        stopped
    }

    /// What the hello reports: every held lease with its last acknowledged frame. A new
    /// stream starts sending from there.
    pub fn report_for_new_stream(&self) -> Vec<RunningLease> {
        let mut table = self.lock();
        table
            .leases
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

    /// Frames not yet sent on this stream, then completions whose frames have all been
    /// sent.
    pub fn take_outgoing(&self, max_frames: usize) -> Outgoing {
        let mut table = self.lock();
        let mut out = Outgoing::default();
        for lease in table.leases.values_mut() {
            let frames: Vec<Frame> = lease
                .unacked
                .iter()
                .filter(|f| f.number > lease.sent_through)
                .take(max_frames)
                .cloned()
                .collect();
            if let Some(last) = frames.last() {
                lease.sent_through = last.number;
                out.frames.push((
                    lease.lease_id.clone(),
                    lease.epoch,
                    lease.run_id.clone(),
                    frames,
                ));
            }
            let all_sent = lease.sent_through + 1 >= lease.next_number;
            if let Some(completion) = lease
                .completion
                .as_ref()
                .filter(|_| all_sent && !lease.completion_sent)
            {
                lease.completion_sent = true;
                out.completions.push(completion.clone());
            }
        }
        out
    }

    /// Whether anything is still waiting to be sent on this stream.
    pub fn has_outgoing(&self) -> bool {
        self.lock().leases.values().any(|l| {
            l.unacked.iter().any(|f| f.number > l.sent_through)
                || (l.completion.is_some() && !l.completion_sent)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_stay_until_acknowledged_and_are_resent_on_a_new_stream() {
        let leases = Leases::default();
        leases.insert("l1", 1, "r1", RunKind::Checks);
        for i in 0..5 {
            leases.push_frame("r1", "check", format!("{{\"i\":{i}}}"));
        }
        let out = leases.take_outgoing(3);
        assert_eq!(
            out.frames[0].3.iter().map(|f| f.number).collect::<Vec<_>>(),
            [1, 2, 3]
        );
        let out = leases.take_outgoing(10);
        assert_eq!(
            out.frames[0].3.iter().map(|f| f.number).collect::<Vec<_>>(),
            [4, 5]
        );
        assert!(!leases.has_outgoing());
        leases.ack("r1", "l1", 2);
        let report = leases.report_for_new_stream();
        assert_eq!(report[0].last_acked_frame, 2);
        let out = leases.take_outgoing(10);
        assert_eq!(
            out.frames[0].3.iter().map(|f| f.number).collect::<Vec<_>>(),
            [3, 4, 5],
            "resent after the ack"
        );
    }

    #[test]
    fn a_completion_follows_its_last_frame() {
        let leases = Leases::default();
        leases.insert("l1", 1, "r1", RunKind::Checks);
        leases.push_frame("r1", "started", "{}".into());
        leases.complete("r1", "passed", "", "{}".into(), 1);
        let out = leases.take_outgoing(10);
        assert_eq!(out.frames.len(), 1);
        assert_eq!(out.completions.len(), 1);
        assert_eq!(out.completions[0].last_frame, 1);
        assert!(
            leases.take_outgoing(10).completions.is_empty(),
            "sent once per stream"
        );
        leases.rewind("r1");
        assert_eq!(
            leases.take_outgoing(10).completions.len(),
            1,
            "sent again when asked"
        );
        assert!(leases.forget("r1", "other").is_none());
        assert!(leases.forget("r1", "l1").is_some());
        assert!(leases.is_empty());
    }

    #[test]
    fn fencing_stops_only_exclusive_runs() {
        let leases = Leases::default();
        let load = leases.insert("l1", 1, "r1", RunKind::Load);
        let checks = leases.insert("l2", 1, "r2", RunKind::Checks);
        assert_eq!(leases.fence_exclusive(), 1);
        assert!(load.is_cancelled() && !checks.is_cancelled());
    }
}
