//! Webhook deliveries: one task per controller. Each poll it fans the accounts' new
//! events out into delivery rows (each subscription's cursor moves in the same
//! transaction), then sends the due ones, at most `concurrency` at once, each within
//! `timeout`. A 2xx answer delivers; 410 Gone disables the subscription; anything else is
//! retried on the schedule, and given up once the schedule is used up. The schedule lives
//! in the store (`next_attempt_at`), not in memory, so a restart keeps it: that is why
//! this is not a `backon` retry loop, which holds its state in the task.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::Full;
use hyper::Request;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio_util::sync::CancellationToken;

use super::config::RetrySchedule;
use super::connector::{ConnectError, GuardedConnector};
use super::egress::EgressPolicy;
use super::signing;
use crate::store::{AttemptOutcome, DueDelivery, EventRow, Store, now_ms};

/// Events fanned out per subscription per poll.
const FAN_OUT_BATCH: u32 = 200;

#[derive(Debug, Clone)]
pub struct DeliveryConfig {
    pub schedule: RetrySchedule,
    pub timeout: Duration,
    pub concurrency: usize,
    /// Attempts of one account's subscriptions in flight at once (of `concurrency`).
    pub per_account: usize,
    pub poll: Duration,
}

pub(crate) type HttpsClient = Client<hyper_rustls::HttpsConnector<GuardedConnector>, Full<Bytes>>;

/// The client of deliveries: HTTP/1.1 over TCP to an address the policy allows
/// ([`GuardedConnector`]), or TLS on it verified against the system's roots for
/// `https://` receivers (rustls with the ring provider, as the workspace). It follows no
/// redirect: only the status counts.
pub(crate) fn client(policy: Arc<EgressPolicy>) -> Result<HttpsClient, rustls::Error> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        // A system root rustls cannot parse is skipped, as browsers do.
        let _ = roots.add(cert);
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(GuardedConnector::new(policy));
    Ok(Client::builder(TokioExecutor::new()).build(connector))
}

/// The delivery task: runs until `shutdown`.
pub async fn run(
    store: Store,
    config: DeliveryConfig,
    policy: Arc<EgressPolicy>,
    shutdown: CancellationToken,
) {
    let mut clients = match Clients::new(policy) {
        Ok(clients) => clients,
        Err(error) => {
            tracing::error!(%error, "webhook deliveries cannot start: TLS configuration");
            return;
        }
    };
    let mut tick = tokio::time::interval(config.poll);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.cancelled() => return,
        }
        tokio::select! {
            () = one_pass(&store, &mut clients, &config) => {}
            // Attempts cut short stay pending and are sent again after a restart.
            _ = shutdown.cancelled() => return,
        }
    }
}

/// The delivery clients: the process-wide policy's, and one per account the operator
/// opened exceptions for (`account allow-target`), so that account's exceptions are
/// judged at its connections only and no pooled connection crosses accounts. The forge
/// reporter keeps its own.
pub(crate) struct Clients {
    policy: Arc<EgressPolicy>,
    shared: HttpsClient,
    /// An account's exceptions and the client built on them.
    accounts: HashMap<String, (Vec<String>, HttpsClient)>,
}

impl Clients {
    pub(crate) fn new(policy: Arc<EgressPolicy>) -> Result<Clients, rustls::Error> {
        Ok(Clients {
            shared: client(policy.clone())?,
            policy,
            accounts: HashMap::new(),
        })
    }

    /// Brings the accounts' clients up to the stored exceptions: a client whose account's
    /// entries changed is built again, one whose account has none left is dropped.
    pub(crate) fn refresh(&mut self, stored: Vec<(String, String)>) -> Result<(), rustls::Error> {
        let mut wanted: HashMap<String, Vec<String>> = HashMap::new();
        for (account, entry) in stored {
            wanted.entry(account).or_default().push(entry);
        }
        self.accounts
            .retain(|account, (entries, _)| wanted.get(account) == Some(entries));
        for (account, entries) in wanted {
            if !self.accounts.contains_key(&account) {
                let policy = Arc::new(self.policy.with_account(&entries));
                self.accounts.insert(account, (entries, client(policy)?));
            }
        }
        Ok(())
    }

    pub(crate) fn of(&self, account_id: &str) -> &HttpsClient {
        self.accounts
            .get(account_id)
            .map_or(&self.shared, |(_, client)| client)
    }
}

async fn one_pass(store: &Store, clients: &mut Clients, config: &DeliveryConfig) {
    if let Err(error) = store.fan_out_events(FAN_OUT_BATCH).await {
        tracing::warn!(%error, "webhook fan-out failed; retried next poll");
        return;
    }
    let refreshed = match store.all_egress_allow().await {
        Ok(stored) => clients.refresh(stored).map_err(|e| e.to_string()),
        Err(error) => Err(error.to_string()),
    };
    if let Err(error) = refreshed {
        // Without the accounts' exceptions a delivery could be refused that should not.
        tracing::warn!(%error, "reading the accounts' egress exceptions failed; retried next poll");
        return;
    }
    let clients = &*clients;
    let limit = u32::try_from(config.concurrency * 4).unwrap_or(u32::MAX);
    let per_account = u32::try_from(config.per_account).unwrap_or(u32::MAX);
    let due = match store.due_deliveries(now_ms(), limit, per_account).await {
        Ok(due) => due,
        Err(error) => {
            tracing::warn!(%error, "reading due webhook deliveries failed");
            return;
        }
    };
    futures_util::stream::iter(due)
        .for_each_concurrent(config.concurrency, |due| async move {
            let outcome = attempt(clients.of(&due.webhook.account_id), &due, config).await;
            let (hook, seq) = (&due.webhook.id, due.delivery.event_seq);
            match &outcome {
                AttemptOutcome::Delivered { status_code } => {
                    tracing::debug!(webhook = %hook, event = %due.event.id, status_code, "webhook delivered")
                }
                AttemptOutcome::Failed { error, retry_at, .. } => {
                    tracing::debug!(webhook = %hook, event = %due.event.id, class = %error, retrying = retry_at.is_some(), "webhook delivery failed")
                }
                AttemptOutcome::Gone => {
                    tracing::warn!(webhook = %hook, "webhook receiver answered 410 Gone: subscription disabled")
                }
            }
            if let Err(error) = store.record_attempt(hook, seq, &outcome).await {
                tracing::warn!(webhook = %hook, %error, "recording a webhook attempt failed");
            }
        })
        .await;
}

/// The body a subscription receives: the event as JSON, or for `slack` the
/// `{"text": ...}` an incoming webhook posts to its channel.
pub fn body(format: &str, event: &EventRow) -> String {
    if format != "slack" {
        return event.to_json();
    }
    let text_of = |field: &str| event.data[field].as_str().unwrap_or("?").to_string();
    let text = match event.event_type.as_str() {
        crate::store::RUN_FINISHED => format!(
            "iohr: {} run {} in {} finished: {}",
            text_of("kind"),
            text_of("run_id"),
            text_of("environment"),
            text_of("status")
        ),
        crate::store::FINDING_CREATED => format!(
            "iohr: run {} found something new: finding {} ({})",
            text_of("run_id"),
            text_of("finding_id"),
            text_of("signature")
        ),
        other => format!("iohr: {other} {}", event.id),
    };
    serde_json::json!({ "text": text }).to_string()
}

/// What a tenant reads of a failed attempt: a class, never the error's text (which
/// would tell an open port from a closed one, or name the controller's network). The
/// text goes to the controller's log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureClass {
    /// The target policy refused the address: nothing was sent.
    Denied,
    /// Not resolved, not connected, or the connection broke before an answer.
    ConnectFailed,
    /// No answer within `--webhook-timeout-ms`.
    Timeout,
    /// The TLS handshake failed (certificate, protocol).
    Tls,
    /// The receiver answered a status other than 2xx or 410.
    HttpStatus,
    /// The controller could not sign or build the request.
    Internal,
}

impl FailureClass {
    pub const ALL: [FailureClass; 6] = [
        FailureClass::Denied,
        FailureClass::ConnectFailed,
        FailureClass::Timeout,
        FailureClass::Tls,
        FailureClass::HttpStatus,
        FailureClass::Internal,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FailureClass::Denied => "denied",
            FailureClass::ConnectFailed => "connect_failed",
            FailureClass::Timeout => "timeout",
            FailureClass::Tls => "tls",
            FailureClass::HttpStatus => "http_status",
            FailureClass::Internal => "internal",
        }
    }

    /// The class of a client error, from its chain of causes.
    pub(crate) fn of(error: &(dyn std::error::Error + 'static)) -> FailureClass {
        let mut next = Some(error);
        while let Some(cause) = next {
            if let Some(connect) = cause.downcast_ref::<ConnectError>() {
                return match connect {
                    ConnectError::Denied(_) => FailureClass::Denied,
                    _ => FailureClass::ConnectFailed,
                };
            }
            if cause.downcast_ref::<rustls::Error>().is_some() {
                return FailureClass::Tls;
            }
            // An io::Error's source() skips the error it wraps (rustls's is inside one,
            // itself inside another): the wrapped one is the next cause.
            next = match cause.downcast_ref::<std::io::Error>() {
                Some(io) => match io.get_ref() {
                    Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
                    None => None,
                },
                None => cause.source(),
            };
        }
        FailureClass::ConnectFailed
    }
}

async fn attempt(
    client: &HttpsClient,
    due: &DueDelivery,
    config: &DeliveryConfig,
) -> AttemptOutcome {
    let made = due.delivery.attempts - due.delivery.schedule_from + 1;
    let failed = |status_code: Option<i64>, class: FailureClass, detail: String| {
        tracing::info!(webhook = %due.webhook.id, event = %due.event.id, class = class.as_str(), %detail, "webhook attempt failed");
        AttemptOutcome::Failed {
            status_code,
            error: class.as_str().to_string(),
            retry_at: config
                .schedule
                .next_delay(made)
                .map(|delay| now_ms() + i64::try_from(delay.as_millis()).unwrap_or(i64::MAX / 2)),
        }
    };
    let body = body(&due.webhook.format, &due.event);
    let timestamp = now_ms() / 1000;
    let signature = match signing::sign(&due.webhook.secret, &due.event.id, timestamp, &body) {
        Ok(signature) => signature,
        Err(error) => return failed(None, FailureClass::Internal, error.to_string()),
    };
    let request = Request::post(due.webhook.url.as_str())
        .header("content-type", "application/json")
        .header(
            "user-agent",
            concat!("iohr-controller/", env!("CARGO_PKG_VERSION")),
        )
        .header("webhook-id", &due.event.id)
        .header("webhook-timestamp", timestamp.to_string())
        .header("webhook-signature", signature)
        .body(Full::new(Bytes::from(body)));
    let request = match request {
        Ok(request) => request,
        Err(error) => return failed(None, FailureClass::Internal, error.to_string()),
    };
    match tokio::time::timeout(config.timeout, client.request(request)).await {
        Err(_) => failed(
            None,
            FailureClass::Timeout,
            format!("no answer within {:?}", config.timeout),
        ),
        Ok(Err(error)) => failed(None, FailureClass::of(&error), error_chain(&error)),
        Ok(Ok(response)) => {
            let code = i64::from(response.status().as_u16());
            // The answer's body is not read: only the status counts, and nothing of it is kept.
            drop(response);
            match code {
                200..=299 => AttemptOutcome::Delivered { status_code: code },
                410 => AttemptOutcome::Gone,
                _ => failed(
                    Some(code),
                    FailureClass::HttpStatus,
                    format!("the receiver answered {code}"),
                ),
            }
        }
    }
}

/// An error with its causes ("client error (Connect): tcp connect error: refused"), for
/// the controller's log.
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
