//! What the deployment tests share (tests/tests/deploy.rs: the compose file and the
//! kustomize base; tests/tests/deploy_helm.rs: the Helm chart): reading and validating
//! YAML, the iohr invocations in a container's command and their check against the
//! binaries' `--help`, and the checks every rendering of the Kubernetes objects must pass.

// Two test files include this module and each uses part of it.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;

use iohr_tests::process::bin;
use iohr_tests::python::python;
use serde_json::Value;

/// The Kubernetes version the manifests are validated for (kubectl here is v1.32).
pub const KUBERNETES: &str = "1.32.0";
/// The workspace's binaries, as commands name them.
pub const BINARIES: [&str; 4] = [
    "iohr-controller",
    "iohr-agent",
    "iohr",
    "iohr-sample-target",
];
/// The image's non-root user (deploy/Dockerfile), which the manifests run as.
pub const IMAGE_UID: i64 = 10001;

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("read {path}: {e}"))
}

/// Runs a command, which must exit 0; its stdout.
pub fn run(command: &mut Command, what: &str) -> String {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("start {what}: {e}"));
    assert!(
        output.status.success(),
        "{what} failed ({}): {}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// Every document of a YAML text, as JSON (PyYAML's safe loader: merge keys resolved).
pub fn yaml_docs(text: &str) -> Vec<Value> {
    let mut command = Command::new(python());
    command.args([
        "-c",
        "import sys, json, yaml; print(json.dumps([d for d in yaml.safe_load_all(sys.argv[1]) if d is not None]))",
        text,
    ]);
    let out = run(&mut command, "PyYAML");
    match serde_json::from_str(&out).unwrap() {
        Value::Array(docs) => docs,
        other => panic!("PyYAML gave {other}"),
    }
}

pub fn kustomize() -> String {
    let mut command = Command::new("kubectl");
    command
        .args(["kustomize", "deploy/kubernetes"])
        .current_dir(repo());
    match command.output() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
            "kubectl is not installed: tests/run installs it (apt-get install kubectl, from \
             the Google Cloud apt repository), or install it yourself"
        ),
        _ => run(&mut command, "kubectl kustomize deploy/kubernetes"),
    }
}

/// kubernetes-validate, strict, for [`KUBERNETES`]: fails the test with its errors.
pub fn validate(name: &str, text: &str) {
    // The system's temporary dir, not the build's: the build dir may be another's to read only.
    // Numbered: several tests of one process validate at once.
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let file = std::env::temp_dir().join(format!("iohr-deploy-{}-{n}-{name}", std::process::id()));
    std::fs::write(&file, text).unwrap();
    let mut command = Command::new(python());
    command.args([
        "-m",
        "kubernetes_validate",
        "--strict",
        "--quiet",
        "--kubernetes-version",
    ]);
    command.arg(KUBERNETES).arg(&file);
    // The file goes whatever the verdict (nothing but its path is used after a panic).
    let what = format!(
        "kubernetes-validate {name} (pinned in tests/requirements.txt, which tests/run installs)"
    );
    let output =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&mut command, &what)));
    let _ = std::fs::remove_file(&file);
    if let Err(panic) = output {
        std::panic::resume_unwind(panic);
    }
}

// --- command lines ------------------------------------------------------------------

/// Words of a shell text, roughly as sh splits them: quotes kept together (and dropped),
/// `\` + newline joined, and a newline and `| ; & < > ( )` as words of their own, so
/// that one command ends where the next begins; a `$(...)` inside double quotes is split
/// as a command of its own. Enough for the scripts these files hold.
pub fn shell_words(text: &str) -> Vec<String> {
    fn flush(words: &mut Vec<String>, word: &mut String) {
        if !word.is_empty() {
            words.push(std::mem::take(word));
        }
    }
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quote: Option<char> = None;
    // The quoting to return to at each open parenthesis's `)`.
    let mut outer: Vec<Option<char>> = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some('"'), '$') if chars.peek() == Some(&'(') => {
                chars.next();
                flush(&mut words, &mut word);
                words.push("(".to_string());
                outer.push(quote);
                quote = None;
            }
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '"' | '\'') => quote = Some(c),
            (None, '\\') if chars.peek() == Some(&'\n') => {
                chars.next();
            }
            (None, c) if c.is_whitespace() && c != '\n' => flush(&mut words, &mut word),
            (None, '\n' | '|' | ';' | '&' | '<' | '>' | '(' | ')') => {
                flush(&mut words, &mut word);
                words.push(c.to_string());
                if c == '(' {
                    outer.push(None);
                } else if c == ')' {
                    quote = outer.pop().flatten();
                }
            }
            (None, c) => word.push(c),
        }
    }
    assert!(quote.is_none(), "unbalanced quotes in {text:?}");
    flush(&mut words, &mut word);
    words
}

/// One run of an iohr binary: its subcommand path and the long flags given to it, with
/// each flag's value (the next word) when it has one.
#[derive(Debug, Clone)]
pub struct Invocation {
    pub binary: String,
    pub sub: Vec<String>,
    pub flags: Vec<(String, Option<String>)>,
}

/// The iohr invocations in a container's argv (entrypoint then command): argv words that
/// are scripts (`bash -c '...'`) are split as the shell would.
pub fn invocations(argv: &[String]) -> Vec<Invocation> {
    // A script (`bash -c SCRIPT ARG0 ...`) ends where the next argument begins.
    let words: Vec<String> = argv
        .iter()
        .flat_map(|a| {
            let mut words = shell_words(a);
            if a.contains(char::is_whitespace) {
                words.push("\n".to_string());
            }
            words
        })
        .collect();
    let separator = |w: &str| ["\n", "|", ";", "&", "<", ">", "(", ")"].contains(&w);
    let mut found = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let name = words[i].rsplit('/').next().unwrap();
        if !BINARIES.contains(&name) {
            i += 1;
            continue;
        }
        let mut j = i + 1;
        let mut rest = Vec::new();
        while j < words.len() && !separator(&words[j]) {
            rest.push(words[j].clone());
            j += 1;
        }
        // Leading plain words name the subcommand; a `$...` word is not known here.
        let sub: Vec<String> = rest
            .iter()
            .take_while(|w| !w.starts_with('-') && !w.starts_with('$'))
            .cloned()
            .collect();
        let mut flags = Vec::new();
        for (k, w) in rest.iter().enumerate() {
            if let Some(flag) = w.strip_prefix("--") {
                let (flag, inline) = match flag.split_once('=') {
                    Some((f, v)) => (f.to_string(), Some(v.to_string())),
                    None => (flag.to_string(), None),
                };
                let next = rest.get(k + 1).filter(|n| !n.starts_with("--")).cloned();
                flags.push((format!("--{flag}"), inline.or(next)));
            }
        }
        found.push(Invocation {
            binary: name.to_string(),
            sub,
            flags,
        });
        i = j;
    }
    found
}

/// `BINARY SUB... --help` of this build exits 0 and lists every flag given.
pub fn check_against_help(where_: &str, inv: &Invocation) {
    let output = Command::new(bin(&inv.binary))
        .args(&inv.sub)
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{where_}: `{} {} --help` fails: is `{}` a subcommand? {}",
        inv.binary,
        inv.sub.join(" "),
        inv.sub.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
    for (flag, _) in &inv.flags {
        let listed = help.match_indices(flag.as_str()).any(|(at, _)| {
            let after = help[at + flag.len()..].chars().next();
            !matches!(after, Some(c) if c.is_alphanumeric() || c == '-' || c == '_')
        });
        assert!(
            listed,
            "{where_}: `{} {}` has no flag {flag} (its --help:\n{help})",
            inv.binary,
            inv.sub.join(" ")
        );
    }
}

pub fn strings(value: &Value) -> Vec<String> {
    match value {
        Value::Null => Vec::new(),
        Value::String(s) => vec![s.clone()],
        Value::Array(items) => items
            .iter()
            .map(|v| match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect(),
        other => panic!("expected a string or a list of strings, got {other}"),
    }
}

pub fn flag<'a>(inv: &'a Invocation, name: &str) -> Vec<&'a str> {
    inv.flags
        .iter()
        .filter(|(f, _)| f == name)
        .filter_map(|(_, v)| v.as_deref())
        .collect()
}

/// The items of a JSON list; none for anything else (an absent field).
pub fn items(value: &Value) -> impl Iterator<Item = &Value> {
    value.as_array().into_iter().flatten()
}

/// The port of `HOST:PORT`.
pub fn port_of(addr: &str) -> u16 {
    addr.rsplit_once(':').unwrap().1.parse().unwrap()
}

/// `https://HOST:PORT` -> (HOST, PORT).
pub fn host_port(url: &str) -> (String, u16) {
    let rest = url
        .strip_prefix("https://")
        .unwrap_or_else(|| panic!("{url} is not https://"));
    let (host, port) = rest.trim_end_matches('/').rsplit_once(':').unwrap();
    (host.to_string(), port.parse().unwrap())
}

// --- the image ---------------------------------------------------------------------------

/// What the image gives a command: its binaries, and the scripts the Dockerfile copies
/// into /usr/local/bin (each must exist in the repository).
pub fn image_commands(dockerfile: &str) -> BTreeSet<String> {
    let mut commands: BTreeSet<String> = BINARIES.iter().map(|b| b.to_string()).collect();
    for line in dockerfile.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.first() != Some(&"COPY") || line.contains("--from=") {
            continue;
        }
        let dest = words.last().unwrap();
        if let Some(name) = dest.strip_prefix("/usr/local/bin/") {
            let source = words[words.len() - 2];
            assert!(
                repo().join(source).is_file(),
                "deploy/Dockerfile copies {source}, which is not in the repository"
            );
            commands.insert(name.to_string());
        }
    }
    commands.insert("bash".into());
    commands.insert("sh".into());
    commands
}

// --- the Kubernetes objects -------------------------------------------------------------

/// The Secrets deploy/kubernetes/examples/secrets.yaml shows, with their keys.
pub fn example_secrets() -> BTreeMap<String, BTreeSet<String>> {
    yaml_docs(&read("deploy/kubernetes/examples/secrets.yaml"))
        .iter()
        .map(|s| {
            let keys = s["stringData"]
                .as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect();
            (s["metadata"]["name"].as_str().unwrap().to_string(), keys)
        })
        .collect()
}

/// Whether `labels` hold every pair of `selector` (an empty selector selects nothing here).
fn selects(selector: &Value, labels: &Value) -> bool {
    selector
        .as_object()
        .is_some_and(|s| !s.is_empty() && s.iter().all(|(k, v)| &labels[k] == v))
}

/// The checks every rendering of the Kubernetes objects passes (the kustomize base, the
/// Helm chart with any values), given the Secrets they may use (name -> keys): the
/// controllers and the agents, as non-root iohr containers whose volumes, Secrets,
/// probes and selectors hold together and whose commands are the binaries' (`--help`);
/// controller replicas on PostgreSQL, ready on /healthz, rolled without losing one and
/// under a disruption budget; agents that enroll with the token under their own key and
/// dial the agent link's Service. The iohr invocations found, each with its container.
pub fn check_kubernetes(
    what: &str,
    objects: &[Value],
    secrets: &BTreeMap<String, BTreeSet<String>>,
) -> Vec<(Value, Invocation)> {
    let kind = |k: &str| -> Vec<&Value> { objects.iter().filter(|o| o["kind"] == k).collect() };
    let services: BTreeMap<&str, &Value> = kind("Service")
        .into_iter()
        .map(|s| (s["metadata"]["name"].as_str().unwrap(), s))
        .collect();
    let image_commands = image_commands(&read("deploy/Dockerfile"));

    let mut all = Vec::new();
    let workloads: Vec<&Value> = kind("Deployment")
        .into_iter()
        .chain(kind("StatefulSet"))
        .chain(kind("DaemonSet"))
        .collect();
    assert_eq!(workloads.len(), 2, "{what}: the controllers and the agents");
    for workload in &workloads {
        let name = format!("{what}: {}", workload["metadata"]["name"].as_str().unwrap());
        let pod = &workload["spec"]["template"]["spec"];
        // The API server requires it; the schemas do not.
        assert!(
            selects(
                &workload["spec"]["selector"]["matchLabels"],
                &workload["spec"]["template"]["metadata"]["labels"]
            ),
            "{name}: its selector selects its own pods"
        );
        let security = &pod["securityContext"];
        assert_eq!(security["runAsNonRoot"], true, "{name}: runAsNonRoot");
        assert_eq!(security["runAsUser"], IMAGE_UID, "{name}: the image's user");
        let volumes: BTreeSet<&str> = items(&pod["volumes"])
            .map(|v| v["name"].as_str().unwrap())
            .chain(
                items(&workload["spec"]["volumeClaimTemplates"])
                    .map(|v| v["metadata"]["name"].as_str().unwrap()),
            )
            .collect();
        for volume in items(&pod["volumes"]) {
            if let Some(secret) = volume["secret"]["secretName"].as_str() {
                assert!(
                    secrets.contains_key(secret),
                    "{name}: Secret {secret} is not one of {:?}",
                    secrets.keys()
                );
            }
        }
        let containers = items(&pod["initContainers"]).chain(pod["containers"].as_array().unwrap());
        for container in containers {
            let cname = format!("{name}/{}", container["name"].as_str().unwrap());
            assert!(
                container["image"].as_str().unwrap().starts_with("iohr"),
                "{cname}: the iohr image"
            );
            for bound in ["requests", "limits"] {
                for resource in ["cpu", "memory"] {
                    assert!(
                        container["resources"][bound][resource].is_string(),
                        "{cname}: resources.{bound}.{resource}"
                    );
                }
            }
            let sc = &container["securityContext"];
            assert_eq!(sc["allowPrivilegeEscalation"], false, "{cname}");
            assert_eq!(sc["readOnlyRootFilesystem"], true, "{cname}");
            for mount in items(&container["volumeMounts"]) {
                let volume = mount["name"].as_str().unwrap();
                assert!(
                    volumes.contains(volume),
                    "{cname}: volume {volume} is not the pod's"
                );
            }
            for env in items(&container["env"]) {
                let key = &env["valueFrom"]["secretKeyRef"];
                if let Some(secret) = key["name"].as_str() {
                    let keys = secrets.get(secret).unwrap_or_else(|| {
                        panic!("{cname}: Secret {secret} is not one of {secrets:?}")
                    });
                    assert!(
                        keys.contains(key["key"].as_str().unwrap()),
                        "{cname}: {secret} has no such key"
                    );
                }
            }
            let ports: BTreeSet<&str> = items(&container["ports"])
                .map(|p| p["name"].as_str().unwrap())
                .collect();
            for probe in ["readinessProbe", "livenessProbe", "startupProbe"] {
                if let Some(port) = container[probe]["httpGet"]["port"].as_str() {
                    assert!(
                        ports.contains(port),
                        "{cname}: {probe} on port {port}, not the container's"
                    );
                }
            }
            let argv: Vec<String> = strings(&container["command"])
                .into_iter()
                .chain(strings(&container["args"]))
                .collect();
            assert!(
                image_commands.contains(&argv[0]),
                "{cname}: {} is not a command of the image",
                argv[0]
            );
            for inv in invocations(&argv) {
                check_against_help(&cname, &inv);
                if inv.binary == "iohr-agent" && inv.sub == ["enroll"] {
                    check_enrollment_key(&cname, workload, container, &inv, secrets);
                }
                all.push((container.clone(), inv));
            }
        }
    }
    // Each Service leads to the pods of one workload: the controllers' or the agents'.
    for (service, object) in &services {
        let selector = &object["spec"]["selector"];
        let selected = workloads
            .iter()
            .filter(|w| selects(selector, &w["spec"]["template"]["metadata"]["labels"]))
            .count();
        assert_eq!(
            selected, 1,
            "{what}: Service {service} selects the pods of one workload"
        );
    }

    // The controllers: replicas on PostgreSQL, every pod serving and ready (a probe on the
    // API), behind Services on the ports they listen on.
    let serve: Vec<&(Value, Invocation)> = all
        .iter()
        .filter(|(_, i)| i.binary == "iohr-controller" && i.sub == ["serve"])
        .collect();
    assert_eq!(serve.len(), 1, "{what}: one controller container");
    let (container, inv) = serve[0];
    assert!(
        inv.flags.iter().any(|(f, _)| f == "--replica"),
        "{what}: the controllers are replicas"
    );
    assert!(
        container["readinessProbe"]["httpGet"]["path"] == "/healthz",
        "{what}: ready when the API answers /healthz"
    );
    assert!(
        container["env"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "IOHR_DATABASE_URL"),
        "{what}: the store is PostgreSQL, from a Secret"
    );
    let link_port = port_of(flag(inv, "--agent-addr")[0]);

    // Every replica is ready, so a rollout adds a ready one before an old one goes, and a
    // disruption budget on the controllers' pods lets a drain evict one but not all.
    let deployments = kind("Deployment");
    assert_eq!(deployments.len(), 1, "{what}: the controllers' Deployment");
    let spec = &deployments[0]["spec"];
    let replicas = spec["replicas"].as_i64().unwrap();
    assert!(replicas >= 2, "{what}: two replicas at least");
    assert_eq!(
        spec["strategy"]["type"], "RollingUpdate",
        "{what}: rolling updates"
    );
    assert_eq!(
        spec["strategy"]["rollingUpdate"]["maxUnavailable"], 0,
        "{what}: a new replica is ready before an old one goes"
    );
    let budgets = kind("PodDisruptionBudget");
    assert_eq!(
        budgets.len(),
        1,
        "{what}: a disruption budget for the controllers"
    );
    let budget = &budgets[0]["spec"];
    let labels = &spec["template"]["metadata"]["labels"];
    assert!(
        selects(&budget["selector"]["matchLabels"], labels),
        "{what}: the budget selects the controllers' pods"
    );
    let min = budget["minAvailable"].as_i64().unwrap();
    assert!(
        (1..replicas).contains(&min),
        "{what}: minAvailable {min} of {replicas}: one stays, one may be evicted"
    );
    // Spread over nodes: the anti-affinity is about the controllers' own pods.
    for term in items(
        &spec["template"]["spec"]["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"],
    ) {
        assert!(
            selects(
                &term["podAffinityTerm"]["labelSelector"]["matchLabels"],
                labels
            ),
            "{what}: the anti-affinity is the controllers' own"
        );
    }

    // The agents dial the agent link's Service, on its port, which leads to the port
    // the controller listens on.
    for (_, inv) in all.iter().filter(|(_, i)| i.binary == "iohr-agent") {
        for url in flag(inv, "--controller")
            .into_iter()
            .flat_map(|v| v.split(','))
        {
            let (host, port) = host_port(url);
            let service = services
                .get(host.as_str())
                .unwrap_or_else(|| panic!("{what}: agents dial {host}, which is no Service"));
            assert!(
                selects(&service["spec"]["selector"], labels),
                "{what}: Service {host} leads to the controllers"
            );
            let ports = service["spec"]["ports"].as_array().unwrap();
            let entry = ports
                .iter()
                .find(|p| p["port"] == port)
                .unwrap_or_else(|| panic!("{what}: Service {host} has no port {port}"));
            let container_port = container["ports"]
                .as_array()
                .unwrap()
                .iter()
                .find(|p| {
                    p["name"] == entry["targetPort"] || p["containerPort"] == entry["targetPort"]
                })
                .unwrap_or_else(|| {
                    panic!("{what}: Service {host}'s port {port} leads to no controller port")
                });
            assert_eq!(
                container_port["containerPort"], link_port,
                "{what}: {host}:{port} is the agent link"
            );
        }
    }
    let subs: BTreeSet<Vec<String>> = all
        .iter()
        .filter(|(_, i)| i.binary == "iohr-agent")
        .map(|(_, i)| i.sub.clone())
        .collect();
    assert!(
        subs.contains(&vec!["enroll".to_string()]),
        "{what}: the agents enroll"
    );
    assert!(
        subs.contains(&vec!["run".to_string()]),
        "{what}: the agents run"
    );
    all
}

/// An agent enrolls with the token its pod finds under its own key in the enrollment
/// Secret (iohr-enroll-once reads IOHR_ENROLL_TOKEN_FILE), and that key and the identity
/// it enrolls outlive the pod, for a token is good once: a StatefulSet's pod name (each
/// of its pods' names a key of the Secret) and its volume claim, or a DaemonSet's node
/// name and a directory of that node. A Deployment's pods have names of the moment, so
/// no token could be made for them beforehand.
fn check_enrollment_key(
    cname: &str,
    workload: &Value,
    container: &Value,
    enroll: &Invocation,
    secrets: &BTreeMap<String, BTreeSet<String>>,
) {
    let env = |name: &str| items(&container["env"]).find(|e| e["name"] == name);
    let file = env("IOHR_ENROLL_TOKEN_FILE")
        .and_then(|e| e["value"].as_str())
        .unwrap_or_else(|| panic!("{cname}: IOHR_ENROLL_TOKEN_FILE names the token's file"));
    let (dir, var) = file
        .strip_suffix(')')
        .and_then(|f| f.rsplit_once("/$("))
        .unwrap_or_else(|| panic!("{cname}: {file} is DIR/$(VAR), a key per pod"));
    let field = env(var)
        .and_then(|e| e["valueFrom"]["fieldRef"]["fieldPath"].as_str())
        .unwrap_or_else(|| panic!("{cname}: {var} comes from the pod's fields"));
    let pod = &workload["spec"]["template"]["spec"];
    let mount = items(&container["volumeMounts"])
        .find(|m| m["mountPath"] == dir)
        .unwrap_or_else(|| panic!("{cname}: nothing is mounted at {dir}"));
    let secret = items(&pod["volumes"])
        .find(|v| v["name"] == mount["name"])
        .and_then(|v| v["secret"]["secretName"].as_str())
        .unwrap_or_else(|| panic!("{cname}: {dir} is not a Secret"));
    let name = workload["metadata"]["name"].as_str().unwrap();
    let identity = flag(enroll, "--identity")[0];
    let kept = items(&container["volumeMounts"])
        .find(|m| identity.starts_with(m["mountPath"].as_str().unwrap()))
        .unwrap_or_else(|| panic!("{cname}: no volume holds {identity}"))["name"]
        .clone();
    let claimed =
        items(&workload["spec"]["volumeClaimTemplates"]).any(|c| c["metadata"]["name"] == kept);
    let on_node =
        items(&pod["volumes"]).any(|v| v["name"] == kept && v["hostPath"]["path"].is_string());
    match (workload["kind"].as_str().unwrap(), field) {
        ("StatefulSet", "metadata.name") => {
            assert!(
                claimed,
                "{cname}: {identity} is on the pod's own volume claim"
            );
            let keys = &secrets[secret];
            for i in 0..workload["spec"]["replicas"].as_i64().unwrap() {
                let pod_name = format!("{name}-{i}");
                assert!(
                    keys.contains(&pod_name),
                    "{cname}: pod {pod_name} has no token in Secret {secret} ({keys:?})"
                );
            }
        }
        ("DaemonSet", "spec.nodeName") => {
            assert!(on_node, "{cname}: {identity} is in a directory of the node");
        }
        (kind, field) => {
            panic!("{cname}: a {kind}'s agents keyed by {field} could not keep their identity")
        }
    }
}
