//! `abort_on_fail` of a split run, judged on the whole. A share runs with it off (one
//! share's measure is not the run's); here, as each share's measured seconds are relayed
//! onto the split run, a second that every share has sent is merged into the split run's
//! measure so far (HdrHistograms added, counts summed) and its thresholds judged, in
//! order, second by second. The first one crossed is kept as why the run stopped: the
//! dispatcher cancels the shares with it, and the split run ends `failed` with it.
//!
//! In the store, not in one controller's memory: a split run's shares may stream to
//! different replicas, and the seconds meet here whichever replica stores them. The
//! rows are locked with the split run's (the relaying transaction holds its row).

use iohr_domain::load::{LoadSecond, MergedMeasure, Share, Threshold, abort_reason};
use sqlx::{Any, Row, Transaction};

use super::{Result, StoreError};

/// A split run stored with `thresholds` to judge on its merged seconds.
pub(super) async fn watch(
    tx: &mut Transaction<'static, Any>,
    parent: &str,
    thresholds: &[Threshold],
) -> Result<()> {
    if thresholds.is_empty() {
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

/// The measured seconds of a relayed batch of `share`'s frames (kind, payload), merged
/// into the split run's measure as soon as every one of its `share.count()` shares has
/// sent them. Returns why the run stops when this batch made a threshold cross.
pub(super) async fn judge(
    tx: &mut Transaction<'static, Any>,
    parent: &str,
    share: Share,
    frames: &[(String, serde_json::Value)],
) -> Result<Option<String>> {
    let seconds: Vec<LoadSecond> = frames
        .iter()
        .filter(|(kind, _)| kind == "load")
        .filter_map(|(_, payload)| serde_json::from_value::<LoadSecond>(payload.clone()).ok())
        .filter(|second| second.phase == "measure")
        .collect();
    if seconds.is_empty() {
        return Ok(None);
    }
    let row = sqlx::query(
        "SELECT thresholds, through, measure, aborted FROM split_measures WHERE run_id = $1",
    )
    .bind(parent)
    .fetch_optional(&mut **tx)
    .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    if row.try_get::<Option<String>, _>("aborted")?.is_some() {
        return Ok(None);
    }
    let thresholds: Vec<Threshold> = serde_json::from_str(&row.try_get::<String, _>("thresholds")?)
        .map_err(|e| StoreError::Corrupt(format!("split thresholds: {e}")))?;
    let mut through = row.try_get::<i64, _>("through")?;
    let mut measure = match row.try_get::<Option<String>, _>("measure")? {
        Some(text) => MergedMeasure::from_text(&text),
        None => MergedMeasure::new().map_err(Into::into),
    }
    .map_err(|e| StoreError::Corrupt(format!("split measure: {e}")))?;
    for second in &seconds {
        let payload =
            serde_json::to_string(second).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        sqlx::query(
            "INSERT INTO split_seconds (run_id, second, share_index, payload)
             VALUES ($1, $2, $3, $4) ON CONFLICT (run_id, second, share_index) DO NOTHING",
        )
        .bind(parent)
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
    let mut aborted = None;
    // Each loop merges one second every share has sent; a second still missing one
    // share's part stops it until that share's frames come.
    while aborted.is_none() {
        let next = through + 1;
        let parts =
            sqlx::query("SELECT payload FROM split_seconds WHERE run_id = $1 AND second = $2")
                .bind(parent)
                .bind(next)
                .fetch_all(&mut **tx)
                .await?;
        if parts.len() < expected {
            break;
        }
        for part in &parts {
            let second: LoadSecond =
                serde_json::from_str(&part.try_get::<String, _>("payload")?)
                    .map_err(|e| StoreError::Corrupt(format!("split second: {e}")))?;
            measure
                .add(&second)
                .map_err(|e| StoreError::Corrupt(format!("split second: {e}")))?;
        }
        sqlx::query("DELETE FROM split_seconds WHERE run_id = $1 AND second = $2")
            .bind(parent)
            .bind(next)
            .execute(&mut **tx)
            .await?;
        through = next;
        aborted = measure
            .crossed(&thresholds)
            .map(|(threshold, observed)| abort_reason(threshold, through as u64, &observed));
    }
    let text = measure
        .to_text()
        .map_err(|e| StoreError::Corrupt(format!("split measure: {e}")))?;
    sqlx::query(
        "UPDATE split_measures SET through = $1, measure = $2, aborted = $3 WHERE run_id = $4",
    )
    .bind(through)
    .bind(text)
    .bind(&aborted)
    .bind(parent)
    .execute(&mut **tx)
    .await?;
    if let Some(why) = &aborted {
        tracing::info!(run = %parent, second = through, reason = %why, "split run crossed a threshold on its merged seconds");
    }
    Ok(aborted)
}

/// At the split run's ending: why its merged seconds stopped it, if they did; its
/// merged measures' rows (seconds and steps) go.
pub(super) async fn take(
    tx: &mut Transaction<'static, Any>,
    parent: &str,
) -> Result<Option<String>> {
    let aborted: Option<Option<String>> =
        sqlx::query_scalar("SELECT aborted FROM split_measures WHERE run_id = $1")
            .bind(parent)
            .fetch_optional(&mut **tx)
            .await?;
    for table in super::SPLIT_MEASURE_TABLES {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DELETE FROM {table} WHERE run_id = $1"
        )))
        .bind(parent)
        .execute(&mut **tx)
        .await?;
    }
    Ok(aborted.flatten())
}

#[cfg(test)]
mod tests;
