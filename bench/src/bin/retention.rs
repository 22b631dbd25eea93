//! `iohr-bench-retention [FRAMES] [--database-url URL]`: the longest pause a concurrent
//! run start sees while retention deletes FRAMES expired frames (default 1,000,000),
//! batched as the controller does (1,000 rows a statement) and, for comparison, in one
//! statement per table. A run start is `runs::start::insert_run` (the write a `POST /runs`
//! makes: the run row, its audit line and its outbox work, in one transaction).
//!
//! SQLite by default, in a temp dir; `--database-url postgres://...` names an empty
//! PostgreSQL database instead.

use std::time::{Duration, Instant};

use anyhow::Context;
use iohr_controller::store::{NewRun, Periods, PlanChange, Store, now_ms, sqlite_url};
use iohr_domain::{Executor, RunKind, StartedBy};
use serde_json::json;
use sqlx::AnyPool;

const RUNS: i64 = 100;
const DAY_MS: i64 = 24 * 3600 * 1000;

struct Measured {
    sweep: Duration,
    starts: usize,
    longest: Duration,
    p99: Duration,
}

async fn seed(url: &str, frames: i64) -> anyhow::Result<(Store, NewRun)> {
    let store = Store::open(url).await?;
    let account = store.create_account("bench", 8, false).await?;
    store.add_environment(&account.id, "staging", false).await?;
    // The run starts measured stay queued: the plan lets them.
    let plan = PlanChange {
        max_queued: Some(1_000_000),
        ..PlanChange::default()
    };
    store.set_plan(&account.id, &plan).await?;
    let scenario = store
        .put_scenario(
            &account.id,
            "home",
            "checks",
            &json!({"checks": [{"path": "/"}]}),
        )
        .await?;
    let new = NewRun {
        account_id: account.id.clone(),
        kind: RunKind::Checks,
        scenario_id: scenario.id.clone(),
        scenario_version: scenario.version.clone(),
        environment: "staging".into(),
        target: "http://127.0.0.1:9".into(),
        executor: Executor::Any,
        started_by: StartedBy {
            kind: "token".into(),
            id: "bench".into(),
            change: None,
            commit: None,
            base: None,
            forge: None,
        },
        units_reserved: 0,
        reason: None,
        confirmation: None,
        faults: None,
        agents: 1,
        abort_on: Vec::new(),
        baseline_run: None,
    };
    sqlx::any::install_default_drivers();
    let pool = AnyPool::connect(url).await?;
    let per_run = frames / RUNS;
    let payload =
        json!({"second": 1, "requests": 100, "histogram": "HISTFAAAAB54nJNpmSzMwMDAxAABzFAaxmey"})
            .to_string();
    for _ in 0..RUNS {
        let run = iohr_controller::runs::start::insert_run(&store, &new, "token:bench").await?;
        sqlx::query("UPDATE runs SET status = 'passed', ended_at = $1 WHERE id = $2")
            .bind(now_ms() - 60 * DAY_MS)
            .bind(&run.id)
            .execute(&pool)
            .await?;
        let mut tx = pool.begin().await?;
        for number in 1..=per_run {
            sqlx::query("INSERT INTO frames (run_id, number, kind, payload, at) VALUES ($1, $2, 'load', $3, 0)")
                .bind(&run.id)
                .bind(number)
                .bind(&payload)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
    }
    pool.close().await;
    Ok((store, new))
}

async fn measure(url: &str, frames: i64, batch: i64) -> anyhow::Result<Measured> {
    let (store, new) = seed(url, frames).await?;
    let periods = Periods {
        frames: Duration::from_secs(24 * 3600),
        ..Periods::default()
    };
    let sweeping = store.clone();
    let started = Instant::now();
    let sweep = tokio::spawn(async move { sweeping.sweep(&periods, now_ms(), batch).await });
    let mut pauses = Vec::new();
    // Run starts back to back while the sweep runs (bounded: at most 100,000 of them).
    while !sweep.is_finished() && pauses.len() < 100_000 {
        let at = Instant::now();
        iohr_controller::runs::start::insert_run(&store, &new, "token:bench").await?;
        pauses.push(at.elapsed());
    }
    let swept = sweep.await??;
    let sweep_took = started.elapsed();
    anyhow::ensure!(
        swept.frames as i64 >= frames / RUNS * RUNS,
        "swept {swept:?}"
    );
    pauses.sort();
    let p99 = pauses
        .get(pauses.len().saturating_sub(1) * 99 / 100)
        .copied()
        .unwrap_or_default();
    Ok(Measured {
        sweep: sweep_took,
        starts: pauses.len(),
        longest: pauses.last().copied().unwrap_or_default(),
        p99,
    })
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let mut frames: i64 = 1_000_000;
    let mut database: Option<String> = None;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--database-url" => database = Some(args.next().context("--database-url URL")?),
            n => frames = n.parse().context("FRAMES is a number")?,
        }
    }
    for (pass, (name, batch)) in [
        ("batched (1,000 a statement)", 1_000),
        ("one statement", i64::MAX),
    ]
    .into_iter()
    .enumerate()
    {
        let url = match &database {
            Some(url) => {
                // A fresh schema each time: drop what the last pass left.
                sqlx::any::install_default_drivers();
                let pool = AnyPool::connect(url).await?;
                sqlx::query("DROP SCHEMA public CASCADE")
                    .execute(&pool)
                    .await?;
                sqlx::query("CREATE SCHEMA public").execute(&pool).await?;
                pool.close().await;
                url.clone()
            }
            None => {
                let dir = std::env::temp_dir().join(format!(
                    "iohr-bench-retention-{}-{pass}",
                    std::process::id()
                ));
                std::fs::create_dir_all(&dir)?;
                sqlite_url(&dir)
            }
        };
        let m = measure(&url, frames, batch).await?;
        println!(
            "{name}: {frames} frames swept in {:.2} s; {} run starts meanwhile, p99 {:.1} ms, longest {:.1} ms",
            m.sweep.as_secs_f64(),
            m.starts,
            m.p99.as_secs_f64() * 1000.0,
            m.longest.as_secs_f64() * 1000.0
        );
    }
    Ok(())
}
