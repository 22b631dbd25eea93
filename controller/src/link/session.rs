//! One agent's stream: hello, heartbeats, lease answers, frames and completions.
//!
//! Frames and completions are written to the store here, fenced by their lease, and
//! acknowledged; what changes who holds a run goes to the dispatcher.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use iohr_domain::RunStatus;
use iohr_proto::link::{
    AgentMessage, CancelLease, Completion, CompletionAck, ControllerMessage, FrameAck, FrameBatch,
    Heartbeat, Hello, StepAsk, StepVerdict, Welcome, agent_message, controller_message,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tonic::{Status, Streaming};

use crate::Shared;
use crate::queue::{AgentUp, SessionId};
use crate::runs::relay::AppendOutcome;
use crate::store::{AgentIdentity, Declaration, Ending, LeaseGuard, StoreError};

pub struct Session {
    shared: Shared,
    identity: AgentIdentity,
    tx: mpsc::Sender<ControllerMessage>,
    id: SessionId,
    last_heard: Arc<AtomicU64>,
    close: CancellationToken,
}

/// Frames one batch may carry; more is a protocol error.
const MAX_FRAMES_PER_BATCH: usize = 1000;

impl Session {
    pub fn new(
        shared: Shared,
        identity: AgentIdentity,
        tx: mpsc::Sender<ControllerMessage>,
    ) -> Session {
        let id = shared.dispatcher.new_session_id();
        let last_heard = Arc::new(AtomicU64::new(shared.dispatcher.clock_ms()));
        Session {
            shared,
            identity,
            tx,
            id,
            last_heard,
            close: CancellationToken::new(),
        }
    }

    fn send(&self, body: controller_message::Body) -> bool {
        self.tx
            .try_send(ControllerMessage { body: Some(body) })
            .is_ok()
    }

    /// Serves the stream until it ends; returns the status to end it with when the
    /// agent is refused.
    pub async fn run(self, mut inbound: Streaming<AgentMessage>) -> Option<Status> {
        let timing = self.shared.timing;
        let hello = tokio::select! {
            first = tokio::time::timeout(timing.suspect_after, inbound.message()) => first,
            _ = self.shared.shutdown.cancelled() => return None,
        };
        let hello = match hello {
            Ok(Ok(Some(AgentMessage {
                body: Some(agent_message::Body::Hello(hello)),
            }))) => hello,
            other => {
                tracing::warn!(agent = %self.identity.name, ?other, "no hello: closing the stream");
                return Some(Status::invalid_argument(
                    "the first message must be a hello",
                ));
            }
        };
        if !hello.agent_id.is_empty() && hello.agent_id != self.identity.name {
            tracing::warn!(agent = %self.identity.name, claimed = %hello.agent_id, "hello names another agent: closing");
            return Some(Status::permission_denied(format!(
                "this certificate belongs to agent {}, not {}",
                self.identity.name, hello.agent_id
            )));
        }
        if let Err(status) = self.register(hello).await {
            return Some(status);
        }
        let mut heartbeat = tokio::time::interval(timing.heartbeat);
        let mut sequence = 0u64;
        loop {
            tokio::select! {
                _ = self.close.cancelled() => break,
                _ = self.shared.shutdown.cancelled() => break,
                _ = heartbeat.tick() => {
                    sequence += 1;
                    if !self.send(controller_message::Body::Heartbeat(Heartbeat { sequence })) {
                        break;
                    }
                }
                message = inbound.message() => match message {
                    Ok(Some(message)) => {
                        self.last_heard.store(self.shared.dispatcher.clock_ms(), Ordering::Relaxed);
                        if let Some(body) = message.body {
                            self.handle(body).await;
                        }
                    }
                    Ok(None) => break,
                    Err(status) => {
                        tracing::debug!(agent = %self.identity.name, %status, "agent stream failed");
                        break;
                    }
                },
            }
        }
        self.shared.dispatcher.agent_down(self.id).await;
        None
    }

    async fn register(&self, hello: Hello) -> Result<(), Status> {
        let declaration = Declaration {
            version: hello.version,
            kinds: hello.kinds,
            environments: hello.environments,
            labels: hello.labels.into_iter().collect(),
            max_concurrent_jobs: hello.max_concurrent_jobs,
        };
        let reported = hello.leases.clone();
        let up = AgentUp {
            session: self.id,
            identity: self.identity.clone(),
            declaration: declaration.clone(),
            reported: hello.leases,
            recovered: hello.recovered,
            incarnation: hello.incarnation,
            tx: self.tx.clone(),
            last_heard: self.last_heard.clone(),
            close: self.close.clone(),
        };
        let revoked = match self.shared.dispatcher.agent_up(up).await {
            Ok(Ok(revoked)) => revoked,
            Ok(Err(refusal)) => return Err(Status::already_exists(refusal)),
            Err(_) => return Err(Status::unavailable("the controller is stopping")),
        };
        // Recorded once the agent is let in: a refused twin must not overwrite what the
        // live agent declared.
        if let Err(error) = self
            .shared
            .store
            .record_hello(&self.identity.agent_id, &declaration)
            .await
        {
            tracing::warn!(agent = %self.identity.name, %error, "recording the hello failed");
        }
        let welcome = Welcome {
            heartbeat_interval_ms: timing_ms(self.shared.timing.heartbeat),
            lease_ttl_ms: timing_ms(self.shared.timing.lease_ttl),
            revoked_lease_ids: revoked.clone(),
            reconnect_max_ms: timing_ms(self.shared.timing.reconnect_max),
            platform: self.identity.is_platform,
        };
        if !self.send(controller_message::Body::Welcome(welcome)) {
            self.shared.dispatcher.agent_down(self.id).await;
            return Err(Status::resource_exhausted(
                "the stream is not taking messages",
            ));
        }
        // Tell the agent where each kept run stands, so it resends only what is missing.
        for lease in reported.iter().filter(|l| !revoked.contains(&l.lease_id)) {
            if let Ok(Some(run)) = self.shared.store.run(&lease.run_id).await {
                self.send(controller_message::Body::FrameAck(FrameAck {
                    lease_id: lease.lease_id.clone(),
                    epoch: lease.epoch,
                    run_id: lease.run_id.clone(),
                    contiguous_through: run.frames_through,
                    batch_last: run.frames_through,
                }));
            }
        }
        Ok(())
    }

    async fn handle(&self, body: agent_message::Body) {
        match body {
            agent_message::Body::Hello(_) => {
                tracing::warn!(agent = %self.identity.name, "second hello on one stream ignored");
            }
            agent_message::Body::Heartbeat(_) => {}
            agent_message::Body::LeaseAnswer(answer) => {
                let guard = LeaseGuard {
                    lease_id: answer.lease_id,
                    epoch: answer.epoch,
                };
                self.shared
                    .dispatcher
                    .lease_answer(
                        self.id,
                        guard,
                        answer.accepted,
                        answer.retry_later,
                        answer.reason,
                    )
                    .await;
            }
            agent_message::Body::Frames(batch) => self.frames(batch).await,
            agent_message::Body::Completion(completion) => self.completion(completion).await,
            agent_message::Body::StepAsk(ask) => self.step_ask(ask).await,
        }
    }

    /// A share of a split sweep asks the verdict on a step (`runs/judge/steps.rs`): answered
    /// once every share has ended it; until then, and for a stale lease, not at all (the
    /// agent asks again).
    async fn step_ask(&self, ask: StepAsk) {
        let guard = LeaseGuard {
            lease_id: ask.lease_id,
            epoch: ask.epoch,
        };
        match crate::runs::step_verdict(&self.shared.store, &ask.run_id, &guard, ask.step).await {
            Ok(Some(verdict)) => {
                // A full outbound queue drops it: the agent asks again.
                self.send(controller_message::Body::StepVerdict(StepVerdict {
                    lease_id: guard.lease_id,
                    epoch: guard.epoch,
                    run_id: ask.run_id,
                    step: verdict.step,
                    meets_slo: verdict.meets_slo,
                    reason: verdict.reason,
                    start_after_ms: verdict.start_after_ms,
                }));
            }
            Ok(None) => {}
            Err(error) => {
                tracing::warn!(run = %ask.run_id, step = ask.step, %error, "reading a step verdict failed");
            }
        }
    }

    fn stale(&self, guard: &LeaseGuard, run_id: &str) {
        self.send(controller_message::Body::Cancel(CancelLease {
            lease_id: guard.lease_id.clone(),
            epoch: guard.epoch,
            run_id: run_id.to_string(),
            reason: "stale lease".to_string(),
        }));
    }

    async fn frames(&self, batch: FrameBatch) {
        let guard = LeaseGuard {
            lease_id: batch.lease_id,
            epoch: batch.epoch,
        };
        if batch.frames.len() > MAX_FRAMES_PER_BATCH {
            tracing::warn!(agent = %self.identity.name, frames = batch.frames.len(), "oversized frame batch dropped");
            return;
        }
        let batch_last = batch.frames.iter().map(|f| f.number).max().unwrap_or(0);
        let mut frames = Vec::with_capacity(batch.frames.len());
        // Numbers are stored as BIGINT: larger ones are a broken agent's, not a frame.
        for frame in batch
            .frames
            .into_iter()
            .filter(|f| f.number <= i64::MAX as u64)
        {
            // `finished` is the controller's to write; unknown kinds are refused.
            let known = iohr_domain::FrameKind::parse(&frame.kind)
                .is_some_and(|k| k != iohr_domain::FrameKind::Finished);
            let payload = serde_json::from_str(&frame.payload_json);
            match (known, payload) {
                (true, Ok(mut payload)) => {
                    // Exemplars past their bound are truncated (docs/load.md).
                    iohr_domain::load::bound_frame_exemplars(&mut payload);
                    frames.push((frame.number, frame.kind, payload))
                }
                _ => {
                    tracing::warn!(agent = %self.identity.name, run = %batch.run_id, number = frame.number, kind = %frame.kind, "malformed frame stored as a phase note");
                    frames.push((
                        frame.number,
                        "phase".to_string(),
                        serde_json::json!({"note": "malformed frame from the agent", "kind": frame.kind}),
                    ));
                }
            }
        }
        let started = std::time::Instant::now();
        match crate::runs::relay::append_frames(&self.shared.store, &batch.run_id, &guard, &frames)
            .await
        {
            Ok(AppendOutcome::Stored {
                contiguous_through,
                new,
                relayed,
                split_aborted,
            }) => {
                crate::metrics::frames_stored(&batch.run_id, new.len(), started.elapsed());
                crate::otlp::offer(&self.identity.name, &new);
                for frame in new.into_iter().chain(relayed) {
                    self.shared.hub.publish(frame);
                }
                if let Some((split_run, why)) = split_aborted {
                    // The whole crossed a threshold: its shares stop, wherever they run.
                    // Not awaited here, so this agent's frames keep flowing meanwhile.
                    let dispatcher = self.shared.dispatcher.clone();
                    tokio::spawn(async move {
                        if let Err(error) = dispatcher.cancel(&split_run, &why).await {
                            tracing::error!(run = %split_run, ?error, "stopping a split run that crossed a threshold failed");
                        }
                    });
                }
                self.send(controller_message::Body::FrameAck(FrameAck {
                    lease_id: guard.lease_id,
                    epoch: guard.epoch,
                    run_id: batch.run_id,
                    contiguous_through,
                    batch_last,
                }));
            }
            Ok(AppendOutcome::Stale) => self.stale(&guard, &batch.run_id),
            Err(error) => {
                // Not acknowledged: the agent resends after its next reconnect.
                tracing::error!(run = %batch.run_id, %error, "storing frames failed");
            }
        }
    }

    async fn completion(&self, completion: Completion) {
        let guard = LeaseGuard {
            lease_id: completion.lease_id.clone(),
            epoch: completion.epoch,
        };
        let status = completion
            .status
            .parse::<RunStatus>()
            .ok()
            .filter(|s| s.is_agent_outcome())
            .unwrap_or(RunStatus::Error);
        let result = if completion.result_json.is_empty() {
            None
        } else {
            serde_json::from_str(&completion.result_json).ok()
        };
        let ending = Ending {
            status,
            // A cancelled run keeps the reason the canceller gave.
            reason: Some(completion.reason.clone())
                .filter(|r| !r.is_empty() && status != RunStatus::Cancelled),
            result,
            units_spent: Some(i64::try_from(completion.units_spent).unwrap_or(i64::MAX)),
        };
        let ack = |accepted: bool, reason: &str| {
            controller_message::Body::CompletionAck(CompletionAck {
                lease_id: completion.lease_id.clone(),
                run_id: completion.run_id.clone(),
                accepted,
                reason: reason.to_string(),
            })
        };
        match crate::runs::ending::finish_run_with_findings(
            &self.shared.store,
            &completion.run_id,
            Some(&guard),
            Some(completion.last_frame),
            &ending,
        )
        .await
        {
            Ok(Some(frames)) => {
                tracing::info!(run = %completion.run_id, agent = %self.identity.name, status = %status, "run finished");
                // The run's `finding` frames, then `finished`.
                for frame in frames {
                    self.shared.hub.publish(frame);
                }
                self.shared
                    .dispatcher
                    .lease_ended(&completion.run_id, guard.clone())
                    .await;
                self.send(ack(true, ""));
            }
            Ok(None) => {
                // Ended already (cancelled, agent lost) or a stale lease: nothing to keep.
                self.shared
                    .dispatcher
                    .lease_ended(&completion.run_id, guard.clone())
                    .await;
                self.send(ack(true, "run already ended or lease stale"));
            }
            Err(StoreError::Conflict(reason)) => {
                self.send(ack(false, &format!("missing frames: {reason}")));
            }
            Err(error) => {
                tracing::error!(run = %completion.run_id, %error, "storing a completion failed");
                self.send(ack(false, "store unavailable"));
            }
        }
    }
}

fn timing_ms(d: std::time::Duration) -> u32 {
    u32::try_from(d.as_millis()).unwrap_or(u32::MAX)
}
