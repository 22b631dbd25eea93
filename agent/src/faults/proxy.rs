//! The fault proxy: a TCP proxy the agent runs in front of a target's port, in its own
//! process, with network faults (Toxiproxy's toxics) and HTTP faults added and removed while
//! it runs. See docs/faults.md, "The fault proxy".
//!
//! Each accepted connection is joined to a new connection to the target; each direction has
//! a reader and a writer (`connection`), and the writer applies the toxics that hit the
//! connection in its direction. A network fault hits a connection by its toxicity, drawn
//! from the proxy's seeded [`Picks`] when the connection is accepted (for the faults present)
//! or when the fault is added (for the connections present), so tests are deterministic.
//! Every connection holds a `watch` of what it sees (`View`), replaced on every add and
//! remove, so a removal takes effect at once on live connections.

mod connection;
mod http;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use iohr_domain::faults::Fault;
use iohr_domain::faults::fault::Toxic;
use iohr_domain::request::SpecError;
use rand::{Rng, SeedableRng};
// A seeded stream that rand_chacha keeps across releases (StdRng's may change).
use rand_chacha::ChaCha8Rng;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;

use super::{FaultError, Undo};
use connection::{Conn, View};

/// How long a shut-down proxy waits for its connections to close before it drops them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);
/// Between attempts to listen again after a `down` ended, when the port is taken.
const REBIND_BACKOFF: Duration = Duration::from_millis(250);
/// Separates the seeded streams of connection picks, HTTP rate picks and jitter.
const HTTP_STREAM: u64 = 0x4854_5450_0000_0001;
const JITTER_STREAM: u64 = 0x4a49_5454_0000_0001;

#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("the fault proxy applies network and http faults, not {0}")]
    NotAProxyFault(&'static str),
    #[error(transparent)]
    Invalid(#[from] SpecError),
    #[error("the fault proxy cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("the fault proxy has stopped")]
    Stopped,
}

impl From<ProxyError> for FaultError {
    fn from(error: ProxyError) -> Self {
        match error {
            ProxyError::NotAProxyFault(_) | ProxyError::Invalid(_) => {
                FaultError::Failed(error.to_string())
            }
            ProxyError::Listen { source, .. } => FaultError::Io(source),
            ProxyError::Stopped => FaultError::Failed(error.to_string()),
        }
    }
}

/// The proxy's seeded draws: whether a connection is hit by a fault of some toxicity, or a
/// request by an HTTP fault of some rate. One draw per decision, in the order decisions are
/// made.
#[derive(Debug)]
pub struct Picks(ChaCha8Rng);

impl Picks {
    pub fn new(seed: u64) -> Self {
        Picks(ChaCha8Rng::seed_from_u64(seed))
    }

    /// True for a share `share` of calls (0 < share <= 1).
    pub fn pick(&mut self, share: f64) -> bool {
        self.0.random::<f64>() < share
    }
}

/// A running fault proxy; dropped or [shut down](FaultProxy::shutdown), it stops listening
/// and closes its connections.
#[derive(Debug)]
pub struct FaultProxy {
    inner: Arc<Inner>,
    task: Option<JoinHandle<()>>,
}

#[derive(Debug)]
struct Inner {
    /// The address it listens on (bound again after a `down` that closed the listener).
    listen: SocketAddr,
    upstream: SocketAddr,
    seed: u64,
    state: Mutex<State>,
    /// Bumped on every change of the faults, for the accept loop.
    changes: watch::Sender<u64>,
    stop: CancellationToken,
    http_picks: Arc<Mutex<Picks>>,
}

#[derive(Debug)]
struct State {
    next_fault: u64,
    faults: BTreeMap<u64, Fault>,
    next_connection: u64,
    connections: BTreeMap<u64, Live>,
    /// Toxicity draws.
    picks: Picks,
}

/// A live connection: the network faults that hit it and its view of them.
#[derive(Debug)]
struct Live {
    hits: BTreeSet<u64>,
    view: watch::Sender<Arc<View>>,
}

impl FaultProxy {
    /// Listens on `listen` (port 0: any free port) and proxies every connection to
    /// `upstream`. `seed` makes the toxicity, rate and jitter draws repeatable.
    pub async fn start(
        listen: SocketAddr,
        upstream: SocketAddr,
        seed: u64,
    ) -> Result<FaultProxy, ProxyError> {
        let listener = TcpListener::bind(listen)
            .await
            .map_err(|source| ProxyError::Listen {
                addr: listen,
                source,
            })?;
        let listen = listener.local_addr().map_err(|source| ProxyError::Listen {
            addr: listen,
            source,
        })?;
        let inner = Arc::new(Inner {
            listen,
            upstream,
            seed,
            state: Mutex::new(State {
                next_fault: 1,
                faults: BTreeMap::new(),
                next_connection: 1,
                connections: BTreeMap::new(),
                picks: Picks::new(seed),
            }),
            changes: watch::Sender::new(0),
            stop: CancellationToken::new(),
            http_picks: Arc::new(Mutex::new(Picks::new(seed ^ HTTP_STREAM))),
        });
        tracing::info!(proxy = %listen, %upstream, "fault proxy listening");
        let task = tokio::spawn(accept_loop(listener, inner.clone()));
        Ok(FaultProxy {
            inner,
            task: Some(task),
        })
    }

    /// The address clients connect to.
    pub fn local_addr(&self) -> SocketAddr {
        self.inner.listen
    }

    /// Adds a network or HTTP fault; it acts on live connections at once. Returns its id.
    pub fn add(&self, fault: &Fault) -> Result<u64, ProxyError> {
        if !matches!(fault, Fault::Network(_) | Fault::Http(_)) {
            return Err(ProxyError::NotAProxyFault(fault.name()));
        }
        fault.validate("fault")?;
        if self.inner.stop.is_cancelled() {
            return Err(ProxyError::Stopped);
        }
        let mut state = self.inner.lock();
        let id = state.next_fault;
        state.next_fault += 1;
        state.faults.insert(id, fault.clone());
        if let Fault::Network(network) = fault {
            let State {
                connections, picks, ..
            } = &mut *state;
            for live in connections.values_mut() {
                if picks.pick(network.toxicity) {
                    live.hits.insert(id);
                }
            }
        }
        state.publish();
        drop(state);
        self.inner.changes.send_modify(|n| *n += 1);
        tracing::info!(proxy = %self.inner.listen, fault_id = id, fault = fault.name(), "fault proxy: fault added");
        Ok(id)
    }

    /// Removes a fault; false when it was not there. Live connections stop seeing it at once.
    pub fn remove(&self, id: u64) -> bool {
        let mut state = self.inner.lock();
        let removed = state.faults.remove(&id).is_some();
        if removed {
            for live in state.connections.values_mut() {
                live.hits.remove(&id);
            }
            state.publish();
        }
        drop(state);
        if removed {
            self.inner.changes.send_modify(|n| *n += 1);
            tracing::info!(proxy = %self.inner.listen, fault_id = id, "fault proxy: fault removed");
        }
        removed
    }

    /// Removes every fault.
    pub fn clear(&self) {
        let ids: Vec<u64> = self.inner.lock().faults.keys().copied().collect();
        for id in ids {
            self.remove(id);
        }
    }

    /// The faults in force, oldest first.
    pub fn active(&self) -> Vec<(u64, Fault)> {
        let state = self.inner.lock();
        state
            .faults
            .iter()
            .map(|(id, f)| (*id, f.clone()))
            .collect()
    }

    /// How the fault `id` of this proxy is undone, for the ledger.
    pub fn undo(&self, id: u64) -> Undo {
        Undo::ProxyFault {
            proxy: self.inner.listen.to_string(),
            id,
        }
    }

    /// Stops listening, closes every connection and waits (boundedly) until they are closed.
    pub async fn shutdown(mut self) {
        self.inner.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        tracing::info!(proxy = %self.inner.listen, "fault proxy stopped");
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.inner.stop.cancel();
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A `down` hitting every connection closes the listener, so connects are refused.
    fn refusing(&self) -> bool {
        self.lock().faults.values().any(|f| {
            matches!(f, Fault::Network(n) if matches!(n.toxic, Toxic::Down {}) && n.toxicity >= 1.0)
        })
    }

    /// Registers an accepted connection: the network faults present hit it by their toxicity.
    fn register(self: &Arc<Self>) -> (Registration, Conn) {
        let mut state = self.lock();
        let id = state.next_connection;
        state.next_connection += 1;
        let State { faults, picks, .. } = &mut *state;
        let hits: BTreeSet<u64> = faults
            .iter()
            .filter_map(|(fid, f)| match f {
                Fault::Network(n) if picks.pick(n.toxicity) => Some(*fid),
                _ => None,
            })
            .collect();
        let view = watch::Sender::new(Arc::new(view_of(faults, &hits)));
        let receiver = view.subscribe();
        state.connections.insert(id, Live { hits, view });
        let conn = Conn {
            upstream: self.upstream,
            view: receiver,
            stop: self.stop.clone(),
            http_picks: self.http_picks.clone(),
            jitter_seed: (self.seed ^ JITTER_STREAM)
                .wrapping_add(id.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
        };
        (
            Registration {
                inner: self.clone(),
                id,
            },
            conn,
        )
    }
}

impl State {
    /// Gives every live connection its new view of the faults.
    fn publish(&self) {
        for live in self.connections.values() {
            live.view
                .send_replace(Arc::new(view_of(&self.faults, &live.hits)));
        }
    }
}

fn view_of(faults: &BTreeMap<u64, Fault>, hits: &BTreeSet<u64>) -> View {
    let mut view = View::default();
    for (id, fault) in faults {
        match fault {
            Fault::Network(n) if hits.contains(id) => view.network.push((*id, n.clone())),
            Fault::Http(h) => view.http.push((*id, h.clone())),
            _ => {}
        }
    }
    view
}

/// Removes a connection from the proxy's table when its task ends.
struct Registration {
    inner: Arc<Inner>,
    id: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.inner.lock().connections.remove(&self.id);
    }
}

async fn accept_loop(listener: TcpListener, inner: Arc<Inner>) {
    let mut listener = Some(listener);
    let mut changes = inner.changes.subscribe();
    let mut connections = JoinSet::new();
    loop {
        if inner.refusing() {
            if listener.take().is_some() {
                tracing::info!(proxy = %inner.listen, "fault proxy down: refusing connections");
            }
        } else if listener.is_none() {
            match TcpListener::bind(inner.listen).await {
                Ok(bound) => {
                    tracing::info!(proxy = %inner.listen, "fault proxy up again");
                    listener = Some(bound);
                }
                Err(error) => {
                    tracing::warn!(proxy = %inner.listen, %error, "fault proxy cannot listen again; retrying");
                    tokio::select! {
                        _ = inner.stop.cancelled() => break,
                        _ = tokio::time::sleep(REBIND_BACKOFF) => continue,
                    }
                }
            }
        }
        tokio::select! {
            _ = inner.stop.cancelled() => break,
            _ = changes.changed() => {}
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = accept(listener.as_ref()) => match accepted {
                Ok(stream) => {
                    let (registration, conn) = inner.register();
                    connections.spawn(async move {
                        connection::serve(stream, conn).await;
                        drop(registration);
                    });
                }
                Err(error) => {
                    // E.g. out of file descriptors: back off instead of spinning.
                    tracing::warn!(proxy = %inner.listen, %error, "fault proxy accept failed");
                    tokio::select! {
                        _ = inner.stop.cancelled() => break,
                        _ = tokio::time::sleep(REBIND_BACKOFF) => {}
                    }
                }
            },
        }
    }
    drop(listener);
    // Connections end on the stop token (a child of theirs); the grace bounds the wait.
    let _ = tokio::time::timeout(SHUTDOWN_GRACE, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    connections.abort_all();
}

async fn accept(listener: Option<&TcpListener>) -> std::io::Result<tokio::net::TcpStream> {
    match listener {
        Some(listener) => listener.accept().await.map(|(stream, _)| stream),
        None => std::future::pending().await,
    }
}
