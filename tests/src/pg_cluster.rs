//! A private PostgreSQL cluster for the tests that break PostgreSQL itself (issue 34,
//! scenario 3: a replica cut from it, the server stopped and started mid-run). Never the
//! shared server on 127.0.0.1:5432, which other tests use: `initdb` and `pg_ctl` of the
//! machine's PostgreSQL (`/usr/lib/postgresql/VERSION/bin`) make one in a temp dir, trust
//! auth, on a free port, listening on the addresses the test gives (loopback, and a
//! partition namespace's host address so that a process inside reaches it over the veth
//! pair). Run as the `postgres` user when the test runs as root (PostgreSQL refuses root).
//!
//! Stopped (`pg_ctl stop -m immediate`) and deleted when dropped. Where the machine has no
//! PostgreSQL binaries or no `postgres` user, [`PgCluster::start`] fails the test with how
//! to fix it.

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::setup::{Backend, Installation};

const FIX: &str = "the PostgreSQL partition tests start a private cluster with the machine's \
                   PostgreSQL server binaries (`apt-get install -y postgresql`, which gives \
                   /usr/lib/postgresql/VERSION/bin/initdb and pg_ctl, and the `postgres` user \
                   they run as under root)";

#[derive(Debug)]
pub struct PgCluster {
    dir: PathBuf,
    bin: PathBuf,
    pub port: u16,
    /// The address clients dial: the first of those it listens on.
    pub host: IpAddr,
    /// Run the server's tools as this user (root may not run PostgreSQL).
    user: Option<String>,
}

/// The newest `/usr/lib/postgresql/VERSION/bin` with `initdb` (`IOHR_PG_BIN` overrides).
fn server_bin() -> Result<PathBuf, String> {
    if let Ok(dir) = std::env::var("IOHR_PG_BIN") {
        return Ok(PathBuf::from(dir));
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .map_err(|e| format!("/usr/lib/postgresql: {e}"))?
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let version = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions
        .pop()
        .map(|(_, bin)| bin)
        .ok_or_else(|| "no /usr/lib/postgresql/VERSION/bin/initdb".to_string())
}

fn free_port() -> u16 {
    std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl PgCluster {
    /// A new cluster listening on `listen` (the first is the one clients are told), or a
    /// failed test saying what the machine lacks.
    pub fn start(listen: &[IpAddr]) -> PgCluster {
        PgCluster::try_start(listen).unwrap_or_else(|e| panic!("{e}\n{FIX}"))
    }

    fn try_start(listen: &[IpAddr]) -> Result<PgCluster, String> {
        let bin = server_bin()?;
        let dir = std::env::temp_dir().join(format!("iohr-pg-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let user = nix::unistd::Uid::effective()
            .is_root()
            .then(|| "postgres".to_string());
        let cluster = PgCluster {
            dir,
            bin,
            port: free_port(),
            host: listen
                .first()
                .copied()
                .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST)),
            user,
        };
        if let Some(user) = &cluster.user {
            cluster.run(
                "chown",
                Command::new("chown")
                    .args([user.as_str()])
                    .arg(&cluster.dir),
            )?;
        }
        let data = cluster.data().display().to_string();
        cluster.run(
            "initdb",
            cluster.tool("initdb").args([
                "-D",
                &data,
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
                "--encoding=UTF8",
            ]),
        )?;
        let addresses: Vec<String> = listen.iter().map(IpAddr::to_string).collect();
        // Small and quick to stop; the socket in the cluster's own dir, not /var/run's.
        let conf = format!(
            "listen_addresses = '{}'\nport = {}\nunix_socket_directories = '{}'\n\
             fsync = off\nmax_connections = 100\nshared_buffers = 16MB\n",
            addresses.join(","),
            cluster.port,
            cluster.dir.display()
        );
        let auto = cluster.data().join("postgresql.auto.conf");
        std::fs::write(&auto, conf).map_err(|e| format!("{}: {e}", auto.display()))?;
        let hba = cluster.data().join("pg_hba.conf");
        std::fs::write(
            &hba,
            "local all all trust\nhost all all 0.0.0.0/0 trust\nhost all all ::/0 trust\n",
        )
        .map_err(|e| format!("{}: {e}", hba.display()))?;
        cluster.start_again();
        Ok(cluster)
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn tool(&self, name: &str) -> Command {
        let program = self.bin.join(name);
        match &self.user {
            Some(user) => {
                let mut command = Command::new("runuser");
                command.args(["-u", user, "--"]).arg(program);
                command
            }
            None => Command::new(program),
        }
    }

    fn run(&self, what: &str, command: &mut Command) -> Result<(), String> {
        let out = command
            .output()
            .map_err(|e| format!("{what}: cannot run: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{what} exited {}: {}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout).trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }

    fn pg_ctl(&self, args: &[&str]) {
        let data = self.data().display().to_string();
        let log = self.dir.join("server.log").display().to_string();
        let mut command = self.tool("pg_ctl");
        command.args(["-D", &data, "-l", &log, "-w", "-t", "60"]);
        command.args(args);
        self.run(&format!("pg_ctl {args:?}"), &mut command)
            .unwrap_or_else(|e| {
                panic!(
                    "{e}\nits log:\n{}\n{FIX}",
                    crate::setup::read_tail(Path::new(&log), 20)
                )
            });
    }

    /// Starts the server and waits until it accepts connections.
    pub fn start_again(&self) {
        self.pg_ctl(&["start"]);
    }

    /// Stops the server: `fast` ends every session and shuts down cleanly (a restart an
    /// operator does); the clients see their connections closed.
    pub fn stop(&self) {
        self.pg_ctl(&["stop", "-m", "fast"]);
    }

    /// `postgres://postgres@HOST:PORT/DB`.
    pub fn url(&self, database: &str) -> String {
        let host = match self.host {
            IpAddr::V6(ip) => format!("[{ip}]"),
            IpAddr::V4(ip) => ip.to_string(),
        };
        format!("postgres://postgres@{host}:{}/{database}", self.port)
    }

    /// A new empty database: its URL.
    pub async fn database(&self) -> String {
        use sqlx::Connection;
        let admin = self.url("postgres");
        let mut conn = sqlx::PgConnection::connect(&admin)
            .await
            .unwrap_or_else(|e| panic!("the private cluster at {admin}: {e}"));
        let name = format!("iohr_e2e_{}", uuid::Uuid::new_v4().simple());
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut conn)
            .await
            .expect("create the test database");
        self.url(&name)
    }

    /// An installation (`iohr-controller init`, its certificate naming `names` too) on a
    /// new database of this cluster.
    pub async fn installation(&self, names: &[&str]) -> Installation {
        let root =
            std::env::temp_dir().join(format!("iohr-e2e-pg-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&root).expect("temp dir");
        let install = Installation {
            data_dir: root.join("controller"),
            root,
            database_url: Some(self.database().await),
            backend: Backend::Postgres,
        };
        let mut init = vec!["init"];
        for name in names {
            init.extend(["--server-name", name]);
        }
        install.ctl(&init);
        install
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let data = self.data().display().to_string();
        let _ = self
            .tool("pg_ctl")
            .args(["-D", &data, "-w", "-t", "30", "stop", "-m", "immediate"])
            .output();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        } else {
            eprintln!("kept the private cluster's files in {}", self.dir.display());
        }
    }
}
