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
//!   manifests' Secrets, volumes, probes, selectors and security context hold together.
//!
//! The Helm chart (deploy/helm/iohr) is tests/tests/deploy_helm.rs, with the same checks
//! of the objects (deploy_common). YAML is read with PyYAML from the virtual environment
//! tests/run makes (`target/py-venv`, or `IOHR_PYTHON`); without it, or without kubectl,
//! the test fails, it never skips.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

mod deploy_common;

use std::collections::BTreeSet;
use std::path::Path;

use deploy_common::{
    BINARIES, IMAGE_UID, Invocation, check_against_help, check_kubernetes, example_secrets, flag,
    host_port, image_commands, invocations, kustomize, port_of, read, repo, strings, validate,
    yaml_docs,
};

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
    validate(
        "kubernetes-secrets.yaml",
        &read("deploy/kubernetes/examples/secrets.yaml"),
    );
    let objects = yaml_docs(&rendered);
    check_kubernetes("the kustomize base", &objects, &example_secrets());
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
