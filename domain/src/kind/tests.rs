use serde_json::json;

use super::*;

/// The kind a visit reaches, to check the registry against each kind's `KIND`.
struct KindOf;
impl KindVisitor for KindOf {
    type Output = RunKind;
    fn visit<K: Kind>(self) -> RunKind {
        K::KIND
    }
}

#[test]
fn the_registry_sends_each_kind_to_its_own_contract() {
    for kind in RunKind::ALL {
        assert_eq!(visit(kind, KindOf), kind);
    }
}

#[test]
fn all_lists_every_kind_once_and_its_word_is_serdes() {
    let mut words: Vec<&str> = RunKind::ALL.iter().map(|k| k.as_str()).collect();
    words.sort_unstable();
    words.dedup();
    assert_eq!(words.len(), RunKind::ALL.len());
    for kind in RunKind::ALL {
        assert_eq!(serde_json::to_value(kind).unwrap(), json!(kind.as_str()));
        assert_eq!(kind.as_str().parse::<RunKind>(), Ok(kind));
    }
}

#[test]
fn what_each_kind_may_do() {
    let table: Vec<(RunKind, bool, bool, bool, bool)> = RunKind::ALL
        .iter()
        .map(|k| {
            let t = k.traits();
            (
                *k,
                t.exclusive,
                t.https,
                t.confirmed_in_production,
                t.compared,
            )
        })
        .collect();
    assert_eq!(
        table,
        vec![
            (RunKind::Checks, false, false, false, true),
            (RunKind::Load, true, true, false, true),
            (RunKind::Scenario, false, false, false, true),
            (RunKind::Faults, true, false, true, true),
            (RunKind::Capacity, true, true, false, true),
            (RunKind::Replay, true, true, false, true),
        ]
    );
}

#[test]
fn a_spec_costs_what_its_kind_says() {
    let checks = json!({"checks": [{"path": "/a"}, {"path": "/b"}]});
    let cost = super::cost(RunKind::Checks, &checks, None).unwrap();
    assert_eq!(cost, RunCost::unbounded(2));

    let load = json!({
        "model": "open", "rate": 10, "duration": "2s",
        "operations": [{"name": "home", "path": "/"}]
    });
    let cost = super::cost(RunKind::Load, &load, None).unwrap();
    assert_eq!(cost.units, 20);
    assert_eq!(
        cost.length,
        Some((std::time::Duration::from_secs(2), "spec.duration"))
    );
}

#[test]
fn a_spec_of_another_kind_is_refused_naming_the_field() {
    let checks = json!({"checks": [{"path": "/a"}]});
    let refused = super::cost(RunKind::Load, &checks, None).unwrap_err();
    assert!(refused.field.starts_with("spec"), "{refused:?}");
}

#[test]
fn a_faults_probe_off_the_target_is_refused_only_when_a_target_is_given() {
    let experiment = json!({
        "title": "home survives latency",
        "description": "latency through the fault proxy",
        "steady-state-hypothesis": {"title": "up", "probes": [{
            "type": "probe", "name": "home", "tolerance": 200,
            "provider": {"type": "http", "url": "http://127.0.0.1:8080/"}
        }]},
        "method": [{"type": "action", "name": "slow-down",
            "provider": {"type": "iohr", "fault": "network",
                         "toxic": {"type": "latency", "latency_ms": 100}, "duration": "30s"}}]
    });
    assert!(super::cost(RunKind::Faults, &experiment, None).is_ok());
    assert!(super::cost(RunKind::Faults, &experiment, Some("http://127.0.0.1:8080")).is_ok());
    let refused =
        super::cost(RunKind::Faults, &experiment, Some("http://127.0.0.1:9")).unwrap_err();
    assert_eq!(
        refused.field,
        "steady-state-hypothesis.probes[0].provider.url"
    );
}

/// `"agents": N` at POST: load, replay and capacity split while every share keeps a
/// connection; the other kinds run on one agent; a refusal names its field.
#[test]
fn a_run_splits_over_agents_only_where_its_kind_and_connections_allow() {
    let load = json!({"operations": [{"path": "/"}], "model": "open", "rate": 30,
        "duration": "1s", "connections": 4});
    let replay = json!({"requests": [{"offset_ms": 0, "method": "GET", "path": "/"}]});
    let capacity = json!({"operations": [{"path": "/"}], "rates": [10], "step": "2s",
        "slo": {"p99": "100ms"}, "connections": 2});
    let checks = json!({"checks": [{"name": "home", "path": "/"}]});
    for (kind, spec, most) in [
        (RunKind::Load, &load, 4),
        (RunKind::Replay, &replay, 64),
        (RunKind::Capacity, &capacity, 2),
    ] {
        for n in 1..=most {
            assert_eq!(check_split(kind, spec, n), Ok(()), "{kind} over {n}");
        }
        let field = if most == 64 {
            "agents"
        } else {
            "spec.connections"
        };
        assert_eq!(
            check_split(kind, spec, most + 1)
                .expect_err("one too many")
                .field,
            field
        );
    }
    assert_eq!(check_split(RunKind::Checks, &checks, 1), Ok(()));
    let err = check_split(RunKind::Checks, &checks, 2).expect_err("checks");
    assert_eq!(err.field, "agents");
    assert_eq!(
        check_split(RunKind::Load, &load, 0)
            .expect_err("none")
            .field,
        "agents"
    );
    assert_eq!(
        check_split(RunKind::Load, &json!({}), 2)
            .expect_err("no spec")
            .field,
        "spec"
    );
}

/// What the surfaces decide by the kind: the schedule floor, the stress sampler, the
/// halt and the run page's live view, one row per kind.
#[test]
fn what_each_surface_decides_by_the_kind() {
    use std::time::Duration;
    let table: Vec<(RunKind, Duration, bool, bool, LiveView)> = RunKind::ALL
        .iter()
        .map(|k| {
            (
                *k,
                k.schedule_floor(),
                k.stress_sampled(),
                k.halted(),
                k.live_view(),
            )
        })
        .collect();
    let minute = Duration::from_secs(60);
    let hour = Duration::from_secs(3600);
    assert_eq!(
        table,
        vec![
            (RunKind::Checks, minute, false, false, LiveView::Nothing),
            (RunKind::Load, hour, true, false, LiveView::Seconds),
            (RunKind::Scenario, minute, true, false, LiveView::Nothing),
            (RunKind::Faults, hour, true, true, LiveView::Timeline),
            (RunKind::Capacity, hour, true, false, LiveView::Seconds),
            (RunKind::Replay, hour, true, false, LiveView::Seconds),
        ]
    );
}

/// The CLI's progress bar: a load spec's `duration` or the sum of its `stages`, read
/// from the JSON as sent; no other kind has a measured length to show.
#[test]
fn only_a_load_spec_says_its_measured_seconds() {
    let spec = json!({"duration": "1m"});
    assert_eq!(RunKind::Load.measured_seconds(&spec), Some(60));
    let staged = json!({"stages": [{"duration": "10s", "target": 5},
        {"duration": "20s", "target": 0}]});
    assert_eq!(RunKind::Load.measured_seconds(&staged), Some(30));
    assert_eq!(RunKind::Load.measured_seconds(&json!({"stages": []})), None);
    let bad = json!({"stages": [{"duration": "soon"}]});
    assert_eq!(RunKind::Load.measured_seconds(&bad), None);
    for kind in RunKind::ALL.into_iter().filter(|k| *k != RunKind::Load) {
        assert_eq!(kind.measured_seconds(&spec), None, "{kind}");
    }
}

#[test]
fn help_texts_list_every_kind_in_the_registry_order() {
    assert_eq!(
        RunKind::listed("or"),
        "checks, load, scenario, faults, capacity or replay"
    );
    assert_eq!(super::decisions::listed(["a"], "and"), "a");
    assert_eq!(super::decisions::listed([], "and"), "");
}

#[test]
fn what_the_controller_does_with_a_split_run_or_an_error_ending_is_each_kinds() {
    let merging: Vec<_> = RunKind::ALL
        .into_iter()
        .filter(|k| merges_seconds(*k))
        .collect();
    assert_eq!(merging, [RunKind::Load, RunKind::Replay]);
    let judging: Vec<_> = RunKind::ALL
        .into_iter()
        .filter(|k| judges_steps(*k))
        .collect();
    assert_eq!(judging, [RunKind::Capacity]);
    let finding: Vec<_> = RunKind::ALL
        .into_iter()
        .filter(|k| finds_on_error(*k))
        .collect();
    assert_eq!(finding, [RunKind::Faults]);
}

/// The kinds a run splits over agents are their traits' (`split`), and the refusal of any
/// other kind lists them from there, not by hand.
#[test]
fn the_kinds_that_split_are_their_traits_and_a_refusal_lists_them() {
    let split: Vec<RunKind> = RunKind::ALL
        .into_iter()
        .filter(|k| k.traits().split)
        .collect();
    assert_eq!(split, [RunKind::Load, RunKind::Capacity, RunKind::Replay]);
    assert_eq!(
        RunKind::listed_where(|t| t.split, "and"),
        "load, capacity and replay"
    );
    let checks = json!({"checks": [{"name": "home", "path": "/"}]});
    let refused = check_split(RunKind::Checks, &checks, 2).expect_err("checks");
    assert!(
        refused
            .to_string()
            .contains("only load, capacity and replay runs are split"),
        "{refused}"
    );
}

/// What a finished run's page and compare plot: the seconds and the latency distribution
/// of load-like results, a capacity run's sweep, a scenario's recorded requests per
/// operation, nothing for the others.
#[test]
fn each_kind_names_the_plot_of_its_result() {
    use super::ResultPlot;
    let table: Vec<(RunKind, ResultPlot)> =
        RunKind::ALL.iter().map(|k| (*k, k.result_plot())).collect();
    assert_eq!(
        table,
        vec![
            (RunKind::Checks, ResultPlot::Nothing),
            (RunKind::Load, ResultPlot::Seconds),
            (RunKind::Scenario, ResultPlot::Requests),
            (RunKind::Faults, ResultPlot::Nothing),
            (RunKind::Capacity, ResultPlot::Sweep),
            (RunKind::Replay, ResultPlot::Seconds),
        ]
    );
}
