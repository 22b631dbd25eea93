//! The machine a scenario runs on: CPU used by the controller and the bench, whether the
//! rest of the machine is quiet, and the open-files limit.

use std::time::{Duration, Instant};

use anyhow::bail;
use serde_json::{Value, json};

use crate::controller::{self, Controller};
use crate::report::round2;
use crate::{Opts, Output};

/// CPU used by the controller and by the bench itself over a stretch of wall time: on a
/// small machine the bench competes with the controller, and the reader should see it.
pub(crate) struct CpuMeter {
    controller: Option<f64>,
    bench: Option<f64>,
    postgres: f64,
    machine: Option<f64>,
    at: Instant,
}

pub(crate) struct CpuUse {
    controller_s: Option<f64>,
    bench_s: Option<f64>,
    /// The PostgreSQL server's processes (on this machine), part of the system under test.
    postgres_s: f64,
    /// Busy CPU time of every other process: anything large here means the figures were
    /// taken on a busy machine.
    rest_s: Option<f64>,
    wall_s: f64,
}

impl CpuMeter {
    pub(crate) fn start(controllers: &[Controller]) -> CpuMeter {
        CpuMeter {
            controller: controller::cpu_seconds_of(controllers),
            bench: controller::cpu_seconds("/proc/self/stat"),
            postgres: postgres_cpu_seconds(),
            machine: machine_busy_seconds(),
            at: Instant::now(),
        }
    }

    pub(crate) fn stop(self, controllers: &[Controller]) -> CpuUse {
        let used = |before: Option<f64>, after: Option<f64>| match (before, after) {
            (Some(a), Some(b)) => Some(b - a),
            _ => None,
        };
        let controller_s = used(self.controller, controller::cpu_seconds_of(controllers));
        let bench_s = used(self.bench, controller::cpu_seconds("/proc/self/stat"));
        // Backends that exited during the load are missed: a slight undercount.
        let postgres_s = (postgres_cpu_seconds() - self.postgres).max(0.0);
        let machine_s = used(self.machine, machine_busy_seconds());
        let rest_s = match (machine_s, controller_s, bench_s) {
            (Some(m), Some(c), Some(b)) => Some((m - c - b - postgres_s).max(0.0)),
            _ => None,
        };
        CpuUse {
            controller_s,
            bench_s,
            postgres_s,
            rest_s,
            wall_s: self.at.elapsed().as_secs_f64(),
        }
    }
}

impl CpuUse {
    fn share(&self, seconds: Option<f64>) -> String {
        seconds.map_or("?".to_string(), |s| {
            format!(
                "{s:.1} s ({:.0}% of one core)",
                100.0 * s / self.wall_s.max(f64::EPSILON)
            )
        })
    }

    pub(crate) fn describe(&self) -> String {
        format!(
            "controller {}, bench {}, postgres {}, other processes {}, over {:.1} s",
            self.share(self.controller_s),
            self.share(self.bench_s),
            self.share(Some(self.postgres_s)),
            self.share(self.rest_s),
            self.wall_s
        )
    }

    pub(crate) fn to_json(&self) -> Value {
        json!({
            "wall_s": round2(self.wall_s),
            "controller_s": self.controller_s.map(round2),
            "bench_s": self.bench_s.map(round2),
            "postgres_s": round2(self.postgres_s),
            "other_processes_s": self.rest_s.map(round2),
        })
    }
}

pub(crate) fn machine() -> Value {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_total_kb = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok());
    json!({
        "cpus": std::thread::available_parallelism().map(|n| n.get()).ok(),
        "mem_total_gib": mem_total_kb.map(|kb| round2(kb as f64 / 1024.0 / 1024.0)),
        "open_files_soft_limit": open_files_limit(),
    })
}

/// Busy CPU seconds of the whole machine (all CPUs, everything but idle and iowait),
/// from /proc/stat.
fn machine_busy_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let ticks: Vec<f64> = stat
        .lines()
        .next()?
        .strip_prefix("cpu ")?
        .split_whitespace()
        .filter_map(|t| t.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal ...: idle and iowait are not busy.
    let total: f64 = ticks.iter().take(8).sum();
    let idle = ticks.get(3)? + ticks.get(4)?;
    Some((total - idle) / 100.0)
}

/// CPU seconds of every process named `postgres` on this machine (the server and its
/// backends), so the database's share is not mistaken for a busy machine.
fn postgres_cpu_seconds() -> f64 {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter(|e| {
            std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim() == "postgres")
        })
        .filter_map(|e| controller::cpu_seconds(&e.path().join("stat").to_string_lossy()))
        .sum()
}

/// Waits (at most `limit`) until the rest of the machine is nearly idle, so a scenario
/// does not start while something else (a build, a test run) holds the CPUs; says so
/// when it never gets quiet.
pub(crate) async fn wait_for_quiet(limit: Duration, out: &Output) {
    const SAMPLE: Duration = Duration::from_secs(2);
    // A quarter of one core busy on average counts as quiet.
    const QUIET_SHARE: f64 = 0.25;
    let deadline = Instant::now() + limit;
    let mut share = None;
    while Instant::now() < deadline {
        let before = machine_busy_seconds();
        tokio::time::sleep(SAMPLE).await;
        let (Some(a), Some(b)) = (before, machine_busy_seconds()) else {
            return;
        };
        let busy = (b - a) / SAMPLE.as_secs_f64();
        if busy < QUIET_SHARE {
            return;
        }
        share = Some(busy);
    }
    if let Some(busy) = share {
        out.line(&format!(
            "  warning: the machine stayed busy ({:.0}% of one core used by other processes) for {} s; measuring anyway",
            busy * 100.0,
            limit.as_secs()
        ));
    }
}

/// The soft limit on open files, from /proc (this bench runs on Linux).
fn open_files_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

/// The bench holds a socket per agent and per run in flight, and so does the controller
/// (which inherits this limit): refuse to start rather than fail half way.
pub(crate) fn check_open_files(opts: &Opts) -> anyhow::Result<()> {
    let agents = opts
        .agents
        .iter()
        .copied()
        .chain([opts.throughput_agents])
        .max()
        .unwrap_or(0);
    let need = agents + opts.throughput_in_flight + 256;
    match open_files_limit() {
        Some(limit) if (limit as usize) < need => bail!(
            "the open-files limit is {limit}, and this bench needs about {need} (one socket per agent and per run in flight, plus files); raise it first, e.g. `ulimit -n {}`",
            need.next_power_of_two()
        ),
        _ => Ok(()),
    }
}
