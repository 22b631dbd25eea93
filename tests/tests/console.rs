//! The console in a real browser: Debian's Chromium, headless, driven by Playwright's
//! Python API (`tests/console/drive.py`, PyPI `playwright` pinned in
//! tests/requirements.txt, pointed at /usr/bin/chromium; tests/run installs both) against
//! a real controller, agent and sample target. An admin person signs in, watches a live
//! load run's plot grow and its status change in place, sees its plots once it ended
//! (seconds with the warm-up and threshold, latency distribution) and starts it again from
//! its page, opens finished runs (checks with findings, a capacity sweep's plot with its
//! SLO and knee, a faults run's timeline), compares two checks runs (the pickers narrowed
//! to the comparable runs), the two load runs on one plot and two faults runs, checks every page at a
//! phone's 420 px, closes a finding (a form without its CSRF token refused), filters the runs, visits the
//! scenarios, findings, schedules and agents pages and signs out; an API token cannot
//! sign in; a non-admin person is refused until `iohr-controller account open-console`,
//! then gets in, and is refused again at once after `close-console`. A screenshot of each
//! page goes to `target/console-screenshots/` for a person to look at.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use iohr_tests::process::AgentOptions;
use iohr_tests::python::run_script_asking;
use iohr_tests::setup::OneAgent;
use iohr_tests::{Api, Backend, Controller, Installation, Target};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(60);

/// Where a test's screenshots go: `console-screenshots/` (and `sub` in it) in the target
/// dir this test was built in, emptied of the last run's pictures first.
fn screenshots_dir(sub: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/debug/deps/NAME-HASH -> target
    let target = exe.ancestors().nth(3).expect("target dir");
    let dir = target.join("console-screenshots").join(sub);
    std::fs::create_dir_all(&dir).expect("screenshots dir");
    for entry in std::fs::read_dir(&dir).expect("screenshots dir") {
        let path = entry.expect("an entry").path();
        if path.extension().is_some_and(|e| e == "png") {
            std::fs::remove_file(&path).expect("remove an old screenshot");
        }
    }
    dir
}

async fn finished(api: &Api, body: &Value, status: &str) -> String {
    let run = api.create_run(body).await;
    let id = run["id"].as_str().expect("id").to_string();
    let done = api
        .wait_status(&id, &["passed", "failed", "error"], LIMIT)
        .await;
    assert_eq!(done["status"], status, "{done}");
    id
}

fn strings(value: &Value) -> BTreeSet<String> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("a list: {value}"))
        .iter()
        .map(|v| v.as_str().expect("a string").to_string())
        .collect()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// Per-operation plots as the driver counted them (`[[name, marks], ...]`): one per
/// operation in order, each with every run's requests/s, p50 and p99 drawn (at least two
/// points each), each run's warm-up shaded and the given thresholds.
fn assert_operation_plots(plots: &Value, names: &[&str], runs: &[&str], thresholds: &Value) {
    let plots = plots
        .as_array()
        .unwrap_or_else(|| panic!("operation plots: {plots}"));
    let found: Vec<&str> = plots.iter().map(|p| p[0].as_str().unwrap()).collect();
    assert_eq!(found, names, "{plots:?}");
    for plot in plots {
        let (name, marks) = (&plot[0], &plot[1]);
        for run in runs {
            let series = marks["series"][run]
                .as_array()
                .unwrap_or_else(|| panic!("{name} {run}: {marks}"));
            let drawn: Vec<&str> = series
                .iter()
                .filter(|s| s[1].as_u64().unwrap() >= 2 && s[2] == true)
                .map(|s| s[0].as_str().unwrap())
                .collect();
            assert_eq!(
                drawn,
                ["requests/s", "p50 ms", "p99 ms"],
                "{name} {run}: {marks}"
            );
        }
        let warmups: Vec<Value> = runs.iter().map(|run| json!([run, true])).collect();
        assert_eq!(marks["warmup"], json!(warmups), "{name}: {marks}");
        assert_eq!(&marks["thresholds"], thresholds, "{name}: {marks}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn people_use_the_console_in_a_real_browser() {
    let install = Installation::new(Backend::Sqlite).await;
    let alice = install.token(
        "default",
        &["reliability:read", "reliability:run", "reliability:admin"],
        Some("alice"),
    );
    let bob = install.token(
        "default",
        &["reliability:read", "reliability:run"],
        Some("bob"),
    );
    // The agent may inject faults in front of this target only (its policy file).
    let faults_target = Target::start().await;
    let policy = install.path("faults-policy.json");
    std::fs::write(
        &policy,
        json!({"target_ports": [faults_target.addr.port()]}).to_string(),
    )
    .expect("policy");
    let policy = policy.display().to_string();
    let options = AgentOptions {
        extra: &["--policy", &policy],
        ..AgentOptions::default()
    };
    let stack = OneAgent::start_in(install, options).await;
    let api_token = stack.install.full_token();
    let as_alice = stack.api.with_token(Some(&alice));

    // Two checks runs of one scenario, the second against a broken target: compare says
    // regressed, and the failing check is a finding.
    let target = Target::start().await;
    let addr = target.addr.to_string();
    let checks = json!({"kind": "checks", "environment": "staging", "target": target.url(),
        "scenario_name": "smoke", "change": "console#17",
        "spec": {"checks": [{"name": "home", "path": "/"}], "invariants": [{"rule": "no_5xx"}]}});
    let good = finished(&as_alice, &checks, "passed").await;
    target.stop().await;
    let broken = Target::start_at(&addr, &["--error-percent", "100"]).await;
    let bad = finished(&as_alice, &checks, "failed").await;
    let record = as_alice.run(&bad).await;
    let findings = strings(&json!(
        record["findings"]
            .as_array()
            .expect("findings")
            .iter()
            .map(|f| f["id"].clone())
            .collect::<Vec<_>>()
    ));
    assert!(
        !findings.is_empty(),
        "the failing run made findings: {record}"
    );
    broken.stop().await;

    // A finished capacity sweep of three steps, for its plot of latency against rate.
    // Low rates and a loose SLO, so that a busy machine still runs all three steps.
    let sweep_target = Target::start_with(&["--service-ms", "20", "--workers", "5"]).await;
    let capacity = finished(
        &as_alice,
        &json!({"kind": "capacity", "environment": "staging", "target": sweep_target.url(),
            "spec": {"operations": [{"path": "/"}], "rates": [20, 40, 60], "step": "1s",
                     "discard": "250ms", "bisect": 0, "floor": 10,
                     "slo": {"p99": "2s", "error_rate": "5%"}}}),
        "passed",
    )
    .await;
    sweep_target.stop().await;

    // A finished faults run (the example: 100 ms of latency, so it deviates), for its
    // timeline.
    let experiment: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../examples/faults.json"
        ))
        .expect("examples/faults.json"),
    )
    .expect("the example is JSON");
    let faults_run = json!({"kind": "faults", "environment": "staging",
        "target": faults_target.url(), "spec": experiment});
    let faults = finished(&as_alice, &faults_run, "failed").await;
    // A second run of the same experiment and target, to compare with the first.
    let faults_after = finished(&as_alice, &faults_run, "failed").await;

    // Two finished scenario runs of one version, of two operations that take a few seconds
    // each, for each operation's plot of its seconds, alone and compared.
    let paced = Target::start_with(&["--service-ms", "100"]).await;
    let scenario = json!({"kind": "scenario", "environment": "staging", "target": paced.url(),
        "spec": {"slug": "two-ops", "warmup": 2, "ops": ["GET / 25", "GET /health 25"]}});
    let scenario_before = finished(&as_alice, &scenario, "passed").await;
    let scenario_after = finished(&as_alice, &scenario, "passed").await;
    paced.stop().await;

    // A schedule to pause and resume; it fires at 03:00 UTC, not during the test.
    let live_target = Target::start().await;
    let (status, schedule) = as_alice
        .post(
            "/v1/reliability/schedules",
            &json!({"name": "nightly", "cron": "0 3 * * *", "kind": "checks",
                "environment": "staging", "target": live_target.url(),
                "spec": {"checks": [{"name": "home", "path": "/"}]}}),
        )
        .await;
    assert_eq!(status, 201, "{schedule}");
    let schedule = schedule["id"].as_str().expect("schedule id").to_string();

    // The load run starts when the browser asks, so its whole life is seen live.
    let load_body = json!({"kind": "load", "environment": "staging", "target": live_target.url(),
        "scenario_name": "steady", "change": "console#17",
        "spec": {"operations": [{"name": "home", "path": "/"}, {"name": "again", "path": "/"}],
                 "model": "open", "rate": 40,
                 "duration": "15s", "warmup": "1s", "connections": 4,
                 "thresholds": ["p99 < 2s"]}});

    let config = json!({
        "url": stack.controller.api_url(),
        "screenshots": screenshots_dir("").display().to_string(),
        "alice": alice,
        "bob": bob,
        "api_token": api_token,
        "good": good,
        "bad": bad,
        "capacity": capacity,
        "faults": faults,
        "faults_after": faults_after,
        "scenario_before": scenario_before,
        "scenario_after": scenario_after,
        "finding": findings.iter().next().expect("a finding"),
        "schedule": schedule,
        "agent": "edge-1",
    });
    let started = std::time::Instant::now();
    let mut load_id = None;
    let seen = run_script_asking(
        "console/drive.py",
        &config,
        Duration::from_secs(300),
        async |ask: &Value| match ask["ask"].as_str() {
            Some("start_load") => {
                let run = as_alice.create_run(&load_body).await;
                let id = run["id"].as_str().expect("id").to_string();
                as_alice.wait_status(&id, &["running"], LIMIT).await;
                load_id = Some(id.clone());
                json!({"id": id})
            }
            Some(what @ ("open_console" | "close_console")) => {
                let command = what.replace('_', "-");
                let out = stack.install.ctl2("account", &[&command, "default"]);
                json!({"out": out})
            }
            other => panic!("the driver asked for {other:?}: {ask}"),
        },
    )
    .await;
    eprintln!("the browser part took {:?}", started.elapsed());
    let load = load_id.expect("the driver started the load run");
    let again = seen["again"]["id"]
        .as_str()
        .expect("the run started again")
        .to_string();
    let every_run = set(&[
        &good,
        &bad,
        &capacity,
        &faults,
        &faults_after,
        &load,
        &again,
        &scenario_before,
        &scenario_after,
    ]);

    // Signed out, every page leads to the sign-in form, by a 303.
    assert_eq!(
        seen["signed_out"]["root"],
        json!([303, "/sign-in"]),
        "{seen}"
    );
    assert_eq!(
        seen["signed_out"]["runs"],
        json!([303, "/sign-in"]),
        "{seen}"
    );
    assert_eq!(seen["signed_out"]["token_input_type"], "password");

    // Sign-in: who is refused and why, by status and code.
    let refusals = &seen["refusals"];
    assert_eq!(refusals["unknown"], json!([401, "unauthorized"]), "{seen}");
    assert_eq!(
        refusals["api_token"],
        json!([401, "person_required"]),
        "{seen}"
    );
    assert_eq!(
        refusals["bob"],
        json!([403, "console_admin_only"]),
        "{seen}"
    );
    assert_eq!(seen["alice_signed_in"], json!([303, "/runs"]), "{seen}");

    // The session cookie: not readable by scripts, never sent cross-site; plain http here.
    let cookie = &seen["cookie"];
    assert_eq!(cookie["http_only"], true, "{seen}");
    assert_eq!(cookie["same_site"], "Strict", "{seen}");
    assert_eq!(cookie["secure"], false, "{seen}");
    assert_eq!(cookie["visible_to_script"], false, "{seen}");

    // Every page has its name and the same navigation.
    let pages = seen["pages"].as_object().expect("pages");
    for name in [
        "runs",
        "run",
        "compare",
        "scenarios",
        "findings",
        "schedules",
        "agents",
    ] {
        let page = &pages[name];
        assert_eq!(page["data_page"], name, "{seen}");
        assert_eq!(
            strings(&page["nav"]),
            set(&[
                "agents",
                "compare",
                "findings",
                "runs",
                "schedules",
                "scenarios"
            ]),
            "{name}: {seen}"
        );
        assert_eq!(page["sign_out"], true, "{name}: {seen}");
    }

    // The live load run: its plot grew second by second and its status turned to passed
    // on the open pages, without a reload.
    let live = &seen["live"];
    assert_eq!(live["id"], load);
    let samples: Vec<u64> = live["seconds"]
        .as_array()
        .expect("seconds")
        .iter()
        .map(|s| s.as_u64().expect("a count"))
        .collect();
    assert!(samples.len() >= 3, "{seen}");
    assert!(
        samples.windows(2).all(|w| w[0] < w[1]),
        "data-seconds grew at each sample: {samples:?}"
    );
    assert_eq!(live["run_status"], "passed", "{seen}");
    // Its spec's threshold is drawn on the live plot, and its warm-up second counted.
    assert_eq!(live["thresholds_drawn"], "1", "{seen}");
    let warmup: u64 = live["warmup_seconds"].as_str().unwrap().parse().unwrap();
    assert!(warmup >= 1, "{seen}");
    assert_eq!(live["run_page_reloaded"], false, "{seen}");
    assert!(
        live["result"]
            .as_str()
            .is_some_and(|r| r.contains("open model") && r.contains("achieved")),
        "the result shows once the run ended, without a reload: {seen}"
    );
    assert!(
        live["final_seconds"].as_u64().expect("final") >= 10,
        "a 15 s run draws most of its seconds: {seen}"
    );
    assert_eq!(live["row_status_before"], "running", "{seen}");
    assert!(
        live["row_status_after"]
            .as_str()
            .expect("after")
            .contains("passed"),
        "{seen}"
    );
    assert_eq!(live["runs_page_reloaded"], false, "{seen}");

    // The finished load run's page draws its seconds on the server (the live plot is
    // gone), with its warm-up shaded and its threshold; then it was started again from
    // its page: the same scenario version and target, by the person, with the change.
    let finished_load = &seen["again"];
    assert_eq!(finished_load["live_plot_after_end"], 0, "{seen}");
    let series = finished_load["seconds"]["series"]["run"]
        .as_array()
        .expect("series");
    assert_eq!(series.len(), 3, "{seen}");
    assert!(series.iter().all(|s| s[2] == true), "{seen}");
    assert_eq!(
        finished_load["seconds"]["warmup"],
        json!([["run", true]]),
        "{seen}"
    );
    assert_eq!(
        finished_load["seconds"]["thresholds"],
        json!(["p99 < 2s"]),
        "{seen}"
    );
    assert_eq!(
        finished_load["latency"]["thresholds"],
        json!(["p99 < 2s"]),
        "{seen}"
    );
    assert_eq!(
        finished_load["operations"],
        json!(["home", "again"]),
        "its two operations side by side: {seen}"
    );
    // Each operation's seconds on a plot of its own: its lines drawn, its warm-up shaded,
    // the run's threshold drawn.
    assert_operation_plots(
        &finished_load["operation_plots"],
        &["home", "again"],
        &["run"],
        &json!(["p99 < 2s"]),
    );
    let (first, second) = (as_alice.run(&load).await, as_alice.run(&again).await);
    assert_eq!(second["status"], "passed", "{second}");
    for field in ["kind", "scenario", "environment", "target", "executor"] {
        assert_eq!(first[field], second[field], "{field}");
    }
    assert_eq!(
        (
            &second["started_by"]["type"],
            &second["started_by"]["id"],
            &second["started_by"]["change"]
        ),
        (&json!("person"), &json!("alice"), &json!("console#17")),
        "{second}"
    );

    // A finished run: its record, who started it and for which change, its findings and
    // the command to start it again.
    let run = &seen["run"];
    assert_eq!(run["status"], "failed", "{seen}");
    let record_text = run["record"].as_str().expect("record");
    for part in [
        "checks",
        "smoke",
        "staging",
        "alice",
        "console#17",
        "edge-1",
    ] {
        assert!(record_text.contains(part), "{part} in {record_text}");
    }
    assert!(
        run["rerun"]
            .as_str()
            .expect("rerun")
            .contains("iohr reliability run"),
        "{seen}"
    );
    assert_eq!(strings(&run["findings"]), findings, "{seen}");

    // A finished capacity run: one point per step the sweep ran (all three, unless a busy
    // machine broke the SLO early), and its seconds replayed.
    let (_, record) = as_alice
        .get(&format!("/v1/reliability/runs/{capacity}"))
        .await;
    let steps = record["result"]["points"].as_array().expect("points").len();
    assert!(steps >= 2, "a sweep of at least two steps: {record}");
    let sweep = &seen["capacity"]["plot"];
    let measured = record["result"]["points"]
        .as_array()
        .expect("points")
        .iter()
        .filter(|p| !p["p99_us"].is_null())
        .count();
    assert_eq!(
        sweep["series"]["run"],
        json!([["p99 ms", measured, true]]),
        "one p99 line through every step with a p99, drawn: {seen}"
    );
    assert_eq!(sweep["slo"], 1, "the SLO's p99 is a line: {seen}");
    // The knee, when the sweep has one, is marked at its own rate (not a rounded one).
    let knees: Vec<f64> = sweep["knees"]
        .as_array()
        .expect("knees")
        .iter()
        .map(|k| k.as_str().unwrap().parse().unwrap())
        .collect();
    let knee: Vec<f64> = record["result"]["knee"]["rate"]
        .as_f64()
        .into_iter()
        .collect();
    assert_eq!(knees, knee, "{seen}");

    // A finished faults run: its timeline, one line per step, replayed.
    let steps = seen["timeline"].as_array().expect("timeline");
    let lines: Vec<&str> = steps.iter().map(|l| l.as_str().unwrap()).collect();
    assert!(
        lines.iter().any(|l| l.contains("applied"))
            && lines.iter().any(|l| l.contains("undone"))
            && lines.last().is_some_and(|l| l.starts_with("end failed")),
        "{lines:?}"
    );

    // Compare: the verdict, each difference, the markdown to paste.
    let compare = &seen["compare"];
    assert_eq!(compare["verdict"], "regressed", "{seen}");
    let differences: Vec<&str> = compare["differences"]
        .as_array()
        .expect("differences")
        .iter()
        .map(|d| d.as_str().expect("a line"))
        .collect();
    assert!(
        differences
            .iter()
            .any(|d| d.contains("check home: passed -> failed")),
        "{differences:?}"
    );
    let markdown = compare["markdown"].as_str().expect("markdown");
    assert!(
        markdown.contains("regressed") && markdown.contains("check home"),
        "{markdown}"
    );
    assert_eq!(
        compare["not_comparable"],
        json!([409, "not_comparable"]),
        "{seen}"
    );
    // The pickers: every finished run at first; once the after run is picked, only the
    // runs that compare with it.
    assert!(
        strings(&compare["before_options_at_first"]).is_superset(&every_run),
        "{seen}"
    );
    assert_eq!(
        strings(&compare["before_options_for_bad"]),
        set(&[&good]),
        "{seen}"
    );
    assert_eq!(
        strings(&compare["before_options_for_again"]),
        set(&[&load]),
        "{seen}"
    );
    assert_eq!(
        compare["checks_plots"], 0,
        "checks runs have nothing to plot: {seen}"
    );
    // Two load runs on one plot: each run's rate, p50 and p99, drawn, each warm-up
    // shaded, the threshold a line; and both latency distributions.
    assert!(compare["load_verdict"].is_string(), "{seen}");
    let plotted = &compare["load_seconds"];
    for run in ["before", "after"] {
        let series = plotted["series"][run].as_array().expect("series");
        let names: Vec<&str> = series.iter().map(|s| s[0].as_str().unwrap()).collect();
        assert_eq!(names, ["requests/s", "p50 ms", "p99 ms"], "{run}: {seen}");
        assert!(
            series
                .iter()
                .all(|s| s[1].as_u64().unwrap() >= 10 && s[2] == true),
            "{run}: every line has its seconds and is drawn: {seen}"
        );
        let curve = &compare["load_latency"]["series"][run];
        assert_eq!(curve, &json!([["latency", 81, true]]), "{run}: {seen}");
    }
    assert_eq!(
        plotted["warmup"],
        json!([["before", true], ["after", true]]),
        "{seen}"
    );
    assert_eq!(plotted["thresholds"], json!(["p99 < 2s"]), "{seen}");
    assert_operation_plots(
        &compare["load_operations"],
        &["home", "again"],
        &["before", "after"],
        &json!(["p99 < 2s"]),
    );

    // Scenario runs: each operation's seconds from the record's requests, on the run's
    // page and both runs on each operation's plot on the compare page, with a verdict.
    let scenario = &seen["scenario"];
    let ops = ["GET /", "GET /health"];
    assert_operation_plots(&scenario["run"], &ops, &["run"], &json!([]));
    assert_eq!(
        strings(&scenario["before_options"]),
        set(&[&scenario_before]),
        "{seen}"
    );
    assert!(
        ["regressed", "improved", "unchanged"].contains(&scenario["verdict"].as_str().unwrap()),
        "{seen}"
    );
    assert_operation_plots(&scenario["compare"], &ops, &["before", "after"], &json!([]));
    // Two faults runs of one experiment and target: the picker offers the first for the
    // second, and the compare page gives a verdict with its lines.
    let faults_compare = &seen["faults_compare"];
    assert_eq!(
        strings(&faults_compare["before_options"]),
        set(&[&faults]),
        "{seen}"
    );
    assert!(
        ["regressed", "improved", "unchanged"]
            .contains(&faults_compare["verdict"].as_str().unwrap()),
        "{seen}"
    );

    // Findings: a close without the CSRF token (or with a wrong one) is refused and
    // changes nothing; with it, the finding is closed.
    let finding = &seen["finding"];
    assert_eq!(
        finding["without_csrf"],
        json!([403, "csrf_mismatch"]),
        "{seen}"
    );
    assert_eq!(
        finding["wrong_csrf"],
        json!([403, "csrf_mismatch"]),
        "{seen}"
    );
    assert_eq!(finding["still_open"], true, "{seen}");
    assert_eq!(
        finding["closed_redirect"],
        json!([303, "/findings"]),
        "{seen}"
    );
    assert_eq!(finding["status_after"], "closed", "{seen}");
    let id = config["finding"].as_str().unwrap();
    let (status, stored) = stack
        .api
        .get(&format!("/v1/reliability/findings/{id}"))
        .await;
    assert_eq!(
        (status, &stored["status"]),
        (200, &json!("closed")),
        "{stored}"
    );

    // The runs filter.
    let filters = &seen["filters"];
    assert_eq!(strings(&filters["all"]), every_run, "{seen}");
    assert_eq!(
        strings(&filters["failed"]),
        set(&[&bad, &faults, &faults_after]),
        "{seen}"
    );
    assert_eq!(strings(&filters["load"]), set(&[&load, &again]), "{seen}");
    assert_eq!(strings(&filters["smoke"]), set(&[&good, &bad]), "{seen}");
    assert_eq!(strings(&filters["staging"]), every_run, "{seen}");
    assert_eq!(strings(&filters["production"]), set(&[]), "{seen}");

    // Scenarios, their versions and runs; schedules paused and resumed; the agent.
    let scenarios = &seen["scenarios"];
    assert!(scenarios["count"].as_u64().unwrap() >= 2, "{seen}");
    assert!(scenarios["versions"].as_u64().unwrap() >= 1, "{seen}");
    assert!(
        strings(&scenarios["runs"]).is_superset(&set(&[&good, &bad])),
        "{seen}"
    );
    // The scenario's trend: each run's verdict, oldest first; and its start form.
    assert_eq!(
        scenarios["trend"]["verdicts"],
        json!(["passed", "failed"]),
        "{seen}"
    );
    assert_eq!(scenarios["start_form"], 1, "{seen}");

    // At a phone's 420 px no page scrolls sideways (a wide table scrolls in its own box).
    let phone = seen["phone"].as_object().expect("phone");
    assert!(phone.len() >= 11, "{seen}");
    for (page, widths) in phone {
        let (scroll, client) = (widths[0].as_u64().unwrap(), widths[1].as_u64().unwrap());
        assert!(
            scroll <= client && client <= 420,
            "{page}: scrollWidth {scroll} > clientWidth {client}"
        );
    }

    assert_eq!(
        seen["schedules"]["enabled"],
        json!(["true", "false", "true"]),
        "{seen}"
    );
    let (_, stored) = stack
        .api
        .get(&format!("/v1/reliability/schedules/{schedule}"))
        .await;
    assert_eq!(stored["enabled"], true, "{stored}");
    assert_eq!(seen["agents"]["state"], "online", "{seen}");

    // Signing out ends the session on the server: its cookie no longer opens a page.
    assert_eq!(seen["signed_out_after"], "/sign-in", "{seen}");
    assert_eq!(seen["old_cookie_after_sign_out"], "/sign-in", "{seen}");

    // Bob, refused above, gets in once the console is opened.
    assert_eq!(seen["bob_after_open"], json!([303, "/runs"]), "{seen}");
    assert_eq!(strings(&seen["bob_runs"]), every_run);
    // Closed again, at once: his live session is refused on its next page.
    assert_eq!(
        seen["bob_after_close"],
        json!([403, "console_admin_only"]),
        "{seen}"
    );

    let shots = strings(&seen["screenshots"]);
    for shot in &shots {
        let path = PathBuf::from(config["screenshots"].as_str().unwrap()).join(shot);
        let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        assert!(size > 1000, "{} is a real picture", path.display());
    }
    assert!(shots.len() >= 10, "{shots:?}");
}

/// Over TLS (`serve --api-tls`) the session cookie is also `Secure`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_the_session_cookie_is_secure() {
    let install = Installation::new(Backend::Sqlite).await;
    let alice = install.token(
        "default",
        &["reliability:read", "reliability:admin"],
        Some("alice"),
    );
    let controller = Controller::start_with(&install, 200, None, &["--api-tls"]).await;
    assert!(controller.api_url().starts_with("https://"));
    let config = json!({
        "mode": "tls",
        "url": controller.api_url(),
        "screenshots": screenshots_dir("tls").display().to_string(),
        "alice": alice,
    });
    let seen = run_script_asking("console/drive.py", &config, LIMIT, async |ask: &Value| {
        panic!("nothing to ask over TLS: {ask}")
    })
    .await;
    assert_eq!(seen["signed_in"], json!([303, "/runs"]), "{seen}");
    let cookie = &seen["cookie"];
    assert_eq!(
        (
            &cookie["secure"],
            &cookie["http_only"],
            &cookie["same_site"]
        ),
        (&json!(true), &json!(true), &json!("Strict")),
        "{seen}"
    );
}
