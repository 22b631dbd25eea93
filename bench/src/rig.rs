//! The rig of a scenario: a started controller with its simulated agents connected.

use std::sync::Arc;
use std::time::Instant;

use futures_util::StreamExt;
use tokio::task::JoinHandle;

use crate::Opts;
use crate::agents::{self, AgentBehaviour, AgentIdentity, Tracker};
use crate::api::Api;
use crate::controller::{Controller, Environment};

/// A started controller with its agents connected.
pub(crate) struct Rig {
    pub(crate) controller: Controller,
    pub(crate) api: Api,
    pub(crate) tracker: Arc<Tracker>,
    sessions: Vec<JoinHandle<()>>,
    pub(crate) setup_s: f64,
    pub(crate) connect_s: f64,
}

impl Rig {
    pub(crate) async fn start(
        opts: &Opts,
        env: &Environment,
        agents: usize,
        max_running: u64,
        behaviour: AgentBehaviour,
    ) -> anyhow::Result<Rig> {
        let started = Instant::now();
        let token = env.set_up(max_running).await?;
        let issued = env.issue_agents(agents).await?;
        let identities = issued
            .iter()
            .map(|(name, dir)| AgentIdentity::load(name, dir))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let setup_s = started.elapsed().as_secs_f64();
        let controller = env.serve().await?;
        let tracker = Arc::new(Tracker::default());
        let connecting = Instant::now();
        let url = controller.agent_url.clone();
        let results: Vec<anyhow::Result<JoinHandle<()>>> =
            futures_util::stream::iter(identities.into_iter().map(|identity| {
                agents::connect(identity, url.clone(), behaviour, tracker.clone())
            }))
            .buffer_unordered(opts.connect_concurrency.max(1))
            .collect()
            .await;
        let mut sessions = Vec::with_capacity(results.len());
        let mut first_error = None;
        for result in results {
            match result {
                Ok(handle) => sessions.push(handle),
                Err(error) => {
                    first_error.get_or_insert(error);
                }
            }
        }
        if let Some(error) = first_error {
            for session in &sessions {
                session.abort();
            }
            let _ = controller.stop().await;
            return Err(error.context(format!(
                "only {} of {agents} agents connected",
                sessions.len()
            )));
        }
        let connect_s = connecting.elapsed().as_secs_f64();
        let api = Api::new(&controller.api_url, &token);
        Ok(Rig {
            controller,
            api,
            tracker,
            sessions,
            setup_s,
            connect_s,
        })
    }

    /// Closes the agents' streams, then stops the controller.
    pub(crate) async fn stop(self) -> anyhow::Result<()> {
        for session in &self.sessions {
            session.abort();
        }
        for session in self.sessions {
            let _ = session.await;
        }
        self.controller.stop().await
    }
}
