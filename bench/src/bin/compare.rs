//! `iohr-bench-compare`: how long compare takes, and what it says of real runs.
//!
//! - `synthetic`: two one-hour load results (1,000 requests/s, 5 operations, 60 latency
//!   blocks each, histograms as the agent writes them), compared as the API does (from
//!   the stored JSON): prints the time per comparison over repeated runs.
//! - `files BEFORE.json AFTER.json ...`: pairs of `iohr-agent exec --json` outputs of
//!   load runs, compared in order (1 with 2, 3 with 4, ...): prints each verdict and how
//!   many said "regressed".

use std::time::Instant;

use anyhow::{Context, bail};
use hdrhistogram::Histogram;
use iohr_domain::compare::{NOISE_FLOOR, Side, compare};
use iohr_domain::histogram::{encode, latency_histogram};
use iohr_domain::load::{
    Counts, HttpVersion, LatencySummary, LoadResult, Model, OperationResult, WarmupPlan,
    WarmupResult, operation_block_histogram, summarise_latency,
};
use iohr_domain::{RunKind, RunStatus};
use serde_json::Value;

/// A deterministic spread of latencies around `base` microseconds.
fn fill(h: &mut Histogram<u64>, n: u64, base: u64, seed: u64) -> anyhow::Result<()> {
    let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
    for _ in 0..n {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let jitter = (x >> 33) % (base * 2);
        h.record(base / 2 + jitter)?;
    }
    Ok(())
}

fn summary(h: &Histogram<u64>) -> anyhow::Result<LatencySummary> {
    Ok(summarise_latency(h)?)
}

fn synthetic_result(seed: u64) -> anyhow::Result<Value> {
    const SECONDS: u64 = 3600;
    const RATE: u64 = 1000;
    const OPS: u64 = 5;
    let mut total = latency_histogram()?;
    let mut ops = Vec::new();
    let mut blocks = Vec::new();
    let mut op_blocks: Vec<Vec<String>> = vec![Vec::new(); OPS as usize];
    let mut op_histograms: Vec<Histogram<u64>> = (0..OPS)
        .map(|_| latency_histogram())
        .collect::<Result<_, _>>()?;
    for block in 0..60 {
        let mut b = latency_histogram()?;
        for (i, h) in op_histograms.iter_mut().enumerate() {
            let mut part = latency_histogram()?;
            let n = SECONDS / 60 * RATE / OPS;
            fill(
                &mut part,
                n,
                2000 + 500 * i as u64,
                seed + block * 10 + i as u64,
            )?;
            h.add(&part)?;
            b.add(&part)?;
            // As the agent stores them: at OPERATION_BLOCK_DIGITS significant digits.
            let mut coarse = operation_block_histogram()?;
            coarse.add(&part)?;
            op_blocks[i].push(encode(&coarse)?);
        }
        total.add(&b)?;
        blocks.push(encode(&b)?);
    }
    for (i, (h, blocks)) in op_histograms.iter().zip(op_blocks).enumerate() {
        ops.push(OperationResult {
            name: format!("GET /op{i}"),
            method: "GET".into(),
            path: format!("/op{i}"),
            counts: Counts::default(),
            error_rate: 0.0,
            latency: summary(h)?,
            blocks,
        });
    }
    let result = LoadResult {
        model: Model::Open,
        http: HttpVersion::Http1,
        connections: 64,
        intended_rate: Some(RATE as f64),
        achieved_rate: RATE as f64,
        measured_seconds: SECONDS as f64,
        warmup: WarmupResult {
            plan: WarmupPlan::None,
            requests: 0,
            discarded: true,
        },
        counts: Counts::default(),
        error_rate: 0.0,
        intended: SECONDS * RATE,
        sent: SECONDS * RATE,
        late: 0,
        dropped: 0,
        late_tolerance_ms: 10,
        latency: summary(&total)?,
        uncorrected_latency: summary(&total)?,
        operations: ops,
        thresholds: Vec::new(),
        aborted: None,
        notes: Vec::new(),
        blocks,
        block_seconds: 60,
        operation_block_seconds: 60,
        slow_seconds: Vec::new(),
    };
    Ok(serde_json::to_value(result)?)
}

fn side<'a>(id: &'a str, result: &'a Value) -> Side<'a> {
    Side {
        id,
        kind: RunKind::Load,
        scenario_version: "sha256:bench",
        environment: "staging",
        target: "http://127.0.0.1:1",
        status: RunStatus::Passed,
        result: Some(result),
    }
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("synthetic") => {
            let (before, after) = (synthetic_result(1)?, synthetic_result(2)?);
            let size = before.to_string().len();
            let mut times = Vec::new();
            let mut verdict = String::new();
            for _ in 0..20 {
                let started = Instant::now();
                let out = compare(
                    &side("before", &before),
                    &side("after", &after),
                    NOISE_FLOOR,
                )?;
                times.push(started.elapsed().as_secs_f64() * 1000.0);
                verdict = out.lines().join(" | ");
            }
            times.sort_by(f64::total_cmp);
            println!(
                "two one-hour results ({} KiB of JSON each, 3.6M samples, 5 operations, 60 blocks): compare median {:.1} ms, max {:.1} ms over {} runs",
                size / 1024,
                times[times.len() / 2],
                times[times.len() - 1],
                times.len()
            );
            println!("{verdict}");
        }
        Some("files") => {
            let files = &args[1..];
            if files.len() < 2 || !files.len().is_multiple_of(2) {
                bail!("files takes pairs: BEFORE.json AFTER.json ...");
            }
            let (mut regressed, mut differing, mut refused) = (0, 0, 0);
            for (i, pair) in files.chunks(2).enumerate() {
                let read = |path: &String| -> anyhow::Result<Value> {
                    let text = std::fs::read_to_string(path).with_context(|| path.clone())?;
                    let value: Value = serde_json::from_str(&text)?;
                    Ok(value["result"].clone())
                };
                let (b, a) = (read(&pair[0])?, read(&pair[1])?);
                let (bid, aid) = (format!("b{i}"), format!("a{i}"));
                // A refused pair (a saturated generator on a loaded machine) is counted,
                // not fatal: the measurement is of the pairs compare does judge.
                let out = match compare(&side(&bid, &b), &side(&aid, &a), NOISE_FLOOR) {
                    Ok(out) => out,
                    Err(refusal) => {
                        refused += 1;
                        println!("pair {}: refused: {refusal}", i + 1);
                        continue;
                    }
                };
                if out.verdict == iohr_domain::compare::Verdict::Regressed {
                    regressed += 1;
                }
                if out.verdict != iohr_domain::compare::Verdict::Unchanged {
                    differing += 1;
                }
                println!("pair {}: {}", i + 1, out.lines().join(" | "));
            }
            println!(
                "{regressed} of {} A/A pairs said regressed, {differing} differed, {refused} refused",
                files.len() / 2
            );
        }
        _ => bail!("usage: iohr-bench-compare synthetic | files BEFORE.json AFTER.json ..."),
    }
    Ok(())
}
