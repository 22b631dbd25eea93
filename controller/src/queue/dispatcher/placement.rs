//! Placement carried out: the scheduler chooses an agent for each queued run it can place
//! now (see `scheduler.rs`); here each choice becomes a lease in the store and an offer on
//! the agent's stream, or goes back to the queue.

use std::collections::HashMap;

use iohr_domain::{RunKind, RunStatus};

use tokio::time::Instant;

use super::offers::{OfferMessage, missing_secret_reason};
use super::{Dispatcher, Lease, LeaseState};
use crate::queue::scheduler::{Placement, QueuedRun, SessionId};
use crate::store::{LeaseGuard, ReplicaOffer};

/// What became of one placement's offer in the store.
enum Offer {
    Leased(LeaseGuard),
    /// Ended or leased meanwhile.
    Gone,
    /// The account's plan is full across replicas.
    Full,
    /// Back to the queue, to try again next round.
    Later,
    /// The agent has no room as the store has its leases (another replica leased it a
    /// split run's share this one has not heard of yet): another agent first.
    AgentTaken,
}

impl Offer {
    fn name(&self) -> &'static str {
        match self {
            Offer::Leased(_) => "leased",
            Offer::Gone => "gone",
            Offer::Full => "account full",
            Offer::Later => "later",
            Offer::AgentTaken => "agent taken",
        }
    }
}

impl Dispatcher {
    pub(super) async fn dispatch(&mut self) {
        self.place_again = false;
        // One instant for every share placed in this round (they are placed together).
        let split_start = Instant::now() + self.timing.split_start;
        let mut placed = Vec::new();
        for Placement { run, session } in self.scheduler.next_placements() {
            match self.sessions.get(&session).map(|s| s.agent_id.clone()) {
                Some(agent_id) => placed.push((run, session, agent_id)),
                None => self.unplace(run, session),
            }
        }
        let offers = self.offer_leases(&placed).await;
        for ((run, session, agent_id), offer) in placed.into_iter().zip(offers) {
            if !matches!(offer, Offer::Leased(_)) {
                tracing::debug!(run = %run.run_id, outcome = offer.name(), "placement not leased");
            }
            let guard = match offer {
                Offer::Leased(guard) => guard,
                Offer::Gone => {
                    // Ended (cancelled) or leased meanwhile: not ours to offer.
                    self.scheduler.detach_lease(session, &run.run_id);
                    self.scheduler.release_active(&run.account_id);
                    continue;
                }
                Offer::Full => {
                    self.unplace(run.clone(), session);
                    self.scheduler.mark_full(&run.account_id);
                    continue;
                }
                Offer::Later => {
                    self.place_again = true;
                    self.unplace(run, session);
                    continue;
                }
                Offer::AgentTaken => {
                    self.place_again = true;
                    let mut run = run;
                    run.lapsed_with.insert(session);
                    self.unplace(run, session);
                    continue;
                }
            };
            self.track_offer(run, Some(session), agent_id, guard, split_start)
                .await;
        }
    }

    /// Offers a leased run to its agent (on `session`, when linked here) and tracks the
    /// offer until the agent answers or its deadline passes.
    pub(super) async fn track_offer(
        &mut self,
        run: QueuedRun,
        session: Option<SessionId>,
        agent_id: String,
        guard: LeaseGuard,
        split_start: Instant,
    ) {
        let offer = self.offer_message(&run, &guard, split_start).await;
        let missing = match &offer {
            OfferMessage::MissingSecret(name) => Some(name.clone()),
            _ => None,
        };
        let sent = match (offer, session.and_then(|s| self.sessions.get(&s))) {
            (OfferMessage::Ready(offer), Some(s)) => s.tx.try_send(*offer).is_ok(),
            _ => false,
        };
        tracing::debug!(run = %run.run_id, agent = %agent_id, lease = %guard.lease_id, epoch = guard.epoch, sent, "lease offered");
        crate::metrics::lease_offered(&run.run_id);
        let deadline = Instant::now() + self.timing.offer_timeout;
        let run_id = run.run_id.clone();
        self.leases.insert(
            run_id.clone(),
            Lease {
                run,
                agent_id,
                session,
                guard: guard.clone(),
                state: LeaseState::Offered { deadline },
                cancel_requested: false,
                cancel_sent: None,
            },
        );
        // Refused at POST, so deleted since: the run cannot send what it names. If the
        // ending fails in the store, the offer lapses and the run is placed again.
        if let Some(name) = missing {
            let reason = missing_secret_reason(&name);
            if self
                .end_run(&run_id, Some(&guard), RunStatus::Error, &reason)
                .await
            {
                self.forget_lease(&run_id);
            }
        }
    }

    /// The leases of one round in the store. Alone, each is its own fenced UPDATE, and
    /// they wait on the store side by side instead of one after another; as a replica,
    /// one transaction per account counts the plan across replicas.
    async fn offer_leases(&self, placed: &[(QueuedRun, SessionId, String)]) -> Vec<Offer> {
        let store = &self.store;
        if !store.is_replica() {
            return futures_util::future::join_all(
                placed
                    .iter()
                    .map(|(run, _, agent_id)| store.offer_lease(&run.run_id, agent_id)),
            )
            .await
            .into_iter()
            .zip(placed)
            .map(|(offered, (run, _, _))| match offered {
                Ok(Some(guard)) => Offer::Leased(guard),
                Ok(None) => Offer::Gone,
                Err(error) => {
                    tracing::error!(run = %run.run_id, %error, "offering a lease failed");
                    Offer::Later
                }
            })
            .collect();
        }
        let mut by_account: HashMap<&str, Vec<usize>> = HashMap::new();
        for (at, (run, _, _)) in placed.iter().enumerate() {
            by_account.entry(&run.account_id).or_default().push(at);
        }
        let rounds = futures_util::future::join_all(by_account.into_iter().map(
            |(account, ats)| async move {
                let offers: Vec<(String, String, RunKind)> = ats
                    .iter()
                    .map(|&at| {
                        let (run, _, agent_id) = &placed[at];
                        (run.run_id.clone(), agent_id.clone(), run.kind)
                    })
                    .collect();
                let answers = store.offer_leases_as_replica(account, &offers).await;
                (ats, answers)
            },
        ))
        .await;
        let mut offers: Vec<Offer> = placed.iter().map(|_| Offer::Later).collect();
        for (ats, answers) in rounds {
            match answers {
                Ok(answers) => {
                    for (at, answer) in ats.into_iter().zip(answers) {
                        offers[at] = match answer {
                            ReplicaOffer::Offered(guard) => Offer::Leased(guard),
                            ReplicaOffer::Gone => Offer::Gone,
                            ReplicaOffer::AccountFull => Offer::Full,
                            ReplicaOffer::AccountBusy => Offer::Later,
                            ReplicaOffer::AgentTaken => Offer::AgentTaken,
                        };
                    }
                }
                Err(error) => tracing::error!(%error, "offering leases failed"),
            }
        }
        offers
    }

    pub(super) fn unplace(&mut self, run: QueuedRun, session: SessionId) {
        self.scheduler.detach_lease(session, &run.run_id);
        self.scheduler.release_active(&run.account_id);
        self.scheduler.enqueue(run);
    }
}
