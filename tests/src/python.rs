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

/// A script that asks the test to act while it runs: each line it prints that is a JSON
/// object with an `"ask"` is answered with one line on its stdin, the JSON value
/// `act(that object)` gives; the first other line is what it saw, returned. It must then
/// exit 0 within `limit` of its start, like [`run_script`].
pub async fn run_script_asking<F>(
    script: &str,
    config: &Value,
    limit: Duration,
    mut act: F,
) -> Value
where
    F: AsyncFnMut(&Value) -> Value,
{
    use std::process::Stdio;
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(script);
    let mut child = tokio::process::Command::new(python())
        .arg(&path)
        .arg(config.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("run {script}: {e}"));
    let mut stdin = child.stdin.take().expect("stdin");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    // Read all along, so a talkative script never blocks on a full pipe.
    let mut stderr_pipe = child.stderr.take().expect("stderr");
    let stderr = tokio::spawn(async move {
        let mut text = String::new();
        let _ = stderr_pipe.read_to_string(&mut text).await;
        text
    });
    let deadline = tokio::time::Instant::now() + limit;
    let mut seen = None;
    while seen.is_none() {
        let line = match tokio::time::timeout_at(deadline, lines.next_line()).await {
            Ok(Ok(Some(line))) => line,
            Ok(Ok(None)) | Ok(Err(_)) => break,
            Err(_) => {
                let _ = child.kill().await;
                panic!(
                    "{script} ended within {limit:?}: {}",
                    stderr.await.unwrap_or_default()
                );
            }
        };
        let value: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("{script} printed a line that is not JSON ({e}): {line}"));
        if value.get("ask").is_some() {
            let answer = act(&value).await;
            stdin
                .write_all(format!("{answer}\n").as_bytes())
                .await
                .expect("answer the script");
        } else {
            seen = Some(value);
        }
    }
    let status = tokio::time::timeout_at(deadline, child.wait())
        .await
        .unwrap_or_else(|_| panic!("{script} exited within {limit:?}"))
        .expect("wait for the script");
    let stderr = stderr.await.unwrap_or_default();
    assert!(status.success(), "{script} failed: {stderr}");
    seen.unwrap_or_else(|| panic!("{script} printed no JSON result: {stderr}"))
}
