//! Third-party Python clients (the official MCP SDK and the others pinned in
//! `tests/requirements.txt`) run from the virtual environment tests/run makes in the
//! build directory. Without it a test fails with how to make it; it never skips.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

/// The venv's python: `IOHR_PYTHON`, else `py-venv/bin/python` in the target dir.
pub fn python() -> PathBuf {
    if let Some(path) = std::env::var_os("IOHR_PYTHON") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("test executable path");
    // target/debug/deps/NAME-HASH -> target
    let target = exe.ancestors().nth(3).expect("target dir");
    let python = target.join("py-venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: this test drives a third-party Python client from a virtual \
         environment; tests/run makes it (python3 -m venv target/py-venv && \
         target/py-venv/bin/pip install -r tests/requirements.txt), or set IOHR_PYTHON",
        python.display()
    );
    python
}

/// A script of this crate (`tests/SCRIPT`), given `config` as its one argument; it must
/// exit 0 and print one JSON value, which is returned.
pub async fn run_script(script: &str, config: &Value, limit: Duration) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(script);
    let run = tokio::process::Command::new(python())
        .arg(&path)
        .arg(config.to_string())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(limit, run)
        .await
        .unwrap_or_else(|_| panic!("{script} ended within {limit:?}"))
        .unwrap_or_else(|e| panic!("run {script}: {e}"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{script} failed: {stderr}");
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "{script} printed no JSON ({e}): {}\n{stderr}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}
