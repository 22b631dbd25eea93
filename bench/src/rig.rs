//! The rig of a scenario: a started controller with its simulated agents connected.

use std::sync::Arc;
use std::time::Instant;

use futures_util::StreamExt;
use tokio::task::JoinHandle;

use crate::Opts;
use crate::agents::{self, AgentBehaviour, AgentIdentity, Tracker};
use crate::api::Api;
use crate::controller::{Controller, Environment};

/// Started controllers (one, or `--replicas` of one store) with their agents connected,
/// agent i on replica i mod N.
pub(crate) struct Rig {
    pub(crate) controllers: Vec<Controller>,
    /// The first replica's API (for reading results).
    pub(crate) api: Api,
    /// Every replica's API, for POSTs spread over them in turn.
    apis: Vec<Api>,
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
        let mut controllers = Vec::with_capacity(opts.replicas);
        if opts.replicas <= 1 {
            controllers.push(env.serve().await?);
        } else {
            for n in 1..=opts.replicas {
                controllers.push(
                    env.serve_as(&format!("replica-{n}"), &["--replica"])
                        .await?,
                );
            }
        }
        let tracker = Arc::new(Tracker::default());
        let connecting = Instant::now();
        let urls: Vec<String> = controllers.iter().map(|c| c.agent_url.clone()).collect();
        let results: Vec<anyhow::Result<JoinHandle<()>>> =
            futures_util::stream::iter(identities.into_iter().enumerate().map(|(i, identity)| {
                let url = urls[i % urls.len()].clone();
                agents::connect(identity, url, behaviour, tracker.clone())
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
            for controller in controllers {
                let _ = controller.stop().await;
            }
            return Err(error.context(format!(
                "only {} of {agents} agents connected",
                sessions.len()
            )));
        }
        let connect_s = connecting.elapsed().as_secs_f64();
        let apis: Vec<Api> = controllers
            .iter()
            .map(|c| Api::new(&c.api_url, &token))
            .collect();
        Ok(Rig {
            api: apis[0].clone(),
            apis,
            controllers,
            tracker,
            sessions,
            setup_s,
            connect_s,
        })
    }

    /// The API of replica `i mod N`.
    pub(crate) fn api_at(&self, i: usize) -> Api {
        self.apis[i % self.apis.len()].clone()
    }

    /// Closes the agents' streams, then stops the controllers.
    pub(crate) async fn stop(self) -> anyhow::Result<()> {
        for session in &self.sessions {
            session.abort();
        }
        for session in self.sessions {
            let _ = session.await;
        }
        let mut first_error = None;
        for controller in self.controllers {
            if let Err(error) = controller.stop().await {
                first_error.get_or_insert(error);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}
