//! The experiment's configuration and secrets in a lifecycle: resolved from the agent's
//! environment before anything runs, never written.

use super::*;

fn with_secret(secret_key: &str) -> Experiment {
    Experiment::from_json(&json!({
        "title": "t", "description": "d",
        "configuration": {"base": "/p", "name": {"type": "env", "key": "UNSET_NAME", "default": "x"}},
        "secrets": {"auth": {"token": {"type": "env", "key": secret_key}}},
        "steady-state-hypothesis": {"title": "up", "probes": [
            {"type": "probe", "name": "keyed", "tolerance": 200,
             "provider": {"type": "http", "path": "${base}/${name}/${token}",
                          "headers": {"Authorization": "Bearer ${token}"}}}
        ]},
        "method": [hog("one", 1, "30s")],
    }))
    .unwrap()
}

#[tokio::test(start_paused = true)]
async fn secrets_reach_the_probes_and_never_the_journal_or_the_timeline() {
    let h = Harness::new();
    let driver = Scripted::default();
    let e = with_secret("API_TOKEN");
    let j = h.run(&driver, &e, &policy(), false).await;
    assert_eq!(j.status, JournalStatus::Completed, "{:?}", j.reason);
    // The driver was given the values: the literal, the env default and the secret.
    assert_eq!(driver.log()[0], "probe /p/x/s3cr3t");
    let written = serde_json::to_string(&j).unwrap();
    assert!(!written.contains("s3cr3t"), "{written}");
    let probe = &j.steady_states.before.as_ref().unwrap().probes[0];
    assert_eq!(probe.activity["provider"]["path"], "/p/x/***");
    assert_eq!(
        probe.activity["provider"]["headers"]["Authorization"],
        "Bearer ***"
    );
    // The journal embeds the experiment as given: declarations, no values.
    assert_eq!(
        j.experiment["secrets"]["auth"]["token"],
        json!({"type": "env", "key": "API_TOKEN"})
    );
    assert_eq!(
        j.experiment["steady-state-hypothesis"]["probes"][0]["provider"]["path"],
        "${base}/${name}/${token}"
    );
    assert!(j.chaoslib_version.starts_with("iohr-agent "));
    let steps = format!("{:?}", h.frames.lock().unwrap());
    assert!(!steps.contains("s3cr3t"), "{steps}");
}

#[tokio::test(start_paused = true)]
async fn a_secret_the_agent_does_not_have_refuses_the_run_before_anything_runs() {
    let h = Harness::new();
    let driver = Scripted::default();
    let j = h
        .run(&driver, &with_secret("NOT_SET_HERE"), &policy(), false)
        .await;
    assert_eq!(j.status, JournalStatus::Refused);
    let reason = j.reason.unwrap();
    assert!(
        reason.contains("secrets.auth.token") && reason.contains("NOT_SET_HERE"),
        "{reason}"
    );
    assert!(driver.log().is_empty(), "{:?}", driver.log());
    assert!(j.ledger.is_empty());
}
