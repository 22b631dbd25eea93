//! GitHub's own webhook examples and signatures for the trigger tests: the payloads of
//! npm `@octokit/webhooks-examples` and `sign()` of `@octokit/webhooks-methods`, run by
//! node from `$IOHR_FORGE_NODE_MODULES` (tests/forge, installed by tests/run). Missing
//! tools fail loudly with how to get them; nothing is skipped.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::Value;

/// Where the forge tests' npm packages are: `IOHR_FORGE_NODE_MODULES` (tests/run sets
/// it), else the build directory's `target/forge/node_modules`; each of `needs` (a path
/// inside it) must be there, or the test fails saying how to get them.
pub fn node_modules_with(needs: &[&str]) -> PathBuf {
    let dir = std::env::var_os("IOHR_FORGE_NODE_MODULES")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/forge/node_modules")
        });
    for need in needs {
        assert!(
            dir.join(need).exists(),
            "{} lacks {need}: tests/run installs tests/forge's npm packages (npm ci into \
             target/forge), or set IOHR_FORGE_NODE_MODULES",
            dir.display()
        );
    }
    dir
}

/// [`node_modules_with`] GitHub's example deliveries and their signer.
pub fn node_modules() -> PathBuf {
    node_modules_with(&["@octokit/webhooks-examples", "@octokit/webhooks-methods"])
}

/// The first example payload of GitHub's `event` with `action` (any action when `None`).
pub fn github_example(event: &str, action: Option<&str>) -> Value {
    let path = node_modules().join("@octokit/webhooks-examples/api.github.com/index.json");
    let text = std::fs::read_to_string(&path).expect("read the webhooks examples");
    let all: Vec<Value> = serde_json::from_str(&text).expect("the examples are JSON");
    let examples = all
        .iter()
        .find(|e| e["name"] == event)
        .unwrap_or_else(|| panic!("no examples of {event}"))["examples"]
        .as_array()
        .expect("examples")
        .clone();
    examples
        .into_iter()
        .find(|e| action.is_none_or(|a| e["action"] == a))
        .unwrap_or_else(|| panic!("no {event} example with action {action:?}"))
}

/// `sha256=HEX`, as `@octokit/webhooks-methods`' `sign(secret, payload)` makes it.
pub fn github_sign(secret: &str, body: &[u8]) -> String {
    let module = node_modules().join("@octokit/webhooks-methods/dist-node/index.js");
    let script = "const fs = require('fs'); \
        import(process.env.MODULE).then(async (m) => { \
          const body = fs.readFileSync(0, 'utf8'); \
          process.stdout.write(await m.sign(process.env.SECRET, body)); })";
    let mut child = Command::new("node")
        .args(["-e", script])
        .env("MODULE", module)
        .env("SECRET", secret)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("node (20 or newer) on PATH");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(body)
        .expect("write the body to node");
    let output = child.wait_with_output().expect("node signed");
    assert!(output.status.success(), "node's sign() failed");
    String::from_utf8(output.stdout).expect("a signature")
}
