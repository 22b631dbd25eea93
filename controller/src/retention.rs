//! The retention job: every `--retention-interval`, on the controller's clock, a sweep
//! deletes what the installation's periods no longer keep (runs, per-second frames,
//! closed findings, audit lines, webhook delivery logs), in batches
//! (`store/retention.rs`).

use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::schedule::SharedClock;
use crate::store::{Periods, Store};

/// Rows per delete statement: small enough that a concurrent write waits little.
const BATCH: i64 = 1_000;

/// The periods and how often they are applied (`serve --retain-* --retention-interval`).
#[derive(Debug, Clone, clap::Args)]
pub struct RetentionConfig {
    /// How long a run's record is kept after it ends.
    #[arg(long, default_value = "90d", value_parser = humantime::parse_duration)]
    pub retain_runs: Duration,
    /// How long a run's per-second frames are kept after it ends; then its live stream
    /// answers 410 frames_expired and the record keeps its result.
    #[arg(long, default_value = "30d", value_parser = humantime::parse_duration)]
    pub retain_frames: Duration,
    /// How long a finding is kept after it closes.
    #[arg(long, default_value = "90d", value_parser = humantime::parse_duration)]
    pub retain_findings: Duration,
    /// How long an audit line is kept.
    #[arg(long, default_value = "365d", value_parser = humantime::parse_duration)]
    pub retain_audit: Duration,
    /// How long a finished webhook delivery's log line is kept.
    #[arg(long, default_value = "30d", value_parser = humantime::parse_duration)]
    pub retain_deliveries: Duration,
    /// How often the retention job runs.
    #[arg(long, default_value = "1h", value_parser = humantime::parse_duration)]
    pub retention_interval: Duration,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        let periods = Periods::default();
        RetentionConfig {
            retain_runs: periods.runs,
            retain_frames: periods.frames,
            retain_findings: periods.findings,
            retain_audit: periods.audit,
            retain_deliveries: periods.deliveries,
            retention_interval: Duration::from_secs(3600),
        }
    }
}

impl RetentionConfig {
    pub fn periods(&self) -> Periods {
        Periods {
            runs: self.retain_runs,
            frames: self.retain_frames,
            findings: self.retain_findings,
            audit: self.retain_audit,
            deliveries: self.retain_deliveries,
        }
    }
}

/// Starts the job; it stops with `shutdown`. A failed sweep is logged and tried again at
/// the next interval.
pub fn spawn(
    store: Store,
    config: &RetentionConfig,
    clock: SharedClock,
    shutdown: CancellationToken,
) -> JoinHandle<()> {
    let periods = config.periods();
    let every = config.retention_interval.max(Duration::from_millis(10));
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.cancelled() => return,
            }
            match store.sweep(&periods, clock.now_ms(), BATCH).await {
                Ok(swept) if swept != Default::default() => tracing::info!(
                    frames = swept.frames,
                    runs = swept.runs,
                    findings = swept.findings,
                    audit = swept.audit,
                    deliveries = swept.deliveries,
                    "retention swept"
                ),
                Ok(_) => {}
                Err(error) => tracing::warn!(%error, "retention sweep failed"),
            }
        }
    })
}
