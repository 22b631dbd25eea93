//! The MQTT publisher (`serve --mqtt-url`): every event, QoS 1, on the topic
//! `iohr/ACCOUNT/EVENT_TYPE` (the account's name), the payload the event's JSON.
//!
//! Its cursor per account is in the store (`event_cursors`, consumer `mqtt`) and moves
//! only after the broker's PUBACK, one event in flight at a time: after a broker
//! disconnect or a controller restart it publishes from there, so nothing is missed, and
//! an event whose PUBACK was lost is published again (at-least-once; receivers
//! deduplicate on the payload's `id`). Reconnects back off with `backon`'s exponential
//! delays, 200 ms doubling to 10 s, with jitter.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use rumqttc::{AsyncClient, Event, EventLoop, MqttOptions, Packet, QoS};
use tokio_util::sync::CancellationToken;

use crate::store::{Store, StoreError};

/// The consumer name of the publisher's cursors.
const CONSUMER: &str = "mqtt";
/// Events read per account per pass.
const BATCH: u32 = 200;
/// Time for the broker's CONNACK or PUBACK.
const BROKER_TIMEOUT: Duration = Duration::from_secs(10);

/// A broker's address from `mqtt://HOST[:PORT]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerAddr {
    pub host: String,
    pub port: u16,
}

impl std::fmt::Display for BrokerAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "mqtt://{}:{}", self.host, self.port)
    }
}

impl std::str::FromStr for BrokerAddr {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let rest = text.strip_prefix("mqtt://").ok_or_else(|| {
            format!("{text:?}: give mqtt://HOST[:PORT] (TLS, mqtts://, is not supported yet)")
        })?;
        let rest = rest.trim_end_matches('/');
        if rest.is_empty() || rest.contains(['/', '@', '?', '#']) {
            return Err(format!(
                "{text:?}: only a host and a port, without credentials or a path"
            ));
        }
        let (host, port) = match rest.rsplit_once(':') {
            Some((host, port)) if !host.ends_with(']') || rest.starts_with('[') => (
                host,
                port.parse::<u16>()
                    .map_err(|_| format!("{text:?}: the port must be a number up to 65535"))?,
            ),
            _ => (rest, 1883),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return Err(format!("{text:?}: no host"));
        }
        Ok(BrokerAddr {
            host: host.to_string(),
            port,
        })
    }
}

/// The topic of an account's event: the account's name, unless MQTT would read it as
/// more than one level or a wildcard (then its id).
pub fn topic(account_name: &str, account_id: &str, event_type: &str) -> String {
    let level = if account_name.is_empty() || account_name.contains(['/', '+', '#']) {
        account_id
    } else {
        account_name
    };
    format!("iohr/{level}/{event_type}")
}

#[derive(Debug, thiserror::Error)]
enum SessionError {
    #[error("broker connection: {0}")]
    Connection(#[from] rumqttc::ConnectionError),
    #[error("publish: {0}")]
    Client(#[from] rumqttc::ClientError),
    #[error("the broker did not answer within {BROKER_TIMEOUT:?}")]
    Timeout,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The publisher: runs until `shutdown`, reconnecting after every failure.
pub async fn run(store: Store, broker: BrokerAddr, poll: Duration, shutdown: CancellationToken) {
    let mut options = MqttOptions::new(
        format!("iohr-controller-{}", uuid::Uuid::new_v4().simple()),
        broker.host.clone(),
        broker.port,
    );
    options.set_keep_alive(Duration::from_secs(30));
    let backoff = || {
        ExponentialBuilder::new()
            .with_min_delay(Duration::from_millis(200))
            .with_max_delay(Duration::from_secs(10))
            .with_jitter()
            .without_max_times()
            .build()
    };
    let mut waits = backoff();
    loop {
        let mut connected = false;
        let result = session(&store, &options, poll, &shutdown, &mut connected).await;
        if shutdown.is_cancelled() {
            return;
        }
        if connected {
            waits = backoff();
        }
        let wait = waits.next().unwrap_or(Duration::from_secs(10));
        match result {
            Ok(()) => return,
            Err(error) => {
                tracing::warn!(%broker, %error, retry_in = ?wait, "MQTT publisher disconnected")
            }
        }
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            _ = shutdown.cancelled() => return,
        }
    }
}

/// One connection: connect, then publish the backlog and whatever comes, until an error.
async fn session(
    store: &Store,
    options: &MqttOptions,
    poll: Duration,
    shutdown: &CancellationToken,
    connected: &mut bool,
) -> Result<(), SessionError> {
    // A fresh client per connection: nothing of a broken one is resent behind our back;
    // what was not acknowledged is published again from the cursor.
    let (client, mut events) = AsyncClient::new(options.clone(), 16);
    wait_for(&mut events, |p| matches!(p, Packet::ConnAck(_))).await?;
    *connected = true;
    tracing::info!(broker = %options.broker_address().0, "MQTT publisher connected");
    loop {
        let mut published = false;
        for account in store.event_backlog(CONSUMER).await? {
            for event in store
                .events_after(&account.account_id, account.done, BATCH)
                .await?
            {
                let topic = topic(
                    &account.account_name,
                    &account.account_id,
                    &event.event_type,
                );
                client
                    .publish(topic, QoS::AtLeastOnce, false, event.to_json().into_bytes())
                    .await?;
                wait_for(&mut events, |p| matches!(p, Packet::PubAck(_))).await?;
                store
                    .set_event_cursor(CONSUMER, &account.account_id, event.seq)
                    .await?;
                published = true;
            }
        }
        if published {
            continue;
        }
        // Idle: keep the connection's pings going until the next look at the outbox.
        let idle = tokio::time::sleep(poll);
        tokio::pin!(idle);
        loop {
            tokio::select! {
                polled = events.poll() => { polled?; }
                () = &mut idle => break,
                _ = shutdown.cancelled() => {
                    let _ = client.disconnect().await;
                    return Ok(());
                }
            }
        }
    }
}

/// Drives the event loop until the broker sends a packet `wanted` accepts.
async fn wait_for(
    events: &mut EventLoop,
    wanted: impl Fn(&Packet) -> bool,
) -> Result<(), SessionError> {
    let wait = async {
        loop {
            if let Event::Incoming(packet) = events.poll().await?
                && wanted(&packet)
            {
                return Ok::<(), SessionError>(());
            }
        }
    };
    tokio::time::timeout(BROKER_TIMEOUT, wait)
        .await
        .map_err(|_| SessionError::Timeout)?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broker_urls() {
        let addr: BrokerAddr = "mqtt://127.0.0.1:1883".parse().unwrap();
        assert_eq!((addr.host.as_str(), addr.port), ("127.0.0.1", 1883));
        let addr: BrokerAddr = "mqtt://broker.example".parse().unwrap();
        assert_eq!(addr.port, 1883);
        let addr: BrokerAddr = "mqtt://[::1]:1884".parse().unwrap();
        assert_eq!((addr.host.as_str(), addr.port), ("::1", 1884));
        for bad in [
            "http://x",
            "mqtts://x",
            "mqtt://",
            "mqtt://u:p@x",
            "mqtt://x:99999",
            "mqtt://x/t",
        ] {
            assert!(bad.parse::<BrokerAddr>().is_err(), "{bad}");
        }
    }

    #[test]
    fn topics_name_the_account_in_one_level() {
        assert_eq!(
            topic("default", "a1", "reliability.run.finished"),
            "iohr/default/reliability.run.finished"
        );
        assert_eq!(topic("a/b", "a1", "t"), "iohr/a1/t");
        assert_eq!(topic("a+", "a1", "t"), "iohr/a1/t");
    }
}
