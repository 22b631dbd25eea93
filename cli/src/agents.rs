//! `iohr reliability agents`: the account's agents and what they are running.

use serde::Deserialize;
use serde_json::Value;

use crate::Ctx;
use crate::error::{Failure, Result};
use crate::output::{Table, emit, emit_json, or_dash};

#[derive(Debug, Deserialize)]
struct Answer {
    agents: Vec<Agent>,
}

/// Only what the table shows; `--json` prints the answer as it came.
#[derive(Debug, Deserialize)]
struct Agent {
    name: String,
    online: bool,
    #[serde(default)]
    last_seen_at: Option<String>,
    #[serde(default)]
    environments: Vec<String>,
    max_concurrent_jobs: u64,
    #[serde(default)]
    running: Vec<Value>,
}

pub async fn execute(ctx: &Ctx) -> Result<u8> {
    let raw = ctx.api.get("/v1/reliability/agents").await?;
    let answer = Answer::deserialize(&raw)
        .map_err(|e| Failure::protocol(format!("the answer is not a list of agents: {e}")))?;
    if ctx.json {
        emit_json(&raw)?;
    } else {
        emit(&render(&answer.agents))?;
    }
    Ok(0)
}

fn render(agents: &[Agent]) -> String {
    if agents.is_empty() {
        return "no agents\n".to_string();
    }
    let mut t = Table::new(&["NAME", "ONLINE", "LAST-SEEN", "ENVIRONMENTS", "RUNNING/MAX"]);
    for agent in agents {
        t.row([
            agent.name.clone(),
            if agent.online { "yes" } else { "no" }.to_string(),
            or_dash(agent.last_seen_at.as_deref()),
            or_dash(Some(&agent.environments.join(","))),
            format!("{}/{}", agent.running.len(), agent.max_concurrent_jobs),
        ]);
    }
    t.render()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn agents_table() {
        let answer: Answer = serde_json::from_value(json!({"agents": [
            {"id": "a1", "name": "edge-1", "online": true, "last_seen_at": "2026-10-07T10:00:00Z",
             "version": "0.1.0", "environments": ["staging", "production"], "kinds": ["checks"],
             "labels": {}, "max_concurrent_jobs": 4,
             "running": [{"run_id": "r1", "lease_id": "l1", "kind": "checks", "state": "running"}]},
            {"id": "a2", "name": "edge-2", "online": false, "last_seen_at": null,
             "version": "0.1.0", "environments": [], "kinds": [], "labels": {},
             "max_concurrent_jobs": 1, "running": []}
        ]}))
        .expect("answer");
        assert_eq!(
            render(&answer.agents),
            "NAME    ONLINE  LAST-SEEN             ENVIRONMENTS        RUNNING/MAX\n\
             edge-1  yes     2026-10-07T10:00:00Z  staging,production  1/4\n\
             edge-2  no      -                     -                   0/1\n"
        );
        assert_eq!(render(&[]), "no agents\n");
    }
}
