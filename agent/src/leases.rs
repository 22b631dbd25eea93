//! The agent's lease table: for each lease it holds, the run, the frames not yet
//! acknowledged by the controller, and the completion once the run has ended.
//!
//! Leases are keyed by lease id, so the output of an executor whose lease was revoked can
//! never be sent under a newer lease of the same run. Frames are numbered here, per run,
//! from 1. A frame leaves the table only when the controller acknowledges it, so after a
//! reconnect everything unacknowledged is resent.
//!
//! What is held unacknowledged is bounded in bytes, over every lease of the agent (see
//! [`budget`]): an executor's frame send waits for room, which acknowledgements free.
//!
//! The values of the account secrets a lease carried are scrubbed here from every frame
//! and from the completion, whatever the executor wrote: one place, so no kind can
//! report one.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use iohr_domain::RunKind;
use iohr_proto::link::{Completion, Frame, RunningLease, StepAsk};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::verdicts::{StepVerdict, StepVerdicts};

pub mod budget;
mod frames;

use budget::{Charge, DEFAULT_FRAME_BUFFER_BYTES, FrameBudget};

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
    /// The controller's verdicts on a split run's start and a split sweep's steps
    /// (unused by a run that is not split).
    pub verdicts: StepVerdicts,
    next_number: u64,
    acked: u64,
    unacked: VecDeque<Held>,
    /// Sent on the current stream up to this number (reset on reconnect).
    sent_through: u64,
    completion: Option<Completion>,
    completion_sent: bool,
    /// A refused completion is sent again no sooner than this: a store that is failing
    /// should not be met with a storm of resends.
    completion_hold: Option<std::time::Instant>,
    /// What is scrubbed from everything the run reports.
    scrubbed: Scrubbed,
}

/// The reported forms of a lease's secret values ([`crate::secrets::reported_forms`]);
/// never printed.
#[derive(Default)]
struct Scrubbed(Vec<String>);

impl std::fmt::Debug for Scrubbed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Scrubbed({} values)", self.0.len())
    }
}

impl Scrubbed {
    fn apply(&self, text: String) -> String {
        if self.0.is_empty() {
            text
        } else {
            crate::secrets::scrub(text, &self.0)
        }
    }
}

/// An unacknowledged frame and its share of the agent's bound, given back as it leaves.
#[derive(Debug)]
struct Held {
    frame: Frame,
    _charge: Charge,
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

/// The lease table counted (see [`Leases::census`]).
#[derive(Debug, Default)]
pub struct Census {
    pub by_kind: HashMap<RunKind, u64>,
    pub unacked_frames: u64,
}

/// Shared between the link and the executors.
#[derive(Debug, Clone)]
pub struct Leases {
    table: Arc<Mutex<HashMap<String, Lease>>>,
    /// Woken when there is something new to send.
    pub changed: Arc<Notify>,
    budget: Arc<FrameBudget>,
}

impl Default for Leases {
    fn default() -> Self {
        Leases::with_frame_buffer(DEFAULT_FRAME_BUFFER_BYTES)
    }
}

impl Leases {
    /// A table holding at most `bytes` of unacknowledged frames (frames larger than that
    /// go one at a time).
    pub fn with_frame_buffer(bytes: u32) -> Leases {
        Leases {
            table: Arc::default(),
            changed: Arc::default(),
            budget: FrameBudget::new(bytes),
        }
    }

    /// Bytes of unacknowledged frames held now.
    pub fn frame_bytes(&self) -> u64 {
        self.budget.used()
    }

    /// The bound on [`Leases::frame_bytes`].
    pub fn frame_buffer_limit(&self) -> u32 {
        self.budget.limit()
    }

    /// What a metrics scrape reads: the leases held now by kind, and their frames the
    /// controller has not acknowledged.
    pub fn census(&self) -> Census {
        let mut census = Census::default();
        for lease in self.lock().values() {
            *census.by_kind.entry(lease.kind).or_default() += 1;
            census.unacked_frames += lease.unacked.len() as u64;
        }
        census
    }

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

    /// The frames this lease's run has made so far (0 for a lease not held).
    pub fn frames_pushed(&self, lease_id: &str) -> u64 {
        self.lock()
            .get(lease_id)
            .map_or(0, |lease| lease.next_number - 1)
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
        crate::metrics::lease_taken(kind);
        self.lock().insert(
            lease_id.to_string(),
            Lease {
                lease_id: lease_id.to_string(),
                epoch,
                run_id: run_id.to_string(),
                kind,
                cancel: cancel.clone(),
                fenced: false,
                verdicts: StepVerdicts::default(),
                next_number: 1,
                acked: 0,
                unacked: VecDeque::new(),
                sent_through: 0,
                completion: None,
                completion_sent: false,
                completion_hold: None,
                scrubbed: Scrubbed::default(),
            },
        );
        cancel
    }

    /// The values scrubbed from everything a lease's run reports from now on (the
    /// account secrets its offer carried).
    pub fn scrub(&self, lease_id: &str, values: impl IntoIterator<Item = String>) {
        if let Some(lease) = self.lock().get_mut(lease_id) {
            lease.scrubbed = Scrubbed(crate::secrets::reported_forms(values));
        }
    }

    /// The verdicts a lease's run waits on ([`crate::verdicts`]).
    pub fn verdicts(&self, lease_id: &str) -> Option<StepVerdicts> {
        self.lock().get(lease_id).map(|l| l.verdicts.clone())
    }

    /// The steps whose verdicts runs wait for now, as the link asks them.
    pub fn asking(&self) -> Vec<StepAsk> {
        self.lock()
            .values()
            .filter_map(|l| {
                l.verdicts.asking().map(|step| StepAsk {
                    lease_id: l.lease_id.clone(),
                    epoch: l.epoch,
                    run_id: l.run_id.clone(),
                    step,
                })
            })
            .collect()
    }

    /// A verdict from the controller for the lease `lease_id` at `epoch`: dropped for
    /// another epoch, a lease no longer held or a step not asked.
    pub fn answer(&self, lease_id: &str, epoch: u64, verdict: StepVerdict) -> bool {
        self.lock()
            .get(lease_id)
            .filter(|l| l.epoch == epoch)
            .is_some_and(|l| l.verdicts.answer(verdict))
    }

    /// Numbers and queues a frame of a lease's run at once, charged to the bound without
    /// waiting (the `started` frame, a fault's timeline).
    pub fn push_frame(&self, lease_id: &str, kind: &str, payload_json: String) {
        let charge = self.budget.charge_now(cost(kind, &payload_json));
        self.push_charged(lease_id, kind, payload_json, charge);
    }

    /// Numbers and queues a frame of a lease's run once it fits in the bound: while the
    /// controller has not acknowledged enough, the sender waits. Nothing is dropped, and
    /// the frames of one sender keep their order.
    pub async fn send_frame(&self, lease_id: &str, kind: &str, payload_json: String) {
        let charge = self.budget.charge(cost(kind, &payload_json)).await;
        self.push_charged(lease_id, kind, payload_json, charge);
    }

    /// Once the run has its completion no frame is taken: the completion counts the
    /// frames before it (a failed executor can leave a task behind that still sends).
    fn push_charged(&self, lease_id: &str, kind: &str, payload_json: String, charge: Charge) {
        if let Some(lease) = self
            .lock()
            .get_mut(lease_id)
            .filter(|lease| lease.completion.is_none())
        {
            let number = lease.next_number;
            lease.next_number += 1;
            let payload_json = lease.scrubbed.apply(payload_json);
            lease.unacked.push_back(Held {
                frame: Frame {
                    number,
                    kind: kind.to_string(),
                    payload_json,
                },
                _charge: charge,
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
            if status == iohr_domain::RunStatus::Error.as_str() && lease.completion.is_none() {
                crate::metrics::executor_error(lease.kind);
            }
            lease.completion = Some(Completion {
                lease_id: lease.lease_id.clone(),
                epoch: lease.epoch,
                run_id: lease.run_id.clone(),
                status: status.to_string(),
                reason: lease.scrubbed.apply(reason.to_string()),
                result_json: lease.scrubbed.apply(result_json),
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
            .is_some_and(|held| held.frame.number <= lease.acked)
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
                .map(|held| &held.frame)
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
            l.unacked
                .iter()
                .any(|held| held.frame.number > l.sent_through)
                || (l.completion.is_some() && !l.completion_sent && !held)
        })
    }
}

/// What a frame costs of the bound: its bytes as they are held.
fn cost(kind: &str, payload_json: &str) -> usize {
    kind.len() + payload_json.len()
}

#[cfg(test)]
mod tests;
