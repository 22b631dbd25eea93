//! Agents: the account's agents, online or not, with their running leases, as the
//! dispatcher (the agents connected here) and the store (the others, and those connected
//! to another live replica) know them.

use std::collections::HashMap;

use serde::Serialize;
use utoipa::ToSchema;

use super::ReadError;
use crate::Shared;
use crate::store::{format_ms, now_ms};

/// The account's agents.
#[derive(Debug, Serialize, ToSchema)]
pub struct AgentList {
    pub agents: Vec<AgentView>,
}

/// An agent as it declared itself when it last connected.
#[derive(Debug, Serialize, ToSchema)]
pub struct AgentView {
    pub id: String,
    pub name: String,
    pub online: bool,
    pub last_seen_at: Option<String>,
    pub version: String,
    pub environments: Vec<String>,
    pub kinds: Vec<String>,
    pub labels: std::collections::BTreeMap<String, String>,
    pub max_concurrent_jobs: u32,
    pub running: Vec<LeaseView>,
}

/// A lease the agent holds now.
#[derive(Debug, Serialize, ToSchema)]
pub struct LeaseView {
    pub run_id: String,
    pub lease_id: String,
    pub kind: String,
    #[schema(value_type = String)]
    pub state: &'static str,
}

/// The account's agents, online or not, with their running leases.
pub async fn list(shared: &Shared, account_id: &str) -> Result<AgentList, ReadError> {
    let online: HashMap<String, _> = shared
        .dispatcher
        .online()
        .await?
        .into_iter()
        .map(|a| (a.agent_id.clone(), a))
        .collect();
    // As a replica, an agent connected to another live replica is online too, with its
    // leases as the store holds them.
    let (live_replicas, stored) = if shared.store.is_replica() {
        (
            shared.store.live_replicas().await?,
            shared.store.agent_leases(account_id).await?,
        )
    } else {
        (Vec::new(), Vec::new())
    };
    let here = shared.store.replica();
    let agents: Vec<AgentView> = shared
        .store
        .agents(account_id)
        .await?
        .into_iter()
        .map(|row| {
            let live = online.get(&row.id);
            let elsewhere = live.is_none()
                && row
                    .connected_replica
                    .is_some_and(|r| r != here && live_replicas.contains(&r));
            AgentView {
                online: live.is_some() || elsewhere,
                running: live
                    .map(|a| {
                        a.running
                            .iter()
                            .map(|(run_id, lease_id, kind, state)| LeaseView {
                                run_id: run_id.clone(),
                                lease_id: lease_id.clone(),
                                kind: kind.to_string(),
                                state,
                            })
                            .collect()
                    })
                    .unwrap_or_else(|| {
                        stored
                            .iter()
                            .filter(|l| elsewhere && l.agent_id == row.id)
                            .map(|l| LeaseView {
                                run_id: l.run_id.clone(),
                                lease_id: l.lease_id.clone(),
                                kind: l.kind.clone(),
                                state: if l.state == "accepted" {
                                    "running"
                                } else {
                                    "offered"
                                },
                            })
                            .collect()
                    }),
                id: row.id,
                name: row.name,
                // A connected agent was seen as recently as its last message.
                last_seen_at: live
                    .map(|a| now_ms() - a.silent_ms as i64)
                    .or(row.last_seen_at)
                    .map(format_ms),
                version: row.declaration.version,
                environments: row.declaration.environments,
                kinds: row.declaration.kinds,
                labels: row.declaration.labels,
                max_concurrent_jobs: row.declaration.max_concurrent_jobs,
            }
        })
        .collect();
    Ok(AgentList { agents })
}
