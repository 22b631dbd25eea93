//! A replica of the soak (`iohr-bench-soak`): its fixed addresses, its process now, and
//! every lifetime it had, with the RSS and the agents linked to it sampled over each.

use anyhow::Context;
use serde_json::{Value, json};

use crate::controller::{Controller, Environment};
use crate::soak_readback::round1;

/// One lifetime of a replica's process.
pub(crate) struct Life {
    pub(crate) number: u32,
    pub(crate) pid: Option<u32>,
    pub(crate) started_s: f64,
    pub(crate) ended_s: Option<f64>,
    pub(crate) ended_by: &'static str,
    /// (seconds since the soak's start, RSS MiB, agents linked to it).
    pub(crate) rss: Vec<(f64, f64, i64)>,
    pub(crate) cpu_s: Option<f64>,
    pub(crate) log: String,
}

impl Life {
    pub(crate) fn to_json(&self) -> Value {
        let values: Vec<f64> = self.rss.iter().map(|s| s.1).collect();
        let max = values
            .iter()
            .cloned()
            .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
        json!({
            "life": self.number,
            "pid": self.pid,
            "from_s": round1(self.started_s),
            "to_s": self.ended_s.map(round1),
            "ended_by": self.ended_by,
            "rss_mib_first": values.first().map(|v| round1(*v)),
            "rss_mib_last": values.last().map(|v| round1(*v)),
            "rss_mib_max": max.map(round1),
            "rss_samples": self.rss.iter().map(|(t, v, _)| json!([round1(*t), round1(*v)])).collect::<Vec<_>>(),
            "agents_samples": self.rss.iter().map(|(t, _, n)| json!([round1(*t), n])).collect::<Vec<_>>(),
            "cpu_s": self.cpu_s.map(round1),
            "log": self.log,
            "log_lines": log_lines(&self.log),
        })
    }
}

/// How many lines of a replica's log say what matters here.
fn log_lines(path: &str) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let count = |needle: &str| text.lines().filter(|l| l.contains(needle)).count();
    json!({
        "took_over_reported_lease": count("took over a lease its agent brought"),
        "took_over_stopped_replicas_lease": count("took over the lease of a replica that stopped"),
        "agent_connected": count("agent connected"),
        "warn": count(" WARN "),
        "error": count(" ERROR "),
    })
}

/// A replica: its fixed addresses, its process now, and every lifetime it had.
pub(crate) struct Replica {
    pub(crate) name: String,
    pub(crate) api_addr: String,
    pub(crate) agent_addr: String,
    pub(crate) current: Option<Controller>,
    pub(crate) lives: Vec<Life>,
}

impl Replica {
    pub(crate) async fn start(
        &mut self,
        env: &Environment,
        extra: &[String],
        at_s: f64,
    ) -> anyhow::Result<()> {
        let number = self.lives.len() as u32 + 1;
        let log = format!("replica-{}-{number}", self.name);
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let controller = env
            .serve_at(&log, &self.api_addr, &self.agent_addr, &extra)
            .await
            .with_context(|| format!("starting replica {} (life {number})", self.name))?;
        self.lives.push(Life {
            number,
            pid: controller.pid(),
            started_s: at_s,
            ended_s: None,
            ended_by: "",
            rss: Vec::new(),
            cpu_s: None,
            log: controller.log_path.display().to_string(),
        });
        self.current = Some(controller);
        Ok(())
    }

    /// Its RSS now, and `agents`: how many agents are linked to it.
    pub(crate) fn sample(&mut self, at_s: f64, agents: i64) {
        if let (Some(controller), Some(life)) = (&self.current, self.lives.last_mut())
            && let Some(rss) = controller.rss_mib()
        {
            life.rss.push((at_s, rss, agents));
        }
    }

    /// Ends the current process: SIGKILL (`kill`) or SIGTERM (the soak's end).
    pub(crate) async fn end(&mut self, at_s: f64, kill: bool) -> anyhow::Result<()> {
        let agents = self
            .lives
            .last()
            .and_then(|l| l.rss.last())
            .map_or(0, |s| s.2);
        self.sample(at_s, agents);
        let Some(controller) = self.current.take() else {
            return Ok(());
        };
        let cpu = controller.cpu_seconds();
        if let Some(life) = self.lives.last_mut() {
            life.cpu_s = cpu;
            life.ended_s = Some(at_s);
            life.ended_by = if kill {
                "SIGKILL"
            } else {
                "SIGTERM at the end"
            };
        }
        if kill {
            controller.kill().await
        } else {
            controller.stop().await
        }
    }
}
