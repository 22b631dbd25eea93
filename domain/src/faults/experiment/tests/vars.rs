//! `configuration` and `secrets`: substituted where the Chaos Toolkit substitutes them,
//! literal values as the experiment is read, `env` values on the agent.

use std::collections::BTreeMap;

use serde_json::json;

use super::super::*;

fn experiment() -> Value {
    json!({
        "title": "t", "description": "d",
        "configuration": {
            "base_url": "http://127.0.0.1:8080",
            "health": {"type": "env", "key": "HEALTH_PATH", "default": "/health"},
            "port": {"type": "env", "key": "PORT", "env_var_type": "int"},
            "wait": {"type": "env", "key": "WAIT_S", "env_var_type": "float"}
        },
        "secrets": {"auth": {"token": {"type": "env", "key": "API_TOKEN"}}},
        "steady-state-hypothesis": {"title": "up", "probes": [
            {"type": "probe", "name": "home", "tolerance": 200,
             "provider": {"type": "http", "url": "${base_url}/"}},
            {"type": "probe", "name": "health", "tolerance": 200,
             "provider": {"type": "http", "url": "${base_url}${health}",
                          "headers": {"Authorization": "Bearer ${token}"}, "timeout": "${wait}"}}
        ]},
        "method": [],
        "rollbacks": []
    })
}

fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: BTreeMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |name| map.get(name).cloned()
}

#[test]
fn literal_configuration_is_substituted_as_the_experiment_is_read() {
    let e = Experiment::from_json(&experiment()).unwrap();
    let probes = &e.hypothesis.as_ref().unwrap().probes;
    match &probes[0].provider {
        Provider::Http(h) => assert_eq!(
            h.location,
            HttpLocation::Url("http://127.0.0.1:8080/".into())
        ),
        other => panic!("{other:?}"),
    }
    // Names an env value and a secret: kept as written, with the literal substituted.
    match &probes[1].provider {
        Provider::Deferred(raw) => assert_eq!(raw["url"], "${base_url}${health}"),
        other => panic!("{other:?}"),
    }
    assert!(e.has_deferred());
    // Stored as written: declarations, never values; read back the same.
    let stored = e.to_json();
    assert_eq!(
        stored["secrets"],
        json!({"auth": {"token": {"type": "env", "key": "API_TOKEN"}}})
    );
    assert_eq!(
        stored["configuration"]["port"],
        json!({"type": "env", "key": "PORT", "env_var_type": "int"})
    );
    assert_eq!(Experiment::from_json(&stored).unwrap(), e);
    // The target rule, at once for literal values.
    e.check_target("http://127.0.0.1:8080").unwrap();
    let err = e.check_target("http://127.0.0.1:9999").unwrap_err();
    assert_eq!(err.field, "steady-state-hypothesis.probes[0].provider.url");
}

#[test]
fn the_agent_resolves_env_values_and_secrets_and_masks_the_secrets() {
    let e = Experiment::from_json(&experiment()).unwrap();
    let r = e
        .resolve(
            &env(&[("API_TOKEN", "s3cr3t"), ("PORT", "8080"), ("WAIT_S", "2.5")]),
            "http://127.0.0.1:8080",
        )
        .unwrap();
    assert!(!r.experiment.has_deferred());
    match &r.experiment.hypothesis.as_ref().unwrap().probes[1].provider {
        Provider::Http(h) => {
            assert_eq!(
                h.location,
                HttpLocation::Url("http://127.0.0.1:8080/health".into())
            );
            assert_eq!(h.headers["Authorization"], "Bearer s3cr3t");
            // `"${wait}"` is the whole string: the float itself.
            assert_eq!(h.timeout, Duration::from_millis(2500));
        }
        other => panic!("{other:?}"),
    }
    let mut written = json!({"a": ["Bearer s3cr3t", 1], "b": "s3cr3t-s3cr3t"});
    r.mask.mask(&mut written);
    assert_eq!(written, json!({"a": ["Bearer ***", 1], "b": "***-***"}));
}

#[test]
fn the_agent_refuses_what_its_environment_cannot_complete() {
    let e = Experiment::from_json(&experiment()).unwrap();
    let cases = [
        (
            env(&[("PORT", "1"), ("WAIT_S", "1")]),
            "secrets.auth.token",
            "API_TOKEN",
        ),
        (
            env(&[("API_TOKEN", "x"), ("WAIT_S", "1")]),
            "configuration.port",
            "PORT",
        ),
        (
            env(&[("API_TOKEN", "x"), ("PORT", "eighty"), ("WAIT_S", "1")]),
            "configuration.port",
            "int",
        ),
    ];
    for (vars, field, says) in cases {
        let err = e.resolve(&vars, "http://127.0.0.1:8080").unwrap_err();
        assert_eq!(err.field, field);
        assert!(err.message.contains(says), "{}", err.message);
    }
    // An env value that moves a URL off the target: refused, the secret never quoted.
    let mut v = experiment();
    v["configuration"]["base_url"] = json!({"type": "env", "key": "BASE"});
    v["steady-state-hypothesis"]["probes"][1]["provider"]["url"] = json!("${base_url}/?t=${token}");
    let e = Experiment::from_json(&v).unwrap();
    let err = e
        .resolve(
            &env(&[
                ("API_TOKEN", "s3cr3t"),
                ("PORT", "1"),
                ("WAIT_S", "1"),
                ("BASE", "http://127.0.0.2:8080"),
            ]),
            "http://127.0.0.1:8080",
        )
        .unwrap_err();
    assert!(err.field.ends_with("provider.url"), "{}", err.field);
    assert!(
        !err.message.contains("s3cr3t") && err.message.contains("***"),
        "{}",
        err.message
    );
}

#[test]
fn a_configuration_key_shadows_a_secret_of_the_same_name() {
    let mut v = experiment();
    v["configuration"]["token"] = json!("public");
    let e = Experiment::from_json(&v).unwrap();
    let r = e
        .resolve(
            &env(&[("API_TOKEN", "s3cr3t"), ("PORT", "1"), ("WAIT_S", "1")]),
            "http://127.0.0.1:8080",
        )
        .unwrap();
    match &r.experiment.hypothesis.as_ref().unwrap().probes[1].provider {
        Provider::Http(h) => assert_eq!(h.headers["Authorization"], "Bearer public"),
        other => panic!("{other:?}"),
    }
}

mod properties {
    use proptest::prelude::*;

    use super::*;

    fn template() -> impl Strategy<Value = String> {
        "(\\$|\\{|\\}|base_url|token|port|x|/|:|-| ){0,16}"
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 256,
            rng_seed: proptest::test_runner::RngSeed::Fixed(15),
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        /// Any `${...}` text in a provider, any env value: reading, storing, reading back
        /// and resolving never panic, a stored spec never holds the secret, and whatever
        /// resolves is on the target.
        #[test]
        fn reading_and_resolving_never_panic(
            url in template(),
            header in template(),
            port in prop_oneof![Just("8080".to_string()), "[0-9a-z.]{0,6}"],
        ) {
            let mut v = experiment();
            v["steady-state-hypothesis"]["probes"][0]["provider"]["url"] = json!(format!("http://127.0.0.1:8080{url}"));
            v["steady-state-hypothesis"]["probes"][1]["provider"]["headers"] = json!({"X-Key": header});
            let Ok(e) = Experiment::from_json(&v) else { return Ok(()) };
            let stored = e.to_json();
            prop_assert!(!stored.to_string().contains("s3cr3t"));
            let _ = Experiment::from_json(&stored);
            let values = [("API_TOKEN", "s3cr3t"), ("PORT", port.as_str()), ("WAIT_S", "1")];
            let vars = env(&values);
            if let Ok(r) = e.resolve(&vars, "http://127.0.0.1:8080") {
                prop_assert!(!r.experiment.has_deferred());
                prop_assert!(r.experiment.check_target("http://127.0.0.1:8080").is_ok());
            }
        }
    }
}
