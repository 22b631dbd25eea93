//! A split load or replay run's seconds, merged. Each share sends its own `load` frame
//! per second (its part of the rate); the split run's stream shows the whole instead:
//! once every share has sent second S of a phase, their parts are merged
//! ([`LoadSecond::merge`]: counts summed, HdrHistograms added) into one `load` frame of
//! the split run, which says how many `shares` it holds. The shares' own seconds stay
//! on their own streams.
//!
//! `abort_on_fail` is judged here too. A share runs with it off (one share's measure is
//! not the run's); each merged measured second is added to the split run's measure so
//! far and its thresholds judged, in order, second by second. The first one crossed is
//! kept as why the run stopped: the dispatcher cancels the shares with it, and the split
//! run ends `failed` with it.
//!
//! In the store, not in one controller's memory: a split run's shares may stream to
//! different replicas, and the seconds meet here whichever replica stores them. The
//! rows are locked with the split run's (the relaying transaction holds its row).

use iohr_domain::RunKind;
use iohr_domain::load::{LoadSecond, MergedMeasure, Share, Threshold, abort_reason};
use sqlx::{Any, Row, Transaction};

use super::{Result, StoreError};

/// The phases of a load run's seconds, in the order a share sends them.
const PHASES: [&str; 2] = ["warmup", "measure"];

/// A split run of `kind`, stored: when its shares send seconds its kind merges
/// ([`iohr_domain::kind::merges_seconds`]: load, replay), they are to be merged, and its
/// merged measure judged against `thresholds`.
pub(super) async fn watch(
    tx: &mut Transaction<'static, Any>,
    parent: &str,
    kind: RunKind,
    thresholds: &[Threshold],
) -> Result<()> {
    if !iohr_domain::kind::merges_seconds(kind) {
        return Ok(());
    }
    let thresholds =
        serde_json::to_string(thresholds).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    sqlx::query("INSERT INTO split_measures (run_id, thresholds) VALUES ($1, $2)")
        .bind(parent)
        .bind(thresholds)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// What a batch of a share's seconds made of the split run's.
#[derive(Debug, Default)]
pub(super) struct Merged {
    /// The whole run's seconds this batch completed (the last share's part came), in
    /// order, each with how many shares' parts it holds.
    pub seconds: Vec<(LoadSecond, usize)>,
    /// Why the run stops, when these seconds made its measure cross a threshold (told
    /// once: later batches return `None`).
    pub aborted: Option<String>,
}

/// `share`'s `seconds` (from its relayed `load` frames), each merged into the split
/// run's as soon as every one of its shares that still runs has sent it. `None` when
/// the split run's seconds are not merged (not a load or replay run): relay them as
/// they are.
pub(super) async fn merge(
    tx: &mut Transaction<'static, Any>,
    parent: &str,
    share: Share,
    seconds: &[LoadSecond],
) -> Result<Option<Merged>> {
    let Some(mut state) = State::read(tx, parent).await? else {
        return Ok(None);
    };
    // A second merged already (a straggler once the others made it whole) is left out.
    for second in seconds
        .iter()
        .filter(|s| s.second as i64 > state.through(&s.phase))
    {
        let payload =
            serde_json::to_string(second).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        sqlx::query(
            "INSERT INTO split_seconds (run_id, phase, second, share_index, payload)
             VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (run_id, phase, second, share_index) DO NOTHING",
        )
        .bind(parent)
        .bind(&second.phase)
        .bind(second.second as i64)
        .bind(i64::from(share.index()))
        .bind(payload)
        .execute(&mut **tx)
        .await?;
    }
    // A share whose agent was lost sends no more seconds: with `on_agent_lost: continue`
    // the others' make a second whole (what the lost one sent before still counts).
    let lost: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM runs WHERE parent_id = $1 AND status = 'error'")
            .bind(parent)
            .fetch_one(&mut **tx)
            .await?;
    let expected = (i64::from(share.count()) - lost).max(1) as usize;
    let was_aborted = state.aborted.is_some();
    let mut merged = Merged::default();
    for phase in PHASES {
        // Each loop merges one second every share has sent; a second still missing one
        // share's part stops the phase until that share's frames come.
        loop {
            let next = state.through(phase) + 1;
            let parts = parts_of(tx, parent, phase, Some(next)).await?;
            if parts.len() < expected {
                break;
            }
            let whole = state.take_second(tx, parent, phase, next, &parts).await?;
            merged.seconds.push((whole, parts.len()));
        }
    }
    state.write(tx, parent).await?;
    if !was_aborted {
        merged.aborted = state.aborted;
    }
    if let Some(why) = &merged.aborted {
        tracing::info!(run = %parent, second = state.measured, reason = %why, "split run crossed a threshold on its merged seconds");
    }
    Ok(Some(merged))
}

/// At the split run's ending: the seconds not every share sent (a share cancelled or
/// lost before them), merged from the parts that came, in order; and why its merged
/// seconds stopped it, if they did. Its merged measures' rows (seconds and steps) go.
pub(super) async fn take(
    tx: &mut Transaction<'static, Any>,
    parent: &str,
) -> Result<(Vec<(LoadSecond, usize)>, Option<String>)> {
    let mut rest = Vec::new();
    let mut aborted = None;
    if let Some(mut state) = State::read(tx, parent).await? {
        for phase in PHASES {
            let parts = parts_of(tx, parent, phase, None).await?;
            let mut seconds: Vec<u64> = parts.iter().map(|p| p.second).collect();
            seconds.dedup();
            for second in seconds {
                let of_second: Vec<LoadSecond> = parts
                    .iter()
                    .filter(|p| p.second == second)
                    .cloned()
                    .collect();
                let whole = state
                    .take_second(tx, parent, phase, second as i64, &of_second)
                    .await?;
                rest.push((whole, of_second.len()));
            }
        }
        aborted = state.aborted;
    }
    for table in super::SPLIT_MEASURE_TABLES {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DELETE FROM {table} WHERE run_id = $1"
        )))
        .bind(parent)
        .execute(&mut **tx)
        .await?;
    }
    Ok((rest, aborted))
}

/// The shares' parts of `phase` waiting to be merged: of second `second`, or of every
/// second (in order).
async fn parts_of(
    tx: &mut Transaction<'static, Any>,
    parent: &str,
    phase: &str,
    second: Option<i64>,
) -> Result<Vec<LoadSecond>> {
    let query = match second {
        Some(second) => sqlx::query(
            "SELECT payload FROM split_seconds WHERE run_id = $1 AND phase = $2
                 AND second = $3 ORDER BY share_index",
        )
        .bind(parent)
        .bind(phase)
        .bind(second),
        None => sqlx::query(
            "SELECT payload FROM split_seconds WHERE run_id = $1 AND phase = $2
                 ORDER BY second, share_index",
        )
        .bind(parent)
        .bind(phase),
    };
    let rows = query.fetch_all(&mut **tx).await?;
    rows.iter()
        .map(|row| {
            serde_json::from_str(&row.try_get::<String, _>("payload")?)
                .map_err(|e| StoreError::Corrupt(format!("split second: {e}")))
        })
        .collect()
}

/// A split run's `split_measures` row: the seconds merged so far per phase, and with
/// thresholds to judge, the measure so far and why it stopped.
struct State {
    thresholds: Vec<Threshold>,
    warmed: i64,
    measured: i64,
    measure: Option<MergedMeasure>,
    aborted: Option<String>,
}

impl State {
    async fn read(tx: &mut Transaction<'static, Any>, parent: &str) -> Result<Option<State>> {
        let row = sqlx::query(
            "SELECT thresholds, warmup_through, through, measure, aborted
             FROM split_measures WHERE run_id = $1",
        )
        .bind(parent)
        .fetch_optional(&mut **tx)
        .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let thresholds: Vec<Threshold> =
            serde_json::from_str(&row.try_get::<String, _>("thresholds")?)
                .map_err(|e| StoreError::Corrupt(format!("split thresholds: {e}")))?;
        // The measure is kept only to judge thresholds: without any, nothing to carry.
        let measure = match row.try_get::<Option<String>, _>("measure")? {
            _ if thresholds.is_empty() => None,
            Some(text) => Some(MergedMeasure::from_text(&text)),
            None => Some(MergedMeasure::new().map_err(Into::into)),
        }
        .transpose()
        .map_err(|e| StoreError::Corrupt(format!("split measure: {e}")))?;
        Ok(Some(State {
            thresholds,
            warmed: row.try_get("warmup_through")?,
            measured: row.try_get("through")?,
            measure,
            aborted: row.try_get("aborted")?,
        }))
    }

    fn through(&self, phase: &str) -> i64 {
        if phase == "measure" {
            self.measured
        } else {
            self.warmed
        }
    }

    /// Second `second` of `phase` merged from `parts`, its rows gone, and (a measured
    /// second, with thresholds and none crossed yet) judged with the measure so far.
    async fn take_second(
        &mut self,
        tx: &mut Transaction<'static, Any>,
        parent: &str,
        phase: &str,
        second: i64,
        parts: &[LoadSecond],
    ) -> Result<LoadSecond> {
        let whole = LoadSecond::merge(parts)
            .map_err(|e| StoreError::Corrupt(format!("split second: {e}")))?;
        sqlx::query("DELETE FROM split_seconds WHERE run_id = $1 AND phase = $2 AND second = $3")
            .bind(parent)
            .bind(phase)
            .bind(second)
            .execute(&mut **tx)
            .await?;
        if phase != "measure" {
            self.warmed = self.warmed.max(second);
            return Ok(whole);
        }
        self.measured = self.measured.max(second);
        if let (Some(measure), None) = (self.measure.as_mut(), &self.aborted) {
            measure
                .add(&whole)
                .map_err(|e| StoreError::Corrupt(format!("split second: {e}")))?;
            self.aborted = measure
                .crossed(&self.thresholds)
                .map(|(threshold, observed)| abort_reason(threshold, second as u64, &observed));
        }
        Ok(whole)
    }

    async fn write(&self, tx: &mut Transaction<'static, Any>, parent: &str) -> Result<()> {
        let measure = self
            .measure
            .as_ref()
            .map(MergedMeasure::to_text)
            .transpose()
            .map_err(|e| StoreError::Corrupt(format!("split measure: {e}")))?;
        sqlx::query(
            "UPDATE split_measures SET warmup_through = $1, through = $2, measure = $3,
                 aborted = $4 WHERE run_id = $5",
        )
        .bind(self.warmed)
        .bind(self.measured)
        .bind(measure)
        .bind(&self.aborted)
        .bind(parent)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
