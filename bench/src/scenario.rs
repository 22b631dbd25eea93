//! The two scenarios: POST-to-acceptance latency at a steady rate, and runs per second
//! with many runs in flight.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};

use crate::agents::{AgentBehaviour, End, RunTimes, Tracker};
use crate::controller::{Backend, Environment, rss_mib_of};
use crate::host::{CpuMeter, CpuUse};
use crate::report::{ACCEPTED, Report, fmt_opt, round2};
use crate::rig::Rig;
use crate::stats::{self, Phase};
use crate::{
    DRAIN_TIMEOUT, GOAL_ACCEPT_AGENTS, GOAL_ACCEPT_P99_MS, GOAL_SQLITE_RUNS_PER_S, Opts, Output,
};

pub(crate) async fn latency(
    opts: &Opts,
    env: &Environment,
    backend: &Backend,
    agents: usize,
    out: &Output,
) -> anyhow::Result<Value> {
    if opts.latency_rate <= 0.0 || !opts.latency_rate.is_finite() {
        bail!("--latency-rate must be a positive number");
    }
    let hold = Duration::from_millis(opts.latency_hold_ms);
    let behaviour = AgentBehaviour {
        max_concurrent_jobs: opts.max_jobs,
        hold,
    };
    // The plan must never be what a run waits for.
    let rig = Rig::start(opts, env, agents, 1_000_000, behaviour).await?;
    let meter = CpuMeter::start(&rig.controllers);
    let outcome = latency_load(opts, &rig).await;
    let cpu = meter.stop(&rig.controllers);
    let rss = rss_mib_of(&rig.controllers);
    let verified = rig.api.count_runs("passed", 100).await;
    let log = rig.controllers[0].log_path.clone();
    let (setup_s, connect_s) = (rig.setup_s, rig.connect_s);
    rig.stop().await?;
    let load = outcome?;

    let times = load.tracker.take();
    let report = Report::from_times(&times, hold);
    let accept_p99 = report.phase(ACCEPTED).map(Phase::p99_ms);
    let goal = accept_p99.map(|p99| p99 < GOAL_ACCEPT_P99_MS);

    out.line("");
    out.line(&format!(
        "== latency: {}, {} replica(s), {agents} agent(s), {} runs at {}/s, agents hold each run {} ms ==",
        backend.name(),
        opts.replicas,
        opts.latency_runs,
        opts.latency_rate,
        opts.latency_hold_ms
    ));
    out.line(&format!(
        "  setup {setup_s:.1} s (init, token, plan, {agents} certificates); {agents} agents connected in {connect_s:.1} s"
    ));
    out.line(stats::table(&report.phases).trim_end());
    out.line(&load.summary_line(&times, &verified));
    out.line(&resources_line(
        &cpu,
        rss,
        opts.keep.then_some(log.as_path()),
    ));
    if let Some(p99) = accept_p99 {
        let verdict = if p99 < GOAL_ACCEPT_P99_MS {
            "below"
        } else {
            "NOT below"
        };
        let scope = if agents == GOAL_ACCEPT_AGENTS {
            "the goal"
        } else {
            "the goal's figure (set for 1,000 agents)"
        };
        out.line(&format!(
            "  POST -> accept p99 {p99:.2} ms: {verdict} {scope} of {GOAL_ACCEPT_P99_MS} ms"
        ));
    }

    Ok(json!({
        "scenario": "latency",
        "backend": backend.name(),
        "replicas": opts.replicas,
        "agents": agents,
        "runs": opts.latency_runs,
        "rate_per_s": opts.latency_rate,
        "hold_ms": opts.latency_hold_ms,
        "max_concurrent_jobs": opts.max_jobs,
        "setup_s": round2(setup_s),
        "connect_s": round2(connect_s),
        "phases": report.phases.iter().map(Phase::to_json).collect::<Vec<_>>(),
        "accept_p99_ms": accept_p99,
        "accept_p99_below_goal": goal,
        "counts": load.counts_json(&times, &verified),
        "cpu": cpu.to_json(),
        "controller_rss_mib": rss,
    }))
}

/// What a workload did besides the per-run times.
struct Load {
    tracker: Arc<Tracker>,
    posted: usize,
    post_errors: Vec<String>,
    unfinished: usize,
    elapsed: Duration,
}

impl Load {
    /// Finished runs, runs cancelled and never finished, and re-offers.
    fn counts(&self, times: &HashMap<String, RunTimes>) -> (usize, usize, u32) {
        let finished = times.values().filter(|r| r.finished.is_some()).count();
        let cancelled = times
            .values()
            .filter(|r| r.finished.is_none() && r.cancelled.is_some())
            .count();
        let reoffers = times.values().map(|r| r.reoffers).sum();
        (finished, cancelled, reoffers)
    }

    fn summary_line(
        &self,
        times: &HashMap<String, RunTimes>,
        verified: &anyhow::Result<usize>,
    ) -> String {
        let (finished, cancelled, reoffers) = self.counts(times);
        let c = &self.tracker.counters;
        let mut line = format!(
            "  runs: {} posted, {} POST errors, {finished} finished, {cancelled} cancelled by the controller, \
             {} timed out, {} passed per the API\n  agents saw: offers {}, re-offers {reoffers}, cancels {}, \
             completions refused {}, completions stale {}, streams ended early {}",
            self.posted,
            self.post_errors.len(),
            self.unfinished,
            match verified {
                Ok(n) => n.to_string(),
                Err(e) => format!("? ({e})"),
            },
            c.offers.load(Ordering::Relaxed),
            c.cancels.load(Ordering::Relaxed),
            c.completions_refused.load(Ordering::Relaxed),
            c.completions_stale.load(Ordering::Relaxed),
            c.streams_ended.load(Ordering::Relaxed),
        );
        if let Some(first) = self.post_errors.first() {
            line.push_str(&format!("\n  first POST error: {first}"));
        }
        for reason in self.tracker.refusal_reasons() {
            line.push_str(&format!("\n  completion refused: {reason}"));
        }
        for (reason, n) in self.tracker.cancel_reasons() {
            line.push_str(&format!("\n  lease cancelled ({n}x): {reason}"));
        }
        line
    }

    fn counts_json(
        &self,
        times: &HashMap<String, RunTimes>,
        verified: &anyhow::Result<usize>,
    ) -> Value {
        let (finished, cancelled, reoffers) = self.counts(times);
        let c = &self.tracker.counters;
        json!({
            "posted": self.posted,
            "post_errors": self.post_errors.len(),
            "first_post_error": self.post_errors.first(),
            "finished": finished,
            "cancelled": cancelled,
            "timed_out": self.unfinished,
            "cancel_reasons": self.tracker.cancel_reasons(),
            "passed_per_api": verified.as_ref().ok(),
            "offers": c.offers.load(Ordering::Relaxed),
            "reoffers": reoffers,
            "cancels": c.cancels.load(Ordering::Relaxed),
            "completions_refused": c.completions_refused.load(Ordering::Relaxed),
            "completions_stale": c.completions_stale.load(Ordering::Relaxed),
            "completion_refusal_reasons": self.tracker.refusal_reasons(),
            "streams_ended_early": c.streams_ended.load(Ordering::Relaxed),
            "elapsed_s": round2(self.elapsed.as_secs_f64()),
        })
    }
}

/// Posts `latency_runs` runs at `latency_rate`, then waits for all of them to finish.
async fn latency_load(opts: &Opts, rig: &Rig) -> anyhow::Result<Load> {
    let period = Duration::try_from_secs_f64(1.0 / opts.latency_rate)
        .map_err(|e| anyhow::anyhow!("--latency-rate {}: {e}", opts.latency_rate))?;
    let mut tick = tokio::time::interval(period);
    // If the bench itself falls behind, spread the late POSTs rather than bunch them.
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let started = Instant::now();
    let mut posts = Vec::with_capacity(opts.latency_runs);
    for i in 0..opts.latency_runs {
        tick.tick().await;
        let (api, tracker) = (rig.api_at(i), rig.tracker.clone());
        posts.push(tokio::spawn(async move {
            let posted = Instant::now();
            let id = api.create_run().await?;
            tracker.created(&id, posted, Instant::now());
            anyhow::Ok(id)
        }));
    }
    let mut ids = Vec::new();
    let mut post_errors = Vec::new();
    for post in posts {
        match post.await {
            Ok(Ok(id)) => ids.push(id),
            Ok(Err(error)) => post_errors.push(format!("{error:#}")),
            Err(error) => post_errors.push(format!("task: {error}")),
        }
    }
    let drain_until = Instant::now() + Duration::from_millis(opts.latency_hold_ms) + DRAIN_TIMEOUT;
    let mut unfinished = 0;
    for id in &ids {
        let left = drain_until.saturating_duration_since(Instant::now());
        if rig.tracker.wait_end(id, left).await == End::TimedOut {
            unfinished += 1;
        }
    }
    Ok(Load {
        tracker: rig.tracker.clone(),
        posted: ids.len() + post_errors.len(),
        post_errors,
        unfinished,
        elapsed: started.elapsed(),
    })
}

pub(crate) async fn throughput(
    opts: &Opts,
    env: &Environment,
    backend: &Backend,
    out: &Output,
) -> anyhow::Result<Value> {
    let hold = Duration::from_millis(opts.throughput_hold_ms);
    let behaviour = AgentBehaviour {
        max_concurrent_jobs: opts.max_jobs,
        hold,
    };
    let agents = opts.throughput_agents;
    let rig = Rig::start(opts, env, agents, 1_000_000, behaviour).await?;
    let stop_posting = Instant::now() + Duration::from_secs(opts.throughput_seconds);
    let meter = CpuMeter::start(&rig.controllers);
    // CPU is read when the posting stops, so the wait for runs that never finish does not
    // dilute it: the figures cover the steady load only.
    let (outcome, cpu) = tokio::join!(throughput_load(opts, &rig, stop_posting), async {
        tokio::time::sleep_until(tokio::time::Instant::from_std(stop_posting)).await;
        meter.stop(&rig.controllers)
    });
    let rss = rss_mib_of(&rig.controllers);
    let max_pages = opts.throughput_max_runs / 500 + 2;
    let verified = rig.api.count_runs("passed", max_pages).await;
    let log = rig.controllers[0].log_path.clone();
    let (setup_s, connect_s) = (rig.setup_s, rig.connect_s);
    rig.stop().await?;
    let load = outcome?;
    let times = load.tracker.take();
    let report = Report::from_times(&times, hold);
    let (finished, _, _) = load.counts(&times);
    // From the first POST to the last acknowledged completion.
    let first_post = times.values().filter_map(|r| r.posted).min();
    let last_finish = times.values().filter_map(|r| r.finished).max();
    let span = match (first_post, last_finish) {
        (Some(a), Some(b)) if b > a => b - a,
        _ => load.elapsed,
    };
    let per_s = finished as f64 / span.as_secs_f64().max(f64::EPSILON);

    out.line("");
    out.line(&format!(
        "== throughput: {}, {} replica(s), {agents} agents, {} runs in flight, {} s of POSTs, agents hold each run {} ms ==",
        backend.name(),
        opts.replicas,
        opts.throughput_in_flight,
        opts.throughput_seconds,
        opts.throughput_hold_ms
    ));
    out.line(&format!(
        "  setup {setup_s:.1} s; {agents} agents connected in {connect_s:.1} s"
    ));
    out.line(&format!(
        "  {finished} runs finished in {:.2} s: {per_s:.1} runs/s",
        span.as_secs_f64()
    ));
    out.line(stats::table(&report.phases).trim_end());
    out.line(&load.summary_line(&times, &verified));
    out.line(&resources_line(
        &cpu,
        rss,
        opts.keep.then_some(log.as_path()),
    ));
    let goal = matches!(backend, Backend::Sqlite).then_some(per_s >= GOAL_SQLITE_RUNS_PER_S);
    if let Some(met) = goal {
        out.line(&format!(
            "  {per_s:.1} runs/s on SQLite: {} the goal of {GOAL_SQLITE_RUNS_PER_S}",
            if met { "meets" } else { "does NOT meet" }
        ));
    }

    Ok(json!({
        "scenario": "throughput",
        "backend": backend.name(),
        "replicas": opts.replicas,
        "agents": agents,
        "in_flight": opts.throughput_in_flight,
        "seconds": opts.throughput_seconds,
        "hold_ms": opts.throughput_hold_ms,
        "max_concurrent_jobs": opts.max_jobs,
        "setup_s": round2(setup_s),
        "connect_s": round2(connect_s),
        "finished": finished,
        "span_s": round2(span.as_secs_f64()),
        "runs_per_s": round2(per_s),
        "runs_per_s_meets_sqlite_goal": goal,
        "phases": report.phases.iter().map(Phase::to_json).collect::<Vec<_>>(),
        "counts": load.counts_json(&times, &verified),
        "cpu": cpu.to_json(),
        "controller_rss_mib": rss,
    }))
}

/// `throughput_in_flight` workers, each posting a run and waiting for it to finish, until
/// the time or the run budget is spent.
async fn throughput_load(opts: &Opts, rig: &Rig, stop_posting: Instant) -> anyhow::Result<Load> {
    let started = Instant::now();
    let budget = Arc::new(AtomicUsize::new(opts.throughput_max_runs));
    let unfinished = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::with_capacity(opts.throughput_in_flight);
    for w in 0..opts.throughput_in_flight.max(1) {
        let (api, tracker) = (rig.api_at(w), rig.tracker.clone());
        let (budget, unfinished) = (budget.clone(), unfinished.clone());
        workers.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            let mut errors = Vec::new();
            while Instant::now() < stop_posting
                && budget
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                    .is_ok()
            {
                let posted = Instant::now();
                match api.create_run().await {
                    Ok(id) => {
                        tracker.created(&id, posted, Instant::now());
                        // A cancelled run will not finish: move on to the next one.
                        if tracker.wait_end(&id, DRAIN_TIMEOUT).await == End::TimedOut {
                            unfinished.fetch_add(1, Ordering::Relaxed);
                        }
                        ids.push(id);
                    }
                    Err(error) => {
                        errors.push(format!("{error:#}"));
                        // Do not spin on a failing API: the errors are reported.
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
            (ids.len(), errors)
        }));
    }
    let mut posted = 0;
    let mut post_errors = Vec::new();
    for worker in workers {
        let (ok, errors) = worker.await.context("a throughput worker failed")?;
        posted += ok + errors.len();
        post_errors.extend(errors);
    }
    Ok(Load {
        tracker: rig.tracker.clone(),
        posted,
        post_errors,
        unfinished: usize::try_from(unfinished.load(Ordering::Relaxed)).unwrap_or(usize::MAX),
        elapsed: started.elapsed(),
    })
}

/// The CPU the controllers used during the load, their resident memory, and the first
/// one's log when kept.
fn resources_line(cpu: &CpuUse, rss: Option<f64>, kept_log: Option<&std::path::Path>) -> String {
    let log = kept_log.map_or(String::new(), |log| format!("; log {}", log.display()));
    format!(
        "  CPU during the load: {}; controllers {} resident{log}",
        cpu.describe(),
        fmt_opt(rss, "MiB"),
    )
}
