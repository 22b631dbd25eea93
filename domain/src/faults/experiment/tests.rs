use serde_json::json;

use super::*;
use crate::faults::fault::{NetworkFault, Toxic};
use crate::request::SpecError;

/// A Chaos Toolkit experiment file that uses only providers iohr runs.
fn ctk_file() -> Value {
    json!({
        "version": "1.0.0",
        "title": "the home page survives 100 ms of latency",
        "description": "latency through the fault proxy",
        "tags": ["latency"],
        "contributions": {"availability": "high"},
        "steady-state-hypothesis": {
            "title": "home answers fast",
            "probes": [
                {"type": "probe", "name": "home-ok", "tolerance": 200,
                 "provider": {"type": "http", "url": "http://127.0.0.1:8080/", "timeout": [1, 2]}},
                {"type": "probe", "name": "home-fast",
                 "tolerance": {"type": "range", "range": [0, 50], "target": "latency_ms"},
                 "provider": {"type": "http", "path": "/"}}
            ]
        },
        "method": [
            {"type": "action", "name": "slow-down",
             "provider": {"type": "iohr", "fault": "network",
                          "toxic": {"type": "latency", "latency_ms": 100}, "duration": "30s"},
             "pauses": {"after": 1}},
            {"type": "probe", "name": "burst",
             "provider": {"type": "iohr", "probe": "load", "rate": 20, "duration": "2s", "path": "/"}}
        ],
        "rollbacks": [
            {"type": "action", "name": "reset-cache",
             "provider": {"type": "http", "path": "/reset", "method": "POST"}}
        ]
    })
}

#[test]
fn a_chaos_toolkit_file_with_our_providers_is_read() {
    let e = Experiment::from_json(&ctk_file()).unwrap();
    assert_eq!(e.title, "the home page survives 100 ms of latency");
    let h = e.hypothesis.as_ref().unwrap();
    assert_eq!(h.probes.len(), 2);
    match &h.probes[0].provider {
        Provider::Http(p) => {
            assert_eq!(
                p.location,
                HttpLocation::Url("http://127.0.0.1:8080/".into())
            );
            assert_eq!(p.timeout, Duration::from_secs(3));
            assert_eq!(p.method, "GET");
        }
        other => panic!("{other:?}"),
    }
    let faults: Vec<_> = e.faults().collect();
    assert_eq!(faults.len(), 1);
    assert_eq!(faults[0].0, "method[0]");
    assert_eq!(faults[0].1.duration, Duration::from_secs(30));
    assert_eq!(
        faults[0].1.fault,
        Fault::Network(NetworkFault {
            toxic: Toxic::Latency {
                latency_ms: 100,
                jitter_ms: 0
            },
            direction: Default::default(),
            toxicity: 1.0
        })
    );
    assert_eq!(e.method[0].pauses.after, Duration::from_secs(1));
    match &e.method[1].provider {
        Provider::Load(l) => {
            assert_eq!(l.rate, 20.0);
            assert_eq!(l.duration, Duration::from_secs(2));
            let plan = l.plan().unwrap();
            assert_eq!(plan.expected_requests(), Some(40));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(e.rollbacks.len(), 1);
}

#[test]
fn an_experiment_round_trips_through_its_json() {
    let e = Experiment::from_json(&ctk_file()).unwrap();
    let again = Experiment::from_json(&e.to_json()).unwrap();
    assert_eq!(again, e);
    let via_serde: Experiment = serde_json::from_value(serde_json::to_value(&e).unwrap()).unwrap();
    assert_eq!(via_serde, e);
}

#[test]
fn a_fault_action_defaults_and_caps_its_duration() {
    let mut v = ctk_file();
    v["method"][0]["provider"]
        .as_object_mut()
        .unwrap()
        .remove("duration");
    let e = Experiment::from_json(&v).unwrap();
    assert_eq!(
        e.faults().next().unwrap().1.duration,
        DEFAULT_FAULT_DURATION
    );
    v["method"][0]["provider"]["duration"] = json!("2h");
    let err = Experiment::from_json(&v).unwrap_err();
    assert_eq!(err.field, "method[0].provider.duration");
}

type Edit = Box<dyn FnOnce(&mut Value)>;

fn refused(edit: impl FnOnce(&mut Value)) -> SpecError {
    let mut v = ctk_file();
    edit(&mut v);
    Experiment::from_json(&v).unwrap_err()
}

#[test]
fn what_iohr_cannot_run_is_refused_with_the_field_named() {
    let cases: Vec<(Edit, &str)> = vec![
        (
            Box::new(|v| {
                v["method"][1]["provider"] = json!({"type": "python", "module": "m", "func": "f"})
            }),
            "method[1].provider.type",
        ),
        (
            Box::new(|v| v["method"][0]["type"] = json!("probe")),
            "method[0].type",
        ),
        (
            Box::new(|v| v["rollbacks"][0] = v["method"][0].clone()),
            "rollbacks[0].provider",
        ),
        (
            Box::new(|v| {
                v["steady-state-hypothesis"]["probes"][1]
                    .as_object_mut()
                    .unwrap()
                    .remove("tolerance");
            }),
            "steady-state-hypothesis.probes[1].tolerance",
        ),
        (Box::new(|v| v["controls"] = json!([])), "controls"),
        (
            Box::new(|v| v["method"][0]["provider"]["toxic"]["latency_ms"] = json!("slow")),
            "method[0].provider",
        ),
        (
            Box::new(|v| v["method"][0]["provider"]["toxicity"] = json!(2.0)),
            "method[0].provider.toxicity",
        ),
        (
            Box::new(|v| v["method"][1]["provider"]["path"] = json!("http://elsewhere/")),
            "method[1].provider.path",
        ),
        (
            Box::new(|v| v["method"][1]["provider"]["duration"] = json!("10m")),
            "method[1].provider.duration",
        ),
        (
            Box::new(|v| {
                v["steady-state-hypothesis"]["probes"][1]["provider"]["headers"] =
                    json!({"Authorization": "Bearer abc"})
            }),
            "steady-state-hypothesis.probes[1].provider.headers.Authorization",
        ),
        (
            Box::new(|v| v["method"][0]["background"] = json!(true)),
            "method[0].background",
        ),
        (
            Box::new(|v| {
                v.as_object_mut().unwrap().remove("method");
            }),
            "method",
        ),
        (
            Box::new(|v| v["method"][0]["pauses"]["before"] = json!(-1)),
            "method[0].pauses.before",
        ),
        (
            Box::new(|v| v["secrets"] = json!({"auth": {"token": "literal"}})),
            "secrets.auth.token",
        ),
        (
            Box::new(|v| v["secrets"] = json!({"auth": {"token": {"type": "vault", "path": "p"}}})),
            "secrets.auth.token.type",
        ),
        (
            Box::new(|v| v["secrets"] = json!({"token": {"type": "env", "key": "T"}})),
            "secrets.token",
        ),
        (
            Box::new(|v| v["configuration"] = json!({"c": {"type": "probe", "provider": {}}})),
            "configuration.c.type",
        ),
        (
            Box::new(|v| v["configuration"] = json!({"c": {"type": "env"}})),
            "configuration.c.key",
        ),
        (
            Box::new(|v| {
                v["configuration"] =
                    json!({"c": {"type": "env", "key": "C", "env_var_type": "bytes"}})
            }),
            "configuration.c.env_var_type",
        ),
    ];
    for (edit, field) in cases {
        assert_eq!(refused(edit).field, field);
    }
}

#[test]
fn a_url_must_name_the_runs_target() {
    let e = Experiment::from_json(&ctk_file()).unwrap();
    e.check_target("http://127.0.0.1:8080").unwrap();
    e.check_target("http://127.0.0.1:8080/").unwrap();
    let err = e.check_target("http://127.0.0.1:9090").unwrap_err();
    assert_eq!(err.field, "steady-state-hypothesis.probes[0].provider.url");
    let url = |u: &str| HttpLocation::Url(u.into());
    assert_eq!(url("http://h:1").path_on("http://h:1").unwrap(), "/");
    assert_eq!(
        url("http://h:1?x=1").path_on("http://h:1").unwrap(),
        "/?x=1"
    );
    assert_eq!(url("http://h:1/a/b").path_on("http://h:1/a").unwrap(), "/b");
    assert!(url("http://h:10/").path_on("http://h:1").is_err());
    // The target is stored normalised; a url spelled otherwise is still on it.
    assert_eq!(
        url("HTTP://H:80/Health").path_on("http://h").unwrap(),
        "/Health"
    );
    assert!(url("http://h:8080/").path_on("http://h").is_err());
    assert_eq!(
        HttpLocation::Path("/p".into()).path_on("http://x").unwrap(),
        "/p"
    );
}

mod vars;
