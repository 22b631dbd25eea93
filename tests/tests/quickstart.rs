//! The quickstart as a new user runs it (issue 37's frictions), twice in a row in a state
//! directory of its own and on free ports: the first run ends with a passed run, the
//! token it made reads the audit lines (`reliability:audit`), and the second run (a
//! restart) keeps the sample target on the same port, so the URLs of earlier runs,
//! schedules and compares still name it. `quickstart.sh down` stops everything, also when
//! the test fails.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use iohr_tests::process::bin;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Quickstart {
    state: PathBuf,
    api_port: u16,
    agent_port: u16,
}

impl Quickstart {
    fn run(&self, command: &str) -> Output {
        // target/debug/iohr -> target
        let target_dir = bin("iohr")
            .parent()
            .unwrap()
            .parent()
            .unwrap()
            .to_path_buf();
        Command::new("bash")
            .arg(root().join("deploy/quickstart.sh"))
            .arg(command)
            .env("IOHR_QUICKSTART_STATE", &self.state)
            .env("IOHR_QUICKSTART_NO_BUILD", "1")
            .env("IOHR_API_PORT", self.api_port.to_string())
            .env("IOHR_AGENT_PORT", self.agent_port.to_string())
            .env("CARGO_TARGET_DIR", target_dir)
            .env_remove("IOHR_TARGET_PORT")
            .output()
            .expect("run deploy/quickstart.sh")
    }

    /// The sample target's URL the summary names.
    fn target(output: &Output) -> String {
        let out = String::from_utf8_lossy(&output.stdout);
        out.lines()
            .find_map(|l| l.trim().strip_prefix("sample target"))
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("no sample target line: {out}"))
            .to_string()
    }
}

impl Drop for Quickstart {
    fn drop(&mut self) {
        let _ = self.run("down");
        let _ = std::fs::remove_dir_all(&self.state);
    }
}

fn passed(output: &Output, what: &str) {
    assert!(
        output.status.success(),
        "{what}: {:?}\nstdout: {}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn a_restart_keeps_the_target_and_the_token_reads_the_audit() {
    let quickstart = Quickstart {
        state: std::env::temp_dir().join(format!("iohr-quickstart-{}", std::process::id())),
        api_port: free_port(),
        agent_port: free_port(),
    };
    let first = quickstart.run("up");
    passed(&first, "the first quickstart");
    let target = Quickstart::target(&first);
    assert!(target.starts_with("http://127.0.0.1:"), "{target}");

    let token = std::fs::read_to_string(quickstart.state.join("token")).unwrap();
    let audit = Command::new(bin("iohr"))
        .args([
            "--server",
            &format!("http://127.0.0.1:{}", quickstart.api_port),
            "--token",
            token.trim(),
            "reliability",
            "audit",
        ])
        .output()
        .unwrap();
    passed(&audit, "iohr reliability audit with the quickstart's token");
    assert!(
        String::from_utf8_lossy(&audit.stdout).contains("run.start"),
        "the quickstart's run is an audit line: {}",
        String::from_utf8_lossy(&audit.stdout)
    );

    let again = quickstart.run("up");
    passed(&again, "the quickstart again (a restart)");
    assert_eq!(
        Quickstart::target(&again),
        target,
        "the sample target keeps its port"
    );
}
