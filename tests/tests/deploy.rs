//! The deployment files (deploy/compose.yaml, deploy/kubernetes/, deploy/Dockerfile),
//! checked without a Docker engine or a cluster:
//!
//! - `kubectl kustomize deploy/kubernetes` renders, and what it renders (and the example
//!   Secrets) validates, strictly, against the Kubernetes JSON schemas of KUBERNETES
//!   (PyPI `kubernetes-validate`, pinned in tests/requirements.txt);
//! - every command line the compose file and the manifests give an iohr binary names a
//!   subcommand and flags that binary's own `--help` lists (the binaries of this build);
//! - the compose file's volumes, dependencies and image are declared, the controllers'
//!   addresses the agents dial are names in the server certificate init makes, and the
//!   manifests' Secrets, volumes, probes and security context hold together.
//!
//! YAML is read with PyYAML from the virtual environment tests/run makes (`target/py-venv`,
//! or `IOHR_PYTHON`); without it, or without kubectl, the test fails, it never skips.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use iohr_tests::process::bin;
use iohr_tests::python::python;
use serde_json::Value;

/// The Kubernetes version the manifests are validated for (kubectl here is v1.32).
const KUBERNETES: &str = "1.32.0";
/// The workspace's binaries, as commands name them.
const BINARIES: [&str; 4] = [
    "iohr-controller",
    "iohr-agent",
    "iohr",
    "iohr-sample-target",
];
/// The image's non-root user (deploy/Dockerfile), which the manifests run as.
const IMAGE_UID: i64 = 10001;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("read {path}: {e}"))
}

/// Runs a command, which must exit 0; its stdout.
fn run(command: &mut Command, what: &str) -> String {
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
fn yaml_docs(text: &str) -> Vec<Value> {
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

fn kustomize() -> String {
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
fn validate(name: &str, text: &str) {
    // The system's temporary dir, not the build's: the build dir may be another's to read only.
    let file = std::env::temp_dir().join(format!("iohr-deploy-{}-{name}", std::process::id()));
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
fn shell_words(text: &str) -> Vec<String> {
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
struct Invocation {
    binary: String,
    sub: Vec<String>,
    flags: Vec<(String, Option<String>)>,
}

/// The iohr invocations in a container's argv (entrypoint then command): argv words that
/// are scripts (`bash -c '...'`) are split as the shell would.
fn invocations(argv: &[String]) -> Vec<Invocation> {
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
fn check_against_help(where_: &str, inv: &Invocation) {
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

fn strings(value: &Value) -> Vec<String> {
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

fn flag<'a>(inv: &'a Invocation, name: &str) -> Vec<&'a str> {
    inv.flags
        .iter()
        .filter(|(f, _)| f == name)
        .filter_map(|(_, v)| v.as_deref())
        .collect()
}

/// The items of a JSON list; none for anything else (an absent field).
fn items(value: &Value) -> impl Iterator<Item = &Value> {
    value.as_array().into_iter().flatten()
}

/// The port of `HOST:PORT`.
fn port_of(addr: &str) -> u16 {
    addr.rsplit_once(':').unwrap().1.parse().unwrap()
}

/// `https://HOST:PORT` -> (HOST, PORT).
fn host_port(url: &str) -> (String, u16) {
    let rest = url
        .strip_prefix("https://")
        .unwrap_or_else(|| panic!("{url} is not https://"));
    let (host, port) = rest.trim_end_matches('/').rsplit_once(':').unwrap();
    (host.to_string(), port.parse().unwrap())
}

// --- the Dockerfile -------------------------------------------------------------------

/// What the image gives a command: its binaries, and the scripts the Dockerfile copies
/// into /usr/local/bin (each must exist in the repository).
fn image_commands(dockerfile: &str) -> BTreeSet<String> {
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

#[test]
fn the_dockerfile_builds_every_binary_locked_and_runs_as_its_user() {
    let dockerfile = read("deploy/Dockerfile");
    assert!(dockerfile.contains("--locked"), "cargo build --locked");
    for binary in BINARIES {
        assert!(
            dockerfile.contains(&format!("--bin {binary} "))
                || dockerfile.contains(&format!("--bin {binary}\n")),
            "deploy/Dockerfile does not build {binary}"
        );
        assert!(
            dockerfile.contains(&format!("target/release/{binary}")),
            "deploy/Dockerfile does not copy {binary} out of the builder"
        );
    }
    assert!(
        dockerfile.contains(&format!("USER {IMAGE_UID}")),
        "the image runs as uid {IMAGE_UID}"
    );
    image_commands(&dockerfile);
    let ignore = read(".dockerignore");
    for entry in ["target/", ".git/", ".iohr/"] {
        assert!(
            ignore.lines().any(|l| l.trim() == entry),
            ".dockerignore lacks {entry}"
        );
    }
}

// --- compose ----------------------------------------------------------------------------

#[test]
fn the_compose_file_holds_together_and_its_commands_are_the_binaries() {
    let docs = yaml_docs(&read("deploy/compose.yaml"));
    assert_eq!(docs.len(), 1, "deploy/compose.yaml is one document");
    let compose = &docs[0];
    let services = compose["services"].as_object().expect("services");
    let volumes: BTreeSet<&str> = compose["volumes"]
        .as_object()
        .expect("top-level volumes")
        .keys()
        .map(String::as_str)
        .collect();
    let dockerfile = read("deploy/Dockerfile");
    let image_commands = image_commands(&dockerfile);

    let mut all = Vec::new();
    for (name, service) in services {
        // The image: ours, built from deploy/Dockerfile, or another with a pinned tag.
        let image = service["image"]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: no image"));
        let ours = image.contains("iohr");
        if ours {
            let build = &service["build"];
            let context =
                Path::new("deploy").join(build["context"].as_str().expect("build.context"));
            let file = context.join(build["dockerfile"].as_str().expect("build.dockerfile"));
            assert!(
                repo().join(&file).is_file(),
                "{name}: {} is missing",
                file.display()
            );
            assert!(
                repo().join(&file).canonicalize().unwrap()
                    == repo().join("deploy/Dockerfile").canonicalize().unwrap(),
                "{name}: builds {}, not deploy/Dockerfile",
                file.display()
            );
        } else {
            let tag = image.rsplit_once(':').map(|(_, t)| t);
            assert!(
                tag.is_some_and(|t| t != "latest"),
                "{name}: image {image} has no pinned tag"
            );
        }
        for dep in service["depends_on"]
            .as_object()
            .into_iter()
            .flat_map(|d| d.keys())
        {
            assert!(
                services.contains_key(dep),
                "{name} depends on {dep}, which is no service"
            );
        }
        for mount in strings(&service["volumes"]) {
            let parts: Vec<&str> = mount.split(':').collect();
            let (source, target) = (parts[0], parts[1]);
            if source.starts_with('.') || source.starts_with('/') {
                assert!(
                    repo().join("deploy").join(source).exists(),
                    "{name}: bind mount {source} does not exist"
                );
                continue;
            }
            assert!(
                volumes.contains(source),
                "{name}: volume {source} is not declared"
            );
            // A new named volume takes its owner from the image's directory at the
            // mount point: one the image lacks would be root's, unwritable by uid 10001.
            let read_only = parts.get(2) == Some(&"ro");
            if ours && !read_only {
                assert!(
                    dockerfile.contains(target),
                    "{name}: {source} is mounted writable at {target}, a directory deploy/Dockerfile does not make for its user"
                );
            }
        }
        if !ours {
            continue;
        }
        let argv: Vec<String> = strings(&service["entrypoint"])
            .into_iter()
            .chain(strings(&service["command"]))
            .collect();
        if let Some(first) = argv.first() {
            assert!(
                image_commands.contains(first),
                "{name}: {first} is not a command of the image ({image_commands:?})"
            );
        }
        for inv in invocations(&argv) {
            check_against_help(&format!("compose service {name}"), &inv);
            all.push((name.clone(), inv));
        }
    }

    // What the deployment is meant to be: two controller replicas serving one store at
    // once, an init that names both in the server certificate and hands out tokens,
    // agents that enroll and dial both, and the sample target.
    let find = |binary: &str, sub: &[&str]| -> Vec<(String, Invocation)> {
        all.iter()
            .filter(|(_, i)| i.binary == binary && i.sub == sub)
            .cloned()
            .collect()
    };
    let serving = find("iohr-controller", &["serve"]);
    assert_eq!(serving.len(), 2, "two controllers: {serving:?}");
    for (service, inv) in &serving {
        let replica = inv.flags.iter().any(|(f, _)| f == "--replica");
        assert!(replica, "{service}: serve --replica");
    }
    let init = find("iohr-controller", &["init"]);
    assert_eq!(init.len(), 1, "one init");
    let names: BTreeSet<&str> = flag(&init[0].1, "--server-name").into_iter().collect();
    for (service, _) in &serving {
        assert!(
            names.contains(service.as_str()),
            "the server certificate names {names:?}, not controller {service}"
        );
    }
    assert!(
        !find("iohr-controller", &["token", "create"]).is_empty(),
        "an API token"
    );
    let tokens = find("iohr-controller", &["agent-token", "create"]);
    assert!(!tokens.is_empty(), "enrollment tokens");

    let controllers: BTreeSet<&str> = serving.iter().map(|(s, _)| s.as_str()).collect();
    let agent_ports: BTreeSet<u16> = serving
        .iter()
        .flat_map(|(_, i)| flag(i, "--agent-addr"))
        .map(port_of)
        .collect();
    let enrolls = find("iohr-agent", &["enroll"]);
    let runs = find("iohr-agent", &["run"]);
    assert_eq!(runs.len(), 2, "two agents");
    assert_eq!(enrolls.len(), runs.len(), "each agent enrolls");
    for (service, inv) in enrolls.iter().chain(&runs) {
        let urls: Vec<&str> = flag(inv, "--controller")
            .into_iter()
            .flat_map(|v| v.split(','))
            .collect();
        assert!(!urls.is_empty(), "{service}: no --controller");
        for url in &urls {
            let (host, port) = host_port(url);
            assert!(
                controllers.contains(host.as_str()),
                "{service} dials {host}, no controller"
            );
            assert!(
                names.contains(host.as_str()),
                "{service} dials {host}, not in the certificate"
            );
            assert!(
                agent_ports.contains(&port),
                "{service} dials port {port}, no agent link"
            );
        }
        if inv.sub == ["run"] {
            let hosts: BTreeSet<String> = urls.iter().map(|u| host_port(u).0).collect();
            assert_eq!(
                hosts.len(),
                controllers.len(),
                "{service} dials every controller"
            );
        }
    }
    assert_eq!(
        find("iohr-sample-target", &[]).len(),
        1,
        "the sample target"
    );
}

// --- Kubernetes -------------------------------------------------------------------------

#[test]
fn the_kubernetes_base_renders_validates_and_its_commands_are_the_binaries() {
    let rendered = kustomize();
    validate("kubernetes-base.yaml", &rendered);
    let examples = read("deploy/kubernetes/examples/secrets.yaml");
    validate("kubernetes-secrets.yaml", &examples);

    let objects = yaml_docs(&rendered);
    let secrets: BTreeMap<String, BTreeSet<String>> = yaml_docs(&examples)
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
        .collect();
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
        .collect();
    assert_eq!(workloads.len(), 2, "the controllers and the agents");
    for workload in &workloads {
        let name = workload["metadata"]["name"].as_str().unwrap();
        let pod = &workload["spec"]["template"]["spec"];
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
                    "{name}: Secret {secret} is not in examples/secrets.yaml"
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
                        panic!("{cname}: Secret {secret} is not in examples/secrets.yaml")
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
                all.push((container.clone(), inv));
            }
        }
    }

    // The controllers: replicas on PostgreSQL, every pod serving and ready (a probe on the
    // API), behind Services on the ports they listen on.
    let serve: Vec<&(Value, Invocation)> = all
        .iter()
        .filter(|(_, i)| i.binary == "iohr-controller" && i.sub == ["serve"])
        .collect();
    assert_eq!(serve.len(), 1, "one controller container");
    let (container, inv) = serve[0];
    assert!(
        inv.flags.iter().any(|(f, _)| f == "--replica"),
        "the controllers are replicas"
    );
    assert!(
        container["readinessProbe"]["httpGet"]["path"] == "/healthz",
        "ready when the API answers /healthz"
    );
    assert!(
        container["env"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "IOHR_DATABASE_URL"),
        "the store is PostgreSQL, from a Secret"
    );
    let link_port = port_of(flag(inv, "--agent-addr")[0]);

    // Every replica is ready, so a rollout adds a ready one before an old one goes, and a
    // disruption budget on the controllers' pods lets a drain evict one but not all.
    let deployments = kind("Deployment");
    assert_eq!(deployments.len(), 1, "the controllers' Deployment");
    let spec = &deployments[0]["spec"];
    let replicas = spec["replicas"].as_i64().unwrap();
    assert!(replicas >= 2, "two replicas at least");
    assert_eq!(spec["strategy"]["type"], "RollingUpdate", "rolling updates");
    assert_eq!(
        spec["strategy"]["rollingUpdate"]["maxUnavailable"], 0,
        "a new replica is ready before an old one goes"
    );
    let budgets = kind("PodDisruptionBudget");
    assert_eq!(budgets.len(), 1, "a disruption budget for the controllers");
    let budget = &budgets[0]["spec"];
    let labels = &spec["template"]["metadata"]["labels"];
    for (key, value) in budget["selector"]["matchLabels"].as_object().unwrap() {
        assert_eq!(
            &labels[key], value,
            "the budget selects the controllers' pods"
        );
    }
    let min = budget["minAvailable"].as_i64().unwrap();
    assert!(
        (1..replicas).contains(&min),
        "minAvailable {min} of {replicas}: one stays, one may be evicted"
    );

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
                .unwrap_or_else(|| panic!("agents dial {host}, which is no Service"));
            let ports = service["spec"]["ports"].as_array().unwrap();
            let entry = ports
                .iter()
                .find(|p| p["port"] == port)
                .unwrap_or_else(|| panic!("Service {host} has no port {port}"));
            let container_port = container["ports"]
                .as_array()
                .unwrap()
                .iter()
                .find(|p| {
                    p["name"] == entry["targetPort"] || p["containerPort"] == entry["targetPort"]
                })
                .unwrap_or_else(|| {
                    panic!("Service {host}'s port {port} leads to no controller port")
                });
            assert_eq!(
                container_port["containerPort"], link_port,
                "{host}:{port} is the agent link"
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
        "the agents enroll"
    );
    assert!(subs.contains(&vec!["run".to_string()]), "the agents run");
}

#[test]
fn the_shell_splitter_finds_each_invocation_and_its_flags() {
    let argv = vec![
        "bash".to_string(),
        "-c".to_string(),
        "x=\"$(iohr-controller token create --account default --scope a | tail -n 1)\"\n\
         /usr/local/bin/iohr-agent run --controller https://a:1,https://b:2 \\\n  --environment=staging; echo done"
            .to_string(),
    ];
    let found = invocations(&argv);
    assert_eq!(found.len(), 2, "{found:?}");
    assert_eq!(found[0].binary, "iohr-controller");
    assert_eq!(found[0].sub, ["token", "create"]);
    assert_eq!(
        found[0]
            .flags
            .iter()
            .map(|(f, _)| f.as_str())
            .collect::<Vec<_>>(),
        ["--account", "--scope"]
    );
    assert_eq!(found[1].sub, ["run"]);
    assert_eq!(flag(&found[1], "--controller"), ["https://a:1,https://b:2"]);
    assert_eq!(flag(&found[1], "--environment"), ["staging"]);
}
