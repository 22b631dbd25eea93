//! Product events on MQTT with the real stack, on both stores: a rumqttc subscriber on the
//! local Mosquitto (127.0.0.1:1883) sees every event id once, on `iohr/ACCOUNT/TYPE`: the
//! backlog of events made while the controller had no broker, live events, none again
//! across a controller restart; and what it missed while the broker was unreachable, then
//! across a cut connection.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

mod events_support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use events_support::{LIMIT, failing_checks, feed_ids, finished, passing_checks, stack};
use iohr_tests::{Api, Backend, Controller, Target, on_both_stores, wait_for};
use serde_json::Value;

/// Every MQTT message the subscriber got: (topic, payload).
type Messages = Arc<Mutex<Vec<(String, Value)>>>;

/// A rumqttc subscriber of `iohr/default/#` at QoS 1 on the local Mosquitto, subscribed
/// (SUBACK seen) when this returns. Other tests publish there too: callers count the
/// event ids of their own installation only.
async fn mqtt_subscriber() -> Messages {
    use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS};
    let mut options = MqttOptions::new(
        format!("iohr-test-{}", uuid::Uuid::new_v4().simple()),
        "127.0.0.1",
        1883,
    );
    options.set_keep_alive(Duration::from_secs(30));
    let (client, mut events) = AsyncClient::new(options, 64);
    client
        .subscribe("iohr/default/#", QoS::AtLeastOnce)
        .await
        .unwrap();
    let subscribed = async {
        loop {
            match events.poll().await {
                Ok(Event::Incoming(Packet::SubAck(_))) => return,
                Ok(_) => {}
                Err(error) => panic!(
                    "Mosquitto is required on 127.0.0.1:1883 (tests/run starts it; \
                     apt-get install mosquitto): {error}"
                ),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), subscribed)
        .await
        .expect("SUBACK from Mosquitto within 10 s");
    let messages: Messages = Arc::default();
    let sink = messages.clone();
    tokio::spawn(async move {
        let _client = client;
        loop {
            match events.poll().await {
                Ok(Event::Incoming(Packet::Publish(publish))) => {
                    let payload = serde_json::from_slice(&publish.payload).unwrap_or(Value::Null);
                    sink.lock().unwrap().push((publish.topic.clone(), payload));
                }
                Ok(_) => {}
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    });
    messages
}

/// How often each of `ids` arrived, and on which topic.
fn arrivals(messages: &Messages, ids: &[(String, String)]) -> Vec<(usize, bool)> {
    let got = messages.lock().unwrap();
    ids.iter()
        .map(|(id, event_type)| {
            let mine: Vec<&(String, Value)> =
                got.iter().filter(|(_, p)| p["id"] == id.as_str()).collect();
            let topic_ok = mine
                .iter()
                .all(|(t, _)| *t == format!("iohr/default/{event_type}"));
            (mine.len(), topic_ok)
        })
        .collect()
}

async fn wait_arrived(messages: &Messages, ids: &[(String, String)]) {
    wait_for("every event on MQTT", LIMIT, || async {
        arrivals(messages, ids)
            .iter()
            .all(|(n, _)| *n >= 1)
            .then_some(())
    })
    .await;
}

async fn mqtt_gets_every_event_once_across_restarts(backend: Backend) {
    let messages = mqtt_subscriber().await;
    // Without a broker first: these events wait in the outbox.
    let (install, controller, api, _agent) = stack(backend, &["--events-poll-ms", "50"]).await;
    let target = Target::start().await;
    finished(&api, &failing_checks(&target), "failed").await;
    let port = controller.agent_link.port();
    controller.stop().await;

    let mqtt = [
        "--events-poll-ms",
        "50",
        "--mqtt-url",
        "mqtt://127.0.0.1:1883",
    ];
    let controller = Controller::start_with(&install, 200, Some(port), &mqtt).await;
    let api = Api::new(&controller.api_url(), &install.full_token());
    let backlog = feed_ids(&api, 3).await;
    wait_arrived(&messages, &backlog).await;

    api.wait_online("edge-1", LIMIT).await;
    finished(&api, &passing_checks(&target), "passed").await;
    let live = feed_ids(&api, 4).await;
    wait_arrived(&messages, &live).await;

    // A restart publishes nothing again: the cursor is in the store.
    controller.stop().await;
    let controller = Controller::start_with(&install, 200, Some(port), &mqtt).await;
    let api = Api::new(&controller.api_url(), &install.full_token());
    api.wait_online("edge-1", LIMIT).await;
    finished(&api, &passing_checks(&target), "passed").await;
    let all = feed_ids(&api, 5).await;
    // In order per account: once the fifth arrived, a repeat of the first four would have too.
    wait_arrived(&messages, &all).await;
    assert_eq!(
        arrivals(&messages, &all),
        vec![(1, true); 5],
        "each event id once, on iohr/default/TYPE"
    );
    let got = messages.lock().unwrap();
    let first = got
        .iter()
        .find(|(_, p)| p["id"] == all[0].0.as_str())
        .unwrap();
    assert_eq!(first.1["seq"], 1);
    assert_eq!(
        first.1["data"].as_object().unwrap().len(),
        3,
        "ids only: {}",
        first.1
    );
}

/// The broker unreachable at first, then reachable through a proxy that cuts the
/// connection: the publisher publishes what it missed, reconnects, and goes on.
async fn mqtt_publishes_what_it_missed_while_the_broker_was_away(backend: Backend) {
    let messages = mqtt_subscriber().await;
    // A free port with nothing behind it yet: connections to it are refused.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mqtt = format!("mqtt://{port}");
    let (_install, _controller, api, _agent) =
        stack(backend, &["--events-poll-ms", "50", "--mqtt-url", &mqtt]).await;
    let target = Target::start().await;
    finished(&api, &failing_checks(&target), "failed").await;
    let missed = feed_ids(&api, 3).await;
    assert_eq!(
        arrivals(&messages, &missed),
        vec![(0, true); 3],
        "no broker, nothing published"
    );

    let proxy = iohr_tests::CutProxy::start_on(port, "127.0.0.1:1883".parse().unwrap()).await;
    wait_arrived(&messages, &missed).await;
    proxy.cut();
    finished(&api, &passing_checks(&target), "passed").await;
    let all = feed_ids(&api, 4).await;
    wait_arrived(&messages, &all).await;
    assert!(
        proxy.connections() >= 2,
        "the publisher reconnected after the cut"
    );
    assert_eq!(
        arrivals(&messages, &all),
        vec![(1, true); 4],
        "each event id once"
    );
}
on_both_stores!(
    mqtt_gets_every_event_once_across_restarts,
    mqtt_publishes_what_it_missed_while_the_broker_was_away,
);
