//! Offers: the `LeaseOffer` of a placed run (its spec read once per scenario version and
//! kept, the account secrets it names opened for this offer only), and the agent's answer
//! to it.

use std::sync::Arc;

use tokio::time::Instant;

use iohr_proto::link::{CancelLease, ControllerMessage, LeaseOffer, controller_message};

use super::{Dispatcher, LeaseState};
use crate::queue::scheduler::{QueuedRun, SessionId};
use crate::store::LeaseGuard;

/// Scenario specs kept in memory before the cache starts over.
const SPEC_CACHE: usize = 4096;

/// The offer of a placed run, or why there is none.
pub(super) enum OfferMessage {
    Ready(Box<ControllerMessage>),
    /// The spec or a secret could not be read now: the offer lapses and the run is placed
    /// again.
    Unavailable,
    /// The spec names an account secret the account no longer has: the run ends.
    MissingSecret(String),
}

/// Why a run that names a deleted secret ends.
pub(super) fn missing_secret_reason(name: &str) -> String {
    format!(
        "account secret {name} does not exist (deleted after the run was queued?); store it with PUT /v1/reliability/secrets/{name} and start the run again"
    )
}

impl Dispatcher {
    /// The offer of a placed run. Specs are read once per scenario version and kept:
    /// versions never change, and reading one per offer would cost a store round trip.
    /// A share starts at `split_start`, its round's instant, told as a wait from now.
    pub(super) async fn offer_message(
        &mut self,
        run: &QueuedRun,
        guard: &LeaseGuard,
        split_start: Instant,
    ) -> OfferMessage {
        let key = (run.account_id.clone(), run.scenario_version.clone());
        let spec_json = match self.specs.get(&key) {
            Some(spec) => spec.clone(),
            None => {
                let Ok(Some(scenario)) = self
                    .store
                    .scenario(&run.account_id, &run.scenario_version)
                    .await
                else {
                    return OfferMessage::Unavailable;
                };
                let spec: Arc<str> = iohr_domain::version::compact_json(&scenario.spec).into();
                if self.specs.len() >= SPEC_CACHE {
                    self.specs.clear();
                }
                self.specs.insert(key, spec.clone());
                spec
            }
        };
        let secrets = match self.secrets_of(run, &spec_json).await {
            Ok(Ok(secrets)) => secrets,
            Ok(Err(missing)) => return OfferMessage::MissingSecret(missing),
            Err(()) => return OfferMessage::Unavailable,
        };
        let allow_targets = match self.store.egress_allow(&run.account_id).await {
            Ok(entries) => entries,
            Err(error) => {
                tracing::error!(run = %run.run_id, %error, "reading the run's account egress exceptions failed; offered again later");
                return OfferMessage::Unavailable;
            }
        };
        OfferMessage::Ready(Box::new(ControllerMessage {
            body: Some(controller_message::Body::Offer(LeaseOffer {
                lease_id: guard.lease_id.clone(),
                epoch: guard.epoch,
                run_id: run.run_id.clone(),
                kind: run.kind.as_str().to_string(),
                spec_json: spec_json.to_string(),
                target: run.target.clone(),
                environment: run.environment.clone(),
                accept_within_ms: self.timing.offer_timeout.as_millis() as u32,
                scenario_id: run.scenario_id.clone(),
                scenario_version: run.scenario_version.clone(),
                confirmed_by: run.confirmed_by.clone().unwrap_or_default(),
                // 0 of 0: the whole run (a controller that never splits sends that).
                share_index: run.share.as_ref().map_or(0, |(_, s)| s.index()),
                share_count: run.share.as_ref().map_or(0, |(_, s)| s.count()),
                start_after_ms: match run.share {
                    Some(_) => u32::try_from(
                        split_start
                            .saturating_duration_since(Instant::now())
                            .as_millis(),
                    )
                    .unwrap_or(u32::MAX),
                    None => 0,
                },
                secrets: secrets.into_iter().collect(),
                allow_targets,
            })),
        }))
    }

    /// The account secrets the spec's headers name, opened for this offer; `Ok(Err(name))`
    /// when the account no longer has one. Values go into the offer only, never a log.
    async fn secrets_of(
        &self,
        run: &QueuedRun,
        spec_json: &str,
    ) -> Result<Result<std::collections::BTreeMap<String, String>, String>, ()> {
        // Most specs name none: no parse for them.
        if !spec_json.contains("${secret:") {
            return Ok(Ok(Default::default()));
        }
        let spec: serde_json::Value = serde_json::from_str(spec_json).map_err(|_| ())?;
        let names = iohr_domain::request::secret_names(&spec);
        self.store
            .open_account_secrets(&run.account_id, &names)
            .await
            .map_err(|error| {
                tracing::error!(run = %run.run_id, %error, "opening the run's account secrets failed; offered again later");
            })
    }

    pub(super) async fn lease_answer(
        &mut self,
        session: SessionId,
        guard: LeaseGuard,
        accepted: bool,
        retry_later: bool,
        reason: String,
    ) {
        let run_id = self
            .leases
            .iter()
            .find(|(_, l)| l.guard == guard && l.session == Some(session))
            .map(|(id, _)| id.clone());
        let Some(run_id) = run_id else {
            // An answer to an offer that was withdrawn: make sure the agent drops it.
            self.send(
                Some(session),
                controller_message::Body::Cancel(CancelLease {
                    lease_id: guard.lease_id,
                    epoch: guard.epoch,
                    run_id: String::new(),
                    reason: "offer withdrawn".to_string(),
                }),
            );
            return;
        };
        let Some(lease) = self.leases.get(&run_id).cloned() else {
            return;
        };
        if !matches!(lease.state, LeaseState::Offered { .. }) {
            return;
        }
        if accepted {
            match self.store.accept_lease(&run_id, &guard).await {
                Ok(true) => {
                    if let Some(l) = self.leases.get_mut(&run_id) {
                        l.state = LeaseState::Running;
                    }
                    tracing::debug!(run = %run_id, session, "lease accepted");
                }
                Ok(false) => {
                    self.send(
                        Some(session),
                        Self::cancel_message(&guard, &run_id, "lease no longer valid"),
                    );
                    self.forget_lease(&run_id);
                }
                // The offer stays as it is and lapses (the agent is told to stop then).
                Err(error) => {
                    tracing::error!(run = %run_id, %error, "storing an acceptance failed")
                }
            }
        } else {
            tracing::info!(run = %run_id, session, reason, retry_later, "lease refused");
            // A refusal for now (the agent is full) only puts this agent last for the run.
            let (refused, lapsed) = if retry_later {
                (None, Some(session))
            } else {
                (Some(session), None)
            };
            if self.requeue(&run_id, lease, refused, lapsed).await && !retry_later {
                // Said in the record, so a run that no agent will take does not wait
                // silently; the next agent that accepts it clears the reason.
                let agent = self
                    .sessions
                    .get(&session)
                    .map(|s| s.name.clone())
                    .unwrap_or_default();
                let why = format!("refused by agent {agent}: {reason}");
                match self.store.set_reason(&run_id, Some(&why)).await {
                    Ok(()) => self.note_reason(&run_id, why),
                    Err(error) => {
                        tracing::warn!(run = %run_id, %error, "recording a refusal failed")
                    }
                }
            }
        }
    }

    /// An offer not accepted in time: the agent is told to drop it and the run goes back
    /// to the queue (or ends, if it was cancelled meanwhile).
    pub(super) async fn lapse_offer(&mut self, run_id: &str) {
        if let Some(lease) = self.leases.get(run_id).cloned() {
            self.send(
                lease.session,
                Self::cancel_message(&lease.guard, run_id, "offer not accepted in time"),
            );
            if lease.cancel_requested {
                self.lease_lost(run_id, "cancelled").await;
            } else {
                // Not refused: a wedged agent gets it again only if no other can.
                let session = lease.session;
                if !self.requeue(run_id, lease, None, session).await {
                    self.retry_next_tick(run_id, false);
                }
            }
        }
    }
}
