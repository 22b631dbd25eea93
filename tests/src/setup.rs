//! One installation per test: a data dir with the controller's PKI, a store, accounts,
//! tokens and agent identities, all made with the real `iohr-controller` commands.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::process::bin;

/// Where the controller keeps its record in a test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    pub const BOTH: [Backend; 2] = [Backend::Sqlite, Backend::Postgres];
}

/// The PostgreSQL server tests use (`IOHR_TEST_POSTGRES`, default the local one).
pub fn postgres_admin_url() -> String {
    std::env::var("IOHR_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_string())
}

/// Creates an empty database for one test; fails loudly when PostgreSQL is unreachable.
pub async fn fresh_postgres_database() -> String {
    use sqlx::Connection;
    let admin = postgres_admin_url();
    let mut conn = sqlx::PgConnection::connect(&admin)
        .await
        .unwrap_or_else(|e| {
            panic!("PostgreSQL at {admin} is required by the end-to-end tests: {e}")
        });
    let name = format!("iohr_e2e_{}", uuid::Uuid::new_v4().simple());
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut conn)
        .await
        .expect("create the test database");
    let (prefix, _) = admin.rsplit_once('/').expect("a database in the URL");
    format!("{prefix}/{name}")
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

pub struct Installation {
    pub root: PathBuf,
    pub data_dir: PathBuf,
    pub database_url: Option<String>,
    pub backend: Backend,
}

impl Installation {
    /// `iohr-controller init` in a fresh temp dir (and a fresh database for PostgreSQL).
    pub async fn new(backend: Backend) -> Installation {
        Installation::with_server_names(backend, &[]).await
    }

    /// [`Installation::new`] whose server certificate also names `names` (each an
    /// `init --server-name`), for agents that dial the controller elsewhere than loopback.
    pub async fn with_server_names(backend: Backend, names: &[&str]) -> Installation {
        let root = std::env::temp_dir().join(format!(
            "iohr-e2e-{}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed),
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&root).expect("temp dir");
        let database_url = match backend {
            Backend::Sqlite => None,
            Backend::Postgres => Some(fresh_postgres_database().await),
        };
        let install = Installation {
            data_dir: root.join("controller"),
            root,
            database_url,
            backend,
        };
        let mut init = vec!["init"];
        for name in names {
            init.extend(["--server-name", name]);
        }
        install.ctl(&init);
        install
    }

    /// Runs an `iohr-controller` admin command against this installation; returns stdout.
    pub fn ctl(&self, args: &[&str]) -> String {
        let mut command = Command::new(bin("iohr-controller"));
        command.arg(args[0]).args(&args[1..]);
        self.add_store_args(&mut command);
        let output = command.output().expect("run iohr-controller");
        assert!(
            output.status.success(),
            "iohr-controller {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Like [`ctl`](Self::ctl) but for two-word commands (`token create`).
    pub fn ctl2(&self, group: &str, args: &[&str]) -> String {
        let mut command = Command::new(bin("iohr-controller"));
        command.arg(group).args(args);
        self.add_store_args(&mut command);
        let output = command.output().expect("run iohr-controller");
        assert!(
            output.status.success(),
            "iohr-controller {group} {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    pub fn add_store_args(&self, command: &mut Command) {
        command.arg("--data-dir").arg(&self.data_dir);
        if let Some(url) = &self.database_url {
            command.arg("--database-url").arg(url);
        }
    }

    /// A token of `account` with the given scopes: the last line `token create` prints.
    pub fn token(&self, account: &str, scopes: &[&str], person: Option<&str>) -> String {
        let mut args = vec!["create", "--account", account];
        for scope in scopes {
            args.extend(["--scope", scope]);
        }
        if let Some(person) = person {
            args.extend(["--person", person]);
        }
        let out = self.ctl2("token", &args);
        out.lines().last().expect("a token line").trim().to_string()
    }

    pub fn full_token(&self) -> String {
        self.token("default", &["reliability:run", "reliability:read"], None)
    }

    pub fn create_account(&self, name: &str, max_running: u32, platform: bool) {
        let max = max_running.to_string();
        let mut args = vec![
            "create",
            "--name",
            name,
            "--max-running",
            &max,
            "--environment",
            "staging",
        ];
        if platform {
            args.push("--platform");
        }
        self.ctl2("account", &args);
    }

    /// Issues an agent certificate into `ROOT/agents/NAME`.
    pub fn agent_identity(&self, account: &str, name: &str) -> PathBuf {
        let out = self.root.join("agents").join(name);
        let out_text = out.display().to_string();
        self.ctl(&[
            "agent-cert",
            "--account",
            account,
            "--agent",
            name,
            "--out",
            &out_text,
        ]);
        out
    }

    /// A one-time enrollment token for agent `name` of `account` valid for `ttl`
    /// (`agent-token create`): the token (its last line) and all it printed.
    pub fn enrollment_token(&self, account: &str, name: &str, ttl: &str) -> (String, String) {
        let out = self.ctl2(
            "agent-token",
            &[
                "create",
                "--account",
                account,
                "--agent",
                name,
                "--ttl",
                ttl,
            ],
        );
        let token = out.lines().last().expect("a token line").trim().to_string();
        (token, out)
    }

    /// The controller's CA: what a client of `serve --api-tls` trusts.
    pub fn ca_cert(&self) -> PathBuf {
        self.data_dir.join("pki").join("ca.pem")
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    pub fn logs_dir(&self) -> PathBuf {
        let dir = self.root.join("logs");
        let _ = std::fs::create_dir_all(&dir);
        dir
    }
}

impl Drop for Installation {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.root);
        } else {
            eprintln!("kept the failed test's files in {}", self.root.display());
        }
    }
}

pub fn read_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// A controller on a fresh store with one agent, `edge-1`, online: what most end-to-end
/// tests start from.
pub struct OneAgent {
    pub install: Installation,
    pub controller: crate::Controller,
    pub api: crate::Api,
    pub agent: crate::Agent,
}

/// What `iohr` printed and how it exited.
#[derive(Debug)]
pub struct CliOutput {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// `iohr ARGS` against `controller` with `token`.
pub fn iohr(controller: &crate::Controller, token: &str, args: &[&str]) -> CliOutput {
    iohr_with_env(controller, token, args, &[])
}

/// `iohr ARGS` against `controller` with `token` and the variables `env` set.
pub fn iohr_with_env(
    controller: &crate::Controller,
    token: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> CliOutput {
    let output = std::process::Command::new(crate::process::bin("iohr"))
        .args(["--server", &controller.api_url()])
        .args(["--token", token])
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("run iohr");
    CliOutput {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).to_string(),
        stderr: String::from_utf8_lossy(&output.stderr).to_string(),
    }
}

impl OneAgent {
    /// `iohr ARGS` against this controller with `token` (the full token when `None`).
    pub fn iohr(&self, token: Option<&str>, args: &[&str]) -> CliOutput {
        let token = token.map_or_else(|| self.install.full_token(), str::to_string);
        iohr(&self.controller, &token, args)
    }

    pub async fn start(backend: Backend, options: crate::process::AgentOptions<'_>) -> OneAgent {
        OneAgent::start_in(Installation::new(backend).await, options).await
    }

    /// In an installation prepared beforehand (a plan, accounts).
    pub async fn start_in(
        install: Installation,
        options: crate::process::AgentOptions<'_>,
    ) -> OneAgent {
        OneAgent::start_beating(install, options, 200).await
    }

    /// With the controller's heartbeat every `heartbeat_ms` (a lease lives three of them):
    /// the tests' 200 ms is five times faster than a link a starved agent can keep.
    pub async fn start_beating(
        install: Installation,
        options: crate::process::AgentOptions<'_>,
        heartbeat_ms: u64,
    ) -> OneAgent {
        let controller = crate::Controller::start(&install, heartbeat_ms, None).await;
        let api = crate::Api::new(&controller.api_url(), &install.full_token());
        let agent =
            crate::Agent::enrol(&install, &api, "edge-1", &controller.link_url(), options).await;
        OneAgent {
            install,
            controller,
            api,
            agent,
        }
    }
}

/// A controller whose plan runs 4 runs at a time, with `agents` enrolled agents
/// (`edge-0` ..) online: what the tests of split runs (`"agents": N`) start from.
pub struct Fleet {
    pub install: Installation,
    pub controller: crate::Controller,
    pub api: crate::Api,
    pub agents: Vec<crate::Agent>,
}

impl Fleet {
    pub async fn start(backend: Backend, agents: usize) -> Fleet {
        let install = Installation::new(backend).await;
        install.ctl2(
            "account",
            &[
                "set-plan",
                "--name",
                "default",
                "--max-running",
                "4",
                "--schedule-floor",
                "load=1s",
            ],
        );
        let controller = crate::Controller::start(&install, 300, None).await;
        let api = crate::Api::new(&controller.api_url(), &install.full_token());
        let mut fleet = Fleet {
            install,
            controller,
            api,
            agents: Vec::new(),
        };
        for i in 0..agents {
            fleet.enrol(&format!("edge-{i}")).await;
        }
        fleet
    }

    /// One more agent, `name`, started and online.
    pub async fn enrol(&mut self, name: &str) {
        let agent = crate::Agent::enrol(
            &self.install,
            &self.api,
            name,
            &self.controller.link_url(),
            crate::process::AgentOptions::default(),
        )
        .await;
        self.agents.push(agent);
    }
}
