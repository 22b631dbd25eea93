//! The controller under test: a fresh data dir (and PostgreSQL database) per scenario,
//! set up with the real CLI, served by the real binary as a child process.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use iohr_certs::{ControllerPki, Validity};
use iohr_controller::store::{Store, sqlite_url};
use sqlx::{AssertSqlSafe, Connection};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The account `init` creates; runs and agents all belong to it.
pub const ACCOUNT: &str = "default";

/// How long one CLI command (init, token create, set-plan) may take.
const CLI_TIMEOUT: Duration = Duration::from_secs(60);
/// How long `serve` may take to print its two addresses.
const SERVE_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, Clone)]
pub enum Backend {
    Sqlite,
    Postgres { admin_url: String },
}

impl Backend {
    pub fn name(&self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres { .. } => "postgres",
        }
    }
}

/// One scenario's controller state on disk (and in PostgreSQL).
pub struct Environment {
    bin: PathBuf,
    pub data_dir: PathBuf,
    /// `--database-url` for every command, PostgreSQL only.
    database_url: Option<String>,
    /// (admin URL, database name) of the database this environment created.
    postgres: Option<(String, String)>,
    /// More arguments for `serve` (limits, for one).
    pub serve_args: Vec<String>,
}

impl Environment {
    /// Makes the data dir and, for PostgreSQL, a fresh database named after the scenario.
    pub async fn create(
        bin: &Path,
        backend: &Backend,
        data_dir: PathBuf,
        label: &str,
    ) -> anyhow::Result<Environment> {
        std::fs::create_dir_all(&data_dir)
            .with_context(|| format!("creating {}", data_dir.display()))?;
        let mut env = Environment {
            bin: bin.to_path_buf(),
            data_dir,
            database_url: None,
            postgres: None,
            serve_args: Vec::new(),
        };
        if let Backend::Postgres { admin_url } = backend {
            let name = database_name(label);
            let mut admin = sqlx::PgConnection::connect(admin_url)
                .await
                .with_context(|| format!("connecting to the admin database {admin_url}"))?;
            // The name is made here of [a-z0-9_] only, so formatting it in is safe.
            sqlx::query(AssertSqlSafe(format!("CREATE DATABASE {name}")))
                .execute(&mut admin)
                .await
                .with_context(|| format!("creating database {name}"))?;
            let _ = admin.close().await;
            env.database_url = Some(replace_database(admin_url, &name)?);
            env.postgres = Some((admin_url.clone(), name));
        }
        Ok(env)
    }

    pub fn store_url(&self) -> String {
        self.database_url
            .clone()
            .unwrap_or_else(|| sqlite_url(&self.data_dir))
    }

    fn store_args(&self) -> Vec<String> {
        let mut args = vec![
            "--data-dir".to_string(),
            self.data_dir.display().to_string(),
        ];
        if let Some(url) = &self.database_url {
            args.push("--database-url".to_string());
            args.push(url.clone());
        }
        args
    }

    /// Runs one `iohr-controller` CLI command and returns its stdout.
    async fn cli(&self, words: &[&str]) -> anyhow::Result<String> {
        let mut command = Command::new(&self.bin);
        command
            .args(words)
            .args(self.store_args())
            .stdin(Stdio::null())
            .kill_on_drop(true);
        let output = tokio::time::timeout(CLI_TIMEOUT, command.output())
            .await
            .with_context(|| format!("`iohr-controller {}` timed out", words.join(" ")))?
            .with_context(|| format!("running {}", self.bin.display()))?;
        if !output.status.success() {
            bail!(
                "`iohr-controller {}` failed ({}): {}",
                words.join(" "),
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// `init`, an API token, and the plan lifted to `max_running`; returns the token.
    pub async fn set_up(&self, max_running: u64) -> anyhow::Result<String> {
        self.cli(&["init"]).await?;
        let out = self
            .cli(&[
                "token",
                "create",
                "--account",
                ACCOUNT,
                "--scope",
                "reliability:run",
                "--scope",
                "reliability:read",
            ])
            .await?;
        // The secret is alone on the last line.
        let token = out
            .lines()
            .rev()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .context("`token create` printed no token")?
            .to_string();
        let max = max_running.to_string();
        self.cli(&[
            "account",
            "set-plan",
            "--name",
            ACCOUNT,
            "--max-running",
            &max,
        ])
        .await?;
        Ok(token)
    }

    /// Issues `count` agent certificates with the library (as `agent-cert` does, without a
    /// process per agent) and registers them in the store; returns their identity dirs.
    pub async fn issue_agents(&self, count: usize) -> anyhow::Result<Vec<(String, PathBuf)>> {
        let pki = ControllerPki::in_data_dir(&self.data_dir);
        let store = Store::open(&self.store_url())
            .await
            .context("opening the store to register agent certificates")?;
        let account = store
            .account_by_name(ACCOUNT)
            .await?
            .context("no account `default` (did init run?)")?;
        let mut agents = Vec::with_capacity(count);
        for i in 0..count {
            let name = format!("bench-agent-{i:04}");
            let dir = self.data_dir.join("agents").join(&name);
            let issued = {
                let (pki, name, dir) = (pki.clone(), name.clone(), dir.clone());
                // Key generation and signing are CPU work: keep them off the runtime.
                tokio::task::spawn_blocking(move || {
                    iohr_certs::issue_agent(&pki, ACCOUNT, &name, &dir, Validity::default())
                })
                .await??
            };
            store
                .register_agent_cert(&account.id, &name, &issued.fingerprint)
                .await?;
            agents.push((name, dir));
        }
        store.close().await;
        Ok(agents)
    }

    /// Starts `serve` on loopback ports chosen by the OS.
    pub async fn serve(&self) -> anyhow::Result<Controller> {
        self.serve_as("controller", &[]).await
    }

    /// Starts `serve` with more flags (`--replica`), its log in `NAME.log`.
    pub async fn serve_as(&self, name: &str, extra: &[&str]) -> anyhow::Result<Controller> {
        self.serve_at(name, "127.0.0.1:0", "127.0.0.1:0", extra)
            .await
    }

    /// Starts `serve` on the given API and agent link addresses (a replica started again
    /// where it was), its log in `NAME.log`.
    pub async fn serve_at(
        &self,
        name: &str,
        api_addr: &str,
        agent_addr: &str,
        extra: &[&str],
    ) -> anyhow::Result<Controller> {
        let log_path = self.data_dir.join(format!("{name}.log"));
        let log = std::fs::File::create(&log_path)
            .with_context(|| format!("creating {}", log_path.display()))?;
        let mut child = Command::new(&self.bin)
            .arg("serve")
            .args(self.store_args())
            .args(["--api-addr", api_addr, "--agent-addr", agent_addr])
            .args(&self.serve_args)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            // Its log goes to a file: a pipe nobody drains would stall it.
            .stderr(Stdio::from(log))
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {} serve", self.bin.display()))?;
        let stdout = child.stdout.take().context("serve's stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let (mut api, mut agent) = (None, None);
        let deadline = Instant::now() + SERVE_TIMEOUT;
        while api.is_none() || agent.is_none() {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = tokio::time::timeout(left, lines.next_line())
                .await
                .context("serve did not print its addresses in time")??;
            let Some(line) = line else {
                bail!("serve exited before listening; see {}", log_path.display());
            };
            if let Some(rest) = line.strip_prefix("api listening on ") {
                api = Some(rest.trim().to_string());
            } else if let Some(rest) = line.strip_prefix("agent link listening on ") {
                agent = Some(rest.trim().to_string());
            }
        }
        // Keep reading its stdout so a later print can never block it on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(Controller {
            child,
            api_url: api.context("no api address")?,
            agent_url: agent.context("no agent link address")?,
            log_path,
        })
    }

    /// Drops this environment's PostgreSQL database, if it made one.
    pub async fn drop_database(&self) -> anyhow::Result<()> {
        let Some((admin_url, name)) = &self.postgres else {
            return Ok(());
        };
        let mut admin = sqlx::PgConnection::connect(admin_url).await?;
        // FORCE: a killed controller's backends may not have noticed yet.
        sqlx::query(AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
        )))
        .execute(&mut admin)
        .await
        .with_context(|| format!("dropping database {name}"))?;
        let _ = admin.close().await;
        Ok(())
    }
}

/// A running `iohr-controller serve`.
pub struct Controller {
    child: Child,
    pub api_url: String,
    pub agent_url: String,
    pub log_path: PathBuf,
}

impl Controller {
    /// SIGTERM, then SIGKILL if it has not exited within five seconds.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        if let Some(pid) = self.child.id() {
            // Graceful first, so PostgreSQL sees its connections closed properly.
            let _ = Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .await;
            if tokio::time::timeout(Duration::from_secs(5), self.child.wait())
                .await
                .is_ok()
            {
                return Ok(());
            }
        }
        self.child.kill().await.context("killing the controller")?;
        Ok(())
    }

    /// SIGKILL, then reaps it: a crash, with no chance to close anything.
    #[allow(dead_code)] // iohr-bench-soak
    pub async fn kill(mut self) -> anyhow::Result<()> {
        self.child.kill().await.context("killing the controller")
    }

    /// The process id, while it runs.
    #[allow(dead_code)] // iohr-bench-soak
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// The controller's resident memory from /proc, in MiB, when it can be read.
    pub fn rss_mib(&self) -> Option<f64> {
        let pid = self.child.id()?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let kb: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()?;
        Some(kb / 1024.0)
    }

    /// CPU seconds (user + system) the controller has used, from /proc.
    pub fn cpu_seconds(&self) -> Option<f64> {
        cpu_seconds(&format!("/proc/{}/stat", self.child.id()?))
    }
}

/// CPU seconds of every controller together, when each can be read.
pub fn cpu_seconds_of(controllers: &[Controller]) -> Option<f64> {
    controllers.iter().map(Controller::cpu_seconds).sum()
}

/// Resident memory of every controller together, in MiB, when each can be read.
pub fn rss_mib_of(controllers: &[Controller]) -> Option<f64> {
    controllers.iter().map(Controller::rss_mib).sum()
}

/// CPU seconds (user + system, all threads) of a process, from its /proc stat file.
pub fn cpu_seconds(stat_path: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(stat_path).ok()?;
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12 after ')'.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    // USER_HZ is 100 on every Linux this runs on.
    Some((utime + stime) / 100.0)
}

fn database_name(label: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let label: String = label
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    format!("iohr_bench_{}_{}_{nanos:09}", std::process::id(), label)
}

/// The admin URL with its database replaced (query string kept).
fn replace_database(admin_url: &str, name: &str) -> anyhow::Result<String> {
    let (base, query) = match admin_url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (admin_url, None),
    };
    let scheme_end = base.find("://").context("admin URL has no scheme")? + 3;
    let path_start = base[scheme_end..]
        .find('/')
        .map(|i| i + scheme_end)
        .unwrap_or(base.len());
    let mut url = format!("{}/{name}", &base[..path_start]);
    if let Some(q) = query {
        url.push('?');
        url.push_str(q);
    }
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_is_replaced_in_the_url() {
        assert_eq!(
            replace_database("postgres://postgres@127.0.0.1:5432/test", "x").unwrap(),
            "postgres://postgres@127.0.0.1:5432/x"
        );
        assert_eq!(
            replace_database("postgres://u:p@h/test?sslmode=disable", "y").unwrap(),
            "postgres://u:p@h/y?sslmode=disable"
        );
        assert_eq!(
            replace_database("postgres://h:5432", "z").unwrap(),
            "postgres://h:5432/z"
        );
    }

    #[test]
    fn database_names_are_plain_identifiers() {
        let name = database_name("Lat-1000/sqlite");
        assert!(
            name.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        );
    }
}
