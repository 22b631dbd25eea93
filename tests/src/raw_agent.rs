//! An agent that speaks the link protocol by hand, for tests that need to misbehave:
//! answer late, use a stale epoch, leave gaps in its frames.

use std::path::Path;
use std::time::Duration;

use iohr_proto::link::agent_link_client::AgentLinkClient;
use iohr_proto::link::{
    AgentMessage, ControllerMessage, Heartbeat, Hello, Welcome, agent_message, controller_message,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

pub struct RawAgent {
    tx: mpsc::Sender<AgentMessage>,
    inbound: Streaming<ControllerMessage>,
    pub welcome: Welcome,
    _heartbeats: tokio::task::JoinHandle<()>,
}

impl RawAgent {
    /// Dials with the identity in `dir`, says hello for `environments`, and keeps sending
    /// heartbeats every 100 ms so the controller never finds it silent.
    pub async fn connect(
        controller: &str,
        dir: &Path,
        name: &str,
        environments: &[&str],
    ) -> Result<RawAgent, tonic::Status> {
        RawAgent::connect_serving(controller, dir, name, environments, &["checks"]).await
    }

    /// As [`RawAgent::connect`], saying it serves `kinds`.
    pub async fn connect_serving(
        controller: &str,
        dir: &Path,
        name: &str,
        environments: &[&str],
        kinds: &[&str],
    ) -> Result<RawAgent, tonic::Status> {
        let read = |file: &str| std::fs::read(dir.join(file)).expect("identity file");
        let tls = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(read("ca.pem")))
            .identity(Identity::from_pem(read("agent.pem"), read("agent.key")));
        let channel = Channel::from_shared(controller.to_string())
            .expect("controller URL")
            .tls_config(tls)
            .expect("TLS")
            .connect()
            .await
            .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
        let (tx, rx) = mpsc::channel(64);
        let hello = Hello {
            agent_id: name.to_string(),
            version: "raw".into(),
            kinds: kinds.iter().map(|k| k.to_string()).collect(),
            environments: environments.iter().map(|e| e.to_string()).collect(),
            max_concurrent_jobs: 1,
            incarnation: format!("raw-{name}"),
            recovered: Vec::new(),
            ..Hello::default()
        };
        tx.send(AgentMessage {
            body: Some(agent_message::Body::Hello(hello)),
        })
        .await
        .expect("queue hello");
        let mut inbound = AgentLinkClient::new(channel)
            .session(ReceiverStream::new(rx))
            .await?
            .into_inner();
        let welcome = match inbound.message().await? {
            Some(ControllerMessage {
                body: Some(controller_message::Body::Welcome(w)),
            }) => w,
            other => panic!("expected a welcome, got {other:?}"),
        };
        let beats = tx.clone();
        let heartbeats = tokio::spawn(async move {
            let mut sequence = 0;
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                sequence += 1;
                let beat = AgentMessage {
                    body: Some(agent_message::Body::Heartbeat(Heartbeat { sequence })),
                };
                if beats.send(beat).await.is_err() {
                    return;
                }
            }
        });
        Ok(RawAgent {
            tx,
            inbound,
            welcome,
            _heartbeats: heartbeats,
        })
    }

    pub async fn send(&self, body: agent_message::Body) {
        self.tx
            .send(AgentMessage { body: Some(body) })
            .await
            .expect("stream open");
    }

    /// The next message that is not a heartbeat.
    pub async fn next(&mut self, limit: Duration) -> controller_message::Body {
        let read = async {
            loop {
                match self.inbound.message().await.expect("stream healthy") {
                    Some(ControllerMessage {
                        body: Some(controller_message::Body::Heartbeat(_)),
                    }) => {}
                    Some(ControllerMessage { body: Some(body) }) => return body,
                    Some(ControllerMessage { body: None }) => {}
                    None => panic!("the controller closed the stream"),
                }
            }
        };
        tokio::time::timeout(limit, read)
            .await
            .expect("a message within the limit")
    }
}
