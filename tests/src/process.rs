//! The real processes of a test: controller, agents and targets. Each is killed when its
//! handle drops; stderr goes to a log file under the installation's `logs/`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdout, Command};

use crate::setup::{Installation, read_tail};

/// A workspace binary, built next to the test executable (`cargo test --workspace`
/// builds every binary of the workspace).
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe.parent().and_then(Path::parent).expect("target dir");
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is missing: run `cargo build --workspace --bins` (tests/run does)",
        path.display()
    );
    path
}

async fn read_line_with(stdout: &mut BufReader<ChildStdout>, prefix: &str, what: &str) -> String {
    let read = async {
        let mut line = String::new();
        loop {
            line.clear();
            let n = stdout.read_line(&mut line).await.expect("read stdout");
            assert!(n > 0, "{what} exited before printing {prefix:?}");
            if let Some(rest) = line.trim().strip_prefix(prefix) {
                return rest.to_string();
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(30), read)
        .await
        .unwrap_or_else(|_| panic!("{what} did not print {prefix:?} within 30 s"))
}

fn log_file(install: &Installation, name: &str) -> (PathBuf, std::fs::File) {
    let path = install.logs_dir().join(format!("{name}.log"));
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .expect("log file");
    (path, file)
}

pub struct Controller {
    child: Child,
    pub api: SocketAddr,
    /// `http` or `https`, from the controller's `api listening on` line.
    pub api_scheme: String,
    pub agent_link: SocketAddr,
    pub log: PathBuf,
    _stdout: BufReader<ChildStdout>,
}

impl Controller {
    /// `iohr-controller serve` on free ports (or the given agent port, for restarts).
    pub async fn start(
        install: &Installation,
        heartbeat_ms: u64,
        agent_port: Option<u16>,
    ) -> Controller {
        Controller::start_with(install, heartbeat_ms, agent_port, &[]).await
    }

    /// With more `serve` flags, such as `--api-tls` (the API then speaks https, trusted
    /// through [`Installation::ca_cert`]) or the API's timeouts.
    pub async fn start_with(
        install: &Installation,
        heartbeat_ms: u64,
        agent_port: Option<u16>,
        extra: &[&str],
    ) -> Controller {
        Standby::spawn(install, "controller", heartbeat_ms, agent_port, extra, true)
            .serving()
            .await
    }

    /// [`Controller::start_with`] with more environment variables (such as the
    /// OpenTelemetry exporter's `OTEL_EXPORTER_OTLP_*`).
    pub async fn start_with_env(
        install: &Installation,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Controller {
        Standby::spawn_in(install, "controller", 200, None, extra, true, None, env)
            .serving()
            .await
    }

    /// Without the loopback exceptions every other start adds (`--allow-webhook-target`,
    /// `--allow-cloud-target`): the target policy as an installation has it by default
    /// (tenant_controller.rs, tenant_allow.rs).
    pub async fn start_default_policy(install: &Installation, extra: &[&str]) -> Controller {
        Standby::spawn(
            install,
            "controller-default-policy",
            200,
            None,
            extra,
            false,
        )
        .serving()
        .await
    }

    /// `serve --standby` on `agent_port`: it prints its addresses (and [`Standby::serving`]
    /// returns) only once it has taken over the store.
    pub fn standby(install: &Installation, heartbeat_ms: u64, agent_port: u16) -> Standby {
        Standby::spawn(
            install,
            "controller-standby",
            heartbeat_ms,
            Some(agent_port),
            &["--standby"],
            true,
        )
    }

    /// `serve --replica` on free ports (or `agent_port`), logging to `LOGS/NAME.log`.
    pub async fn replica(
        install: &Installation,
        name: &str,
        heartbeat_ms: u64,
        agent_port: Option<u16>,
    ) -> Controller {
        Standby::spawn(
            install,
            name,
            heartbeat_ms,
            agent_port,
            &["--replica"],
            true,
        )
        .serving()
        .await
    }

    /// `serve --replica --agent-addr LINK` on the host: agents reach its link on `link`
    /// (such as a namespace's host address, which agents inside that namespace reach;
    /// port 0 for a free one), its API on loopback.
    pub async fn replica_linked_at(
        install: &Installation,
        name: &str,
        heartbeat_ms: u64,
        link: SocketAddr,
    ) -> Controller {
        let link = link.to_string();
        Standby::spawn(
            install,
            name,
            heartbeat_ms,
            None,
            &["--replica", "--agent-addr", &link],
            true,
        )
        .serving()
        .await
    }

    /// `serve EXTRA` (such as `--replica`) inside `netns`, its API and agent link on the
    /// namespace's address (the installation's certificate must name it), logging to
    /// `LOGS/NAME.log`: a controller the partition tests (issue 34) cut from PostgreSQL,
    /// or put behind a lossy link, while the test still reaches it.
    pub async fn start_in(
        install: &Installation,
        name: &str,
        heartbeat_ms: u64,
        netns: &crate::partition::Netns,
        extra: &[&str],
    ) -> Controller {
        Standby::spawn_in(
            install,
            name,
            heartbeat_ms,
            None,
            extra,
            true,
            Some(netns),
            &[],
        )
        .serving()
        .await
    }

    pub fn api_url(&self) -> String {
        format!("{}://{}", self.api_scheme, self.api)
    }

    pub fn link_url(&self) -> String {
        format!("https://{}", self.agent_link)
    }

    pub async fn kill(mut self) {
        let _ = self.child.kill().await;
    }

    /// SIGTERM, then wait for a graceful exit.
    pub async fn stop(mut self) {
        if let Some(pid) = self.child.id() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        let _ = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await;
    }

    pub fn log_tail(&self) -> String {
        read_tail(&self.log, 40)
    }
}

/// A started `iohr-controller serve` that has not yet printed its addresses.
pub struct Standby {
    child: Child,
    stdout: BufReader<ChildStdout>,
    pub log: PathBuf,
}

impl Standby {
    fn spawn(
        install: &Installation,
        log_name: &str,
        heartbeat_ms: u64,
        agent_port: Option<u16>,
        extra: &[&str],
        allow_loopback: bool,
    ) -> Standby {
        Standby::spawn_in(
            install,
            log_name,
            heartbeat_ms,
            agent_port,
            extra,
            allow_loopback,
            None,
            &[],
        )
    }

    /// [`Standby::spawn`] inside `netns` when given (the partition tests, issue 34): its
    /// API and agent link then listen on the namespace's own address; `env` is added to
    /// its environment.
    #[allow(clippy::too_many_arguments)] // each a different side of how it starts
    fn spawn_in(
        install: &Installation,
        log_name: &str,
        heartbeat_ms: u64,
        agent_port: Option<u16>,
        extra: &[&str],
        allow_loopback: bool,
        netns: Option<&crate::partition::Netns>,
        env: &[(&str, &str)],
    ) -> Standby {
        let (log, file) = log_file(install, log_name);
        let mut command = match netns {
            Some(netns) => netns.command(bin("iohr-controller")),
            None => Command::new(bin("iohr-controller")),
        };
        command.arg("serve");
        command.arg("--data-dir").arg(&install.data_dir);
        if let Some(url) = &install.database_url {
            command.arg("--database-url").arg(url);
        }
        let listen = netns.map_or("127.0.0.1".to_string(), |n| n.ns_ip.to_string());
        command.args(["--api-addr", &format!("{listen}:0")]);
        if netns.is_some() {
            // A veth address the test made is not loopback; only the test reaches it.
            command.arg("--insecure-http");
        }
        // A test may listen for agents elsewhere (the partition tests: a veth address).
        if !extra.contains(&"--agent-addr") {
            command
                .arg("--agent-addr")
                .arg(format!("{listen}:{}", agent_port.unwrap_or(0)));
        }
        command
            .arg("--heartbeat-ms")
            .arg(heartbeat_ms.to_string())
            .args(extra)
            .env("RUST_LOG", "info,iohr_controller=debug")
            .env("RUST_BACKTRACE", "0")
            .stdout(Stdio::piped())
            .stderr(file)
            .kill_on_drop(true);
        if allow_loopback {
            // Webhook receivers of the tests listen on loopback, which the controller
            // refuses by default (tenant_controller.rs shows the refusals).
            command.args(["--allow-webhook-target", "127.0.0.0/8"]);
            // Cloud runs of the tests aim at loopback too, which platform agents (started
            // with --allow-target 127.0.0.0/8) reach; the controller refuses a denied
            // literal target of a cloud run by default (tenant_agent.rs shows it).
            command.args(["--allow-cloud-target", "127.0.0.0/8"]);
        }
        command.envs(env.iter().copied());
        let mut child = command.spawn().expect("spawn iohr-controller");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        Standby { child, stdout, log }
    }

    /// Waits (30 s at most) for its `api listening on` and `agent link listening on`.
    pub async fn serving(mut self) -> Controller {
        let api = read_line_with(&mut self.stdout, "api listening on ", "iohr-controller").await;
        let (api_scheme, api) = api
            .split_once("://")
            .expect("a URL after `api listening on`");
        let link = read_line_with(
            &mut self.stdout,
            "agent link listening on https://",
            "iohr-controller",
        )
        .await;
        Controller {
            child: self.child,
            api: api.parse().expect("api address"),
            api_scheme: api_scheme.to_string(),
            agent_link: link.parse().expect("agent link address"),
            log: self.log,
            _stdout: self.stdout,
        }
    }

    /// Waits until its log says it stands by while another controller serves.
    pub async fn waiting(&self, limit: Duration) {
        crate::wait_for("the standby to say it waits", limit, || async {
            std::fs::read_to_string(&self.log)
                .unwrap_or_default()
                .contains("standby: another controller is serving this store")
                .then_some(())
        })
        .await;
    }

    /// SIGTERM, then its exit status (10 s at most).
    pub async fn stop(mut self) -> Option<std::process::ExitStatus> {
        if let Some(pid) = self.child.id() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        tokio::time::timeout(Duration::from_secs(10), self.child.wait())
            .await
            .ok()
            .and_then(Result::ok)
    }

    pub fn log_tail(&self) -> String {
        read_tail(&self.log, 40)
    }
}

pub struct Agent {
    child: Child,
    pub name: String,
    pub log: PathBuf,
}

pub struct AgentOptions<'a> {
    pub environments: &'a [&'a str],
    pub max_jobs: u32,
    /// More arguments for `iohr-agent run` (such as `--policy FILE`).
    pub extra: &'a [&'a str],
    /// More environment variables for the agent process (such as a debug build's test
    /// hooks).
    pub env: &'a [(&'a str, &'a str)],
    /// Each an `--allow-target`: by default loopback, where every test's targets are, so
    /// that an agent with the deny-list on (a platform agent's) still reaches them.
    pub allow_targets: &'a [&'a str],
    /// Run the agent inside this network namespace (the partition tests, issue 34).
    pub netns: Option<&'a crate::partition::Netns>,
}

/// The `--allow-target`s an agent of the tests is given unless a test says otherwise.
pub const LOOPBACK_TARGETS: &[&str] = &["127.0.0.0/8", "::1"];

impl Default for AgentOptions<'_> {
    fn default() -> Self {
        AgentOptions {
            environments: &["staging"],
            max_jobs: 4,
            extra: &[],
            env: &[],
            allow_targets: LOOPBACK_TARGETS,
            netns: None,
        }
    }
}

impl Agent {
    /// `iohr-agent run` with the identity in `identity`, dialling `controller`.
    pub async fn start(
        install: &Installation,
        name: &str,
        identity: &Path,
        controller: &str,
        options: AgentOptions<'_>,
    ) -> Agent {
        let (log, file) = log_file(install, &format!("agent-{name}"));
        let mut command = match options.netns {
            Some(netns) => netns.command(bin("iohr-agent")),
            None => Command::new(bin("iohr-agent")),
        };
        command
            .arg("run")
            .args(["--controller", controller])
            .arg("--identity")
            .arg(identity)
            .args(["--max-concurrent-jobs", &options.max_jobs.to_string()])
            .args(["--reconnect-min-ms", "20", "--reconnect-max-ms", "200"])
            // Each agent its own fault ledger: a restarted agent of this name finds its own.
            .arg("--state-dir")
            .arg(install.root.join(format!("agent-state-{name}")))
            .args(options.extra)
            .env("RUST_LOG", "info,iohr_agent=debug")
            // A panic (the executor tests' hooks) prints its message without symbolizing
            // a backtrace: in a debug binary, cold, that can take seconds on the runtime's
            // thread, long enough to miss heartbeats, whatever the caller's environment.
            .env("RUST_BACKTRACE", "0")
            .stdout(Stdio::null())
            .stderr(file)
            .kill_on_drop(true);
        for env in options.environments {
            command.args(["--environment", env]);
        }
        for allowed in options.allow_targets {
            command.args(["--allow-target", allowed]);
        }
        command.envs(options.env.iter().copied());
        let child = command.spawn().expect("spawn iohr-agent");
        Agent {
            child,
            name: name.to_string(),
            log,
        }
    }

    /// Issues an identity for `name` in the `default` account, starts the agent and waits
    /// until the API shows it online.
    pub async fn enrol(
        install: &Installation,
        api: &crate::Api,
        name: &str,
        controller: &str,
        options: AgentOptions<'_>,
    ) -> Agent {
        let identity = install.agent_identity("default", name);
        let agent = Agent::start(install, name, &identity, controller, options).await;
        api.wait_online(name, Duration::from_secs(30)).await;
        agent
    }

    /// SIGKILL: the agent gets no chance to say anything.
    pub async fn kill(mut self) {
        let _ = self.child.kill().await;
    }

    pub fn log_tail(&self) -> String {
        read_tail(&self.log, 40)
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Waits until the agent's log shows three refused links, `needle` among their
    /// reasons: the controller refuses it, not a passing failure.
    pub async fn refused(&self, needle: &str, limit: Duration) {
        crate::wait_for(
            &format!("{} refused ({needle})", self.name),
            limit,
            || async {
                let log = std::fs::read_to_string(&self.log).unwrap_or_default();
                (log.matches("link failed").count() >= 3 && log.contains(needle)).then_some(())
            },
        )
        .await;
    }
}

pub struct Target {
    child: Child,
    pub addr: SocketAddr,
    /// `http` or `https`, from the target's `listening on` line.
    pub scheme: String,
}

impl Target {
    pub async fn start() -> Target {
        Target::start_with(&[]).await
    }

    /// With extra flags, such as `--service-ms 2` or the stall and error switches.
    pub async fn start_with(flags: &[&str]) -> Target {
        Target::start_at("127.0.0.1:0", flags).await
    }

    /// On a given address, e.g. the one a stopped target had (the same target URL).
    /// It stops by itself after 10 minutes unless `flags` give `--max-seconds` (a soak
    /// that outlasts that gives its own).
    pub async fn start_at(listen: &str, flags: &[&str]) -> Target {
        let life: &[&str] = if flags.contains(&"--max-seconds") {
            &[]
        } else {
            &["--max-seconds", "600"]
        };
        let mut child = Command::new(bin("iohr-sample-target"))
            .args(["--listen", listen])
            .args(life)
            .args(flags)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn iohr-sample-target");
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let url = read_line_with(&mut stdout, "listening on ", "iohr-sample-target").await;
        let (scheme, addr) = url.split_once("://").expect("a URL after `listening on`");
        Target {
            child,
            addr: addr.parse().expect("target address"),
            scheme: scheme.to_string(),
        }
    }

    pub fn url(&self) -> String {
        format!("{}://{}", self.scheme, self.addr)
    }

    /// Its `GET /_stats` (a request not itself counted): `requests`, `errors`, `stalled`,
    /// `uptime_ms`.
    pub async fn stats(&self) -> serde_json::Value {
        let (status, stats) = crate::Api::new(&self.url(), "")
            .with_token(None)
            .get("/_stats")
            .await;
        assert_eq!(status, 200, "GET /_stats: {stats}");
        stats
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Stops it and waits until it is gone, so its port is free again.
    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// `iohr-agent exec --kind KIND --target TARGET SPEC [extra]` with a fault state dir of its
/// own, bounded to 120 s; `env` is set for the agent (`(NAME, None)` removes NAME) and
/// `stderr` is where its stderr goes (`None`: captured).
pub async fn agent_exec_output(
    kind: &str,
    target: &str,
    spec: &serde_json::Value,
    extra: &[&str],
    env: &[(&str, Option<&str>)],
    stderr: Option<Stdio>,
) -> std::process::Output {
    let path = std::env::temp_dir().join(format!("iohr-spec-{}.json", uuid::Uuid::new_v4()));
    std::fs::write(&path, spec.to_string()).expect("write spec");
    let state = std::env::temp_dir().join(format!("iohr-exec-state-{}", uuid::Uuid::new_v4()));
    let mut command = Command::new(bin("iohr-agent"));
    command
        .args(["exec", "--kind", kind, "--target", target])
        .arg("--state-dir")
        .arg(&state)
        .arg(&path)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(stderr.unwrap_or_else(Stdio::piped))
        .kill_on_drop(true);
    for (name, value) in env {
        match value {
            Some(value) => command.env(name, value),
            None => command.env_remove(name),
        };
    }
    // `output` drops the command (and with it the parent's copy of a given stderr) only
    // when it is done: spawn, then let it go, so that a reader of that stderr sees its end.
    let child = command.spawn().expect("run iohr-agent exec");
    drop(command);
    let output = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
        .await
        .expect("exec within 120 s")
        .expect("wait for iohr-agent exec");
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_dir_all(&state);
    output
}

/// `iohr-agent exec --kind KIND --target TARGET SPEC --json [extra]`: the exit status and
/// the one JSON object it prints.
pub async fn agent_exec(
    kind: &str,
    target: &str,
    spec: &serde_json::Value,
    extra: &[&str],
) -> (i32, serde_json::Value) {
    let args: Vec<&str> = std::iter::once("--json")
        .chain(extra.iter().copied())
        .collect();
    let output = agent_exec_output(kind, target, spec, &args, &[], None).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "exec printed no JSON ({e}): {stdout}\nstderr: {}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (output.status.code().unwrap_or(-1), value)
}
