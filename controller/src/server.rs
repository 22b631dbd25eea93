//! Starts a controller: the store, the dispatcher, the API and the agent link.

use std::net::SocketAddr;

use iohr_certs::ControllerPki;
use iohr_proto::link::agent_link_server::AgentLinkServer;
use iohr_proto::link::enrollment_server::EnrollmentServer;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::compare_pool::ComparePool;
use crate::http::ApiListenerConfig;
use crate::hub::FrameHub;
use crate::limits::Limits;
use crate::link::{LinkService, tls_config};
use crate::queue::Dispatcher;
use crate::store::{Store, StoreError};
use crate::timing::Timing;
use crate::{Shared, api};

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("agent link TLS")]
    Tls(#[from] tonic::transport::Error),
}

pub struct ServeConfig {
    pub data_dir: std::path::PathBuf,
    pub pki: ControllerPki,
    pub database_url: String,
    pub api_addr: SocketAddr,
    pub agent_addr: SocketAddr,
    /// `/metrics` on its own listener; none serves it on the API address.
    pub metrics_addr: Option<SocketAddr>,
    pub timing: Timing,
    /// TLS, connection bound and timeouts of the API.
    pub api: ApiListenerConfig,
    pub limits: Limits,
    /// The outbox: MQTT, webhook retries, the feeds' poll.
    pub events: crate::outbox::EventsConfig,
    /// How long records are kept.
    pub retention: crate::retention::RetentionConfig,
    /// What enrolled agents' certificates are like.
    pub enrollment: crate::link::enroll::EnrollmentConfig,
    /// Alone, standing by, or one replica of several.
    pub mode: ServeMode,
    /// Browser origins `/mcp` allows besides the API's own (`--mcp-allowed-origin`).
    pub mcp_origins: Vec<String>,
    /// The console's tracing UI (`--trace-url-template`).
    pub trace_url: Option<crate::console::traces::TraceUrl>,
}

/// How a controller shares its store with others.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServeMode {
    /// The one controller of its store: a second is refused.
    Alone,
    /// Waits for the store's claim and then serves alone (PostgreSQL, `serve --standby`).
    Standby,
    /// Serves beside the other replicas at once (PostgreSQL, `serve --replica`); the one
    /// holding the store's claim also runs the schedules, the outbox and retention.
    Replica,
}

/// How a started controller ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Asked to stop.
    Stopped,
    /// Its claim on the store (or its replica's number) was lost: it stopped by itself.
    ClaimLost,
}

/// A started controller: its bound addresses and the task that ends when it stops.
pub struct Running {
    pub api_addr: SocketAddr,
    pub agent_addr: SocketAddr,
    /// Where `/metrics` is served alone (`--metrics-addr`); none when on the API address.
    pub metrics_addr: Option<SocketAddr>,
    pub done: tokio::task::JoinHandle<Outcome>,
}

/// Starts serving; with `standby`, once the store's claim is this process's. None when
/// `shutdown` came while standing by.
pub async fn start(
    config: ServeConfig,
    shutdown: CancellationToken,
) -> Result<Option<Running>, ServeError> {
    let io = |what: String| move |source| ServeError::Io { what, source };
    crate::store::secure_data_dir(&config.data_dir)
        .map_err(io(format!("the data dir {}", config.data_dir.display())))?;
    let store = Store::open(&config.database_url).await?;
    let store = match secret_key(&config)? {
        Some(key) => store.with_secret_key(key),
        None => store,
    };
    let (store, claim) = match config.mode {
        ServeMode::Alone => {
            let claim = store.claim(&config.data_dir).await?;
            (store, claim)
        }
        ServeMode::Standby => match store.claim_when_free(&shutdown, "standby").await? {
            Some(claim) => (store, claim),
            None => return Ok(None),
        },
        ServeMode::Replica => {
            let (store, seat) = store.join_replicas().await?;
            tracing::info!(replica = store.replica(), "serving as a replica");
            (store, seat)
        }
    };
    let sealed = store.seal_plain_secrets().await?;
    if sealed > 0 {
        tracing::info!(sealed, "webhook secrets stored in clear are sealed now");
    }
    // Checked every second from here on; losing it stops everything below.
    let stopping = shutdown.clone();
    let holding = tokio::spawn(async move {
        let lost = claim.hold(stopping.clone()).await;
        if lost {
            stopping.cancel();
        }
        lost
    });
    let hub = FrameHub::new(config.limits.viewers());
    let (dispatcher, dispatcher_task) =
        Dispatcher::start(store.clone(), hub.clone(), config.timing, shutdown.clone()).await?;

    let tls = tls_config(&config.pki)
        .map_err(io(format!(
            "reading certificates in {}",
            config.pki.dir.display()
        )))?
        .timeout(config.limits.handshake_timeout());
    let ca_pem = std::fs::read_to_string(config.pki.ca_cert())
        .map_err(io(format!("reading {}", config.pki.ca_cert().display())))?;
    let signer = crate::link::enroll::Signer::new(config.pki.clone(), ca_pem, config.enrollment);
    let agent_listener = TcpListener::bind(config.agent_addr)
        .await
        .map_err(io(format!(
            "binding the agent link to {}",
            config.agent_addr
        )))?;
    let agent_addr = agent_listener
        .local_addr()
        .map_err(io("agent link address".into()))?;
    let api_listener = TcpListener::bind(config.api_addr)
        .await
        .map_err(io(format!("binding the API to {}", config.api_addr)))?;
    let api_addr = api_listener
        .local_addr()
        .map_err(io("API address".into()))?;
    // Its own listener: scrapers reach it where API clients do not.
    let metrics_listener = match config.metrics_addr {
        Some(addr) => Some(
            TcpListener::bind(addr)
                .await
                .map_err(io(format!("binding the metrics address {addr}")))?,
        ),
        None => None,
    };
    let metrics_addr = metrics_listener
        .as_ref()
        .map(TcpListener::local_addr)
        .transpose()
        .map_err(io("metrics address".into()))?;
    let listening: Vec<SocketAddr> = [api_addr, agent_addr]
        .into_iter()
        .chain(metrics_addr)
        .collect();
    let egress = std::sync::Arc::new(
        crate::outbox::egress::EgressPolicy::new(
            config.events.allow_webhook_targets.clone(),
            &listening,
        )
        .with_cloud_targets(config.events.allow_cloud_targets.clone()),
    );
    let shared = Shared {
        store,
        hub,
        compares: ComparePool::new(
            config.limits.compares(),
            config.limits.compare_queue as usize,
            config.limits.compares_per_account as usize,
        ),
        dispatcher,
        timing: config.timing,
        shutdown: shutdown.clone(),
        feed: crate::outbox::FeedLimits::new(
            config.limits.max_event_feeds as usize,
            config.limits.max_event_feeds_per_account as usize,
            config.events.poll(),
        ),
        egress,
        requests: config.limits.requests(),
    };
    // Every replica exports the frames its own agents send (otlp/mod.rs).
    tokio::spawn(crate::otlp::export::run(
        shared.store.clone(),
        shared.egress.clone(),
        shutdown.clone(),
    ));
    let enrollment =
        crate::link::enroll::EnrollmentService::new(shared.store.clone(), signer.clone());

    let link = tonic::transport::Server::builder()
        .tls_config(tls)?
        .add_service(
            AgentLinkServer::new(LinkService::new(shared.clone(), signer))
                .max_decoding_message_size(iohr_proto::MAX_LINK_MESSAGE),
        )
        .add_service(
            EnrollmentServer::new(enrollment)
                .max_decoding_message_size(crate::link::enroll::MAX_ENROLL_MESSAGE),
        )
        .serve_with_incoming_shutdown(
            crate::link::accept::bounded(
                agent_listener,
                config.limits.max_agent_connections as usize,
            ),
            shutdown.clone().cancelled_owned(),
        );
    let mut router = crate::console::mount(
        crate::mcp::mount(
            api::router(shared.clone()),
            shared.clone(),
            config.mcp_origins.clone(),
        ),
        shared.clone(),
        config.api.tls.is_some(),
        config.trace_url.clone(),
    );
    router = crate::trigger::mount(router, shared.clone());
    let metrics_route =
        || axum::routing::get(crate::metrics::serve).with_state::<()>(shared.clone());
    // On the API address every tenant reaches it: no account names there.
    let public_metrics =
        || axum::routing::get(crate::metrics::serve_public).with_state::<()>(shared.clone());
    let metrics = match metrics_listener {
        None => {
            router = router.route("/metrics", public_metrics());
            None
        }
        Some(listener) => {
            let app = axum::Router::new().route("/metrics", metrics_route());
            let stop = shutdown.clone();
            Some(tokio::spawn(async move {
                let served = axum::serve(listener, app)
                    .with_graceful_shutdown(stop.cancelled_owned())
                    .await;
                if let Err(error) = served {
                    tracing::error!(%error, "the metrics listener stopped");
                }
            }))
        }
    };
    if config.api.tls.is_some() {
        // Over TLS, browsers are told to come back over TLS only (a year, RFC 6797).
        router = router.layer(axum::middleware::map_response(
            |mut response: axum::response::Response| async move {
                response.headers_mut().insert(
                    axum::http::header::STRICT_TRANSPORT_SECURITY,
                    axum::http::HeaderValue::from_static("max-age=31536000"),
                );
                response
            },
        ));
    }
    let singletons = spawn_singletons(&shared, &config, shutdown.clone());
    let api = crate::http::serve(api_listener, router, config.api, shutdown.clone());
    let relay = shared.store.is_replica().then(|| {
        crate::replicas::spawn(
            shared.store.clone(),
            shared.hub.clone(),
            shared.dispatcher.clone(),
            shutdown.clone(),
        )
    });
    let done = tokio::spawn(async move {
        let (link, (), _, singletons) = tokio::join!(link, api, dispatcher_task, singletons);
        // Losing the store's claim (replicas) stops this controller as losing its own
        // seat does: non-zero, so that a supervisor restarts it.
        let claim_lost = singletons.unwrap_or(false);
        if let Some(relay) = relay {
            let _ = relay.await;
        }
        if let Err(error) = link {
            tracing::error!(%error, "agent link server stopped");
        }
        if let Some(metrics) = metrics {
            let _ = metrics.await;
        }
        let lost = holding.await.unwrap_or(false) || claim_lost;
        shared.store.close().await;
        if lost {
            Outcome::ClaimLost
        } else {
            Outcome::Stopped
        }
    });
    Ok(Some(Running {
        api_addr,
        agent_addr,
        metrics_addr,
        done,
    }))
}

/// What runs once per store (the schedules' ticker, the outbox's consumers, retention):
/// at once when serving alone; among replicas, on the one holding the store's claim,
/// taken when the holder stops. Losing the claim stops the controller: the task then
/// ends with true.
fn spawn_singletons(
    shared: &Shared,
    config: &ServeConfig,
    shutdown: CancellationToken,
) -> tokio::task::JoinHandle<bool> {
    let shared = shared.clone();
    let events = config.events.clone();
    let retention = config.retention.clone();
    tokio::spawn(async move {
        let claim = if shared.store.is_replica() {
            match shared.store.claim_when_free(&shutdown, "replica").await {
                Ok(Some(claim)) => Some(claim),
                Ok(None) => return false,
                Err(error) => {
                    tracing::error!(%error, "waiting for the store's claim failed; stopping");
                    shutdown.cancel();
                    return true;
                }
            }
        } else {
            None
        };
        let clock = std::sync::Arc::new(crate::schedule::SystemClock);
        let outbox =
            crate::outbox::start(&shared, &events, shared.egress.clone(), shutdown.clone());
        let retention = crate::retention::spawn(
            shared.store.clone(),
            &retention,
            clock.clone(),
            shutdown.clone(),
        );
        let scheduler =
            crate::schedule::Scheduler::new(shared.clone(), clock).spawn(shutdown.clone());
        let mut lost = false;
        if let Some(claim) = claim
            && claim.hold(shutdown.clone()).await
        {
            lost = true;
            shutdown.cancel();
        }
        let _ = tokio::join!(scheduler, retention, futures_util::future::join_all(outbox));
        lost
    })
}

/// The key webhook secrets are sealed with (`store/sealed.rs`). On SQLite the one
/// controller makes it when `init` did not (an older data dir). On PostgreSQL it is not
/// made here: replicas and standbys must share one, so it comes from `init` with `pki/`;
/// without it secrets are stored in clear, as the warning says.
fn secret_key(config: &ServeConfig) -> Result<Option<crate::store::sealed::SecretKey>, StoreError> {
    use crate::store::sealed::{SecretKey, key_path};
    let path = key_path(&config.data_dir);
    let shared_store = config.database_url.starts_with("postgres");
    let made = if shared_store {
        SecretKey::load(&config.data_dir)?.map(|key| (key, false))
    } else {
        match SecretKey::load_or_create(&config.data_dir) {
            Ok(made) => Some(made),
            Err(error) => {
                tracing::warn!(%error, "no key to seal webhook secrets with");
                None
            }
        }
    };
    match made {
        Some((key, true)) => {
            tracing::info!(path = %path.display(), "made the key webhook secrets are sealed with: keep it with pki/");
            Ok(Some(key))
        }
        Some((key, false)) => Ok(Some(key)),
        None => {
            tracing::warn!(path = %path.display(), "no secrets key: new webhook secrets are stored in clear; run `iohr-controller init` (it makes one) and give every replica the same pki/");
            Ok(None)
        }
    }
}
