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

use iohr_domain::load::{LoadSecond, MergedMeasure, Share, Threshold, abort_reason};

use crate::store::{Result, SplitMeasure, StoreError, Tx};

/// The phases of a load run's seconds, in the order a share sends them.
const PHASES: [&str; 2] = ["warmup", "measure"];

/// What a batch of a share's seconds made of the split run's.
#[derive(Debug, Default)]
pub(in crate::runs) struct Merged {
    /// The whole run's seconds this batch completed (the last share's part came), in
    /// order, each with how many shares' parts it holds.
    pub seconds: Vec<(LoadSecond, usize)>,
    /// Why the run stops, when these seconds made its measure cross a threshold (told
    /// once: later batches return `None`).
    pub aborted: Option<String>,
}

/// `share`'s `seconds` (from its relayed `load` frames), each merged into the split
/// run's as soon as every one of its shares that still runs has sent it. `None` when
/// the split run has no merged measure: relay them as they are.
pub(in crate::runs) async fn merge(
    tx: &mut Tx,
    parent: &str,
    share: Share,
    seconds: &[LoadSecond],
) -> Result<Option<Merged>> {
    let Some(mut state) = read(tx, parent).await? else {
        return Ok(None);
    };
    // A second merged already (a straggler once the others made it whole) is left out.
    for second in seconds
        .iter()
        .filter(|s| s.second as i64 > state.through(&s.phase))
    {
        tx.put_second_part(parent, share.index(), second).await?;
    }
    // A share whose agent was lost sends no more seconds: with `on_agent_lost: continue`
    // the others' make a second whole (what the lost one sent before still counts).
    let lost = tx.errored_shares(parent).await?;
    let expected = (i64::from(share.count()) - lost).max(1) as usize;
    let was_aborted = state.aborted.is_some();
    let mut merged = Merged::default();
    for phase in PHASES {
        // Each loop merges one second every share has sent; a second still missing one
        // share's part stops the phase until that share's frames come.
        loop {
            let next = state.through(phase) + 1;
            let parts = tx.second_parts(parent, phase, Some(next)).await?;
            if parts.len() < expected {
                break;
            }
            tx.delete_second(parent, phase, next).await?;
            let whole = state.take_second(phase, next, &parts)?;
            merged.seconds.push((whole, parts.len()));
        }
    }
    tx.set_split_measure(parent, &state.to_row()?).await?;
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
pub(in crate::runs) async fn take(
    tx: &mut Tx,
    parent: &str,
) -> Result<(Vec<(LoadSecond, usize)>, Option<String>)> {
    let mut rest = Vec::new();
    let mut aborted = None;
    if let Some(mut state) = read(tx, parent).await? {
        for phase in PHASES {
            let parts = tx.second_parts(parent, phase, None).await?;
            let mut seconds: Vec<u64> = parts.iter().map(|p| p.second).collect();
            seconds.dedup();
            for second in seconds {
                let of_second: Vec<LoadSecond> = parts
                    .iter()
                    .filter(|p| p.second == second)
                    .cloned()
                    .collect();
                tx.delete_second(parent, phase, second as i64).await?;
                let whole = state.take_second(phase, second as i64, &of_second)?;
                rest.push((whole, of_second.len()));
            }
        }
        aborted = state.aborted;
    }
    tx.drop_split_measures(parent).await?;
    Ok((rest, aborted))
}

/// A merged second as the split run's `load` frame: the second, and how many shares'
/// parts it holds.
pub(in crate::runs) fn whole_second(
    (second, shares): (LoadSecond, usize),
    at: i64,
) -> (String, serde_json::Value, i64) {
    let mut payload = serde_json::to_value(&second).unwrap_or_default();
    if let serde_json::Value::Object(object) = &mut payload {
        object.insert("shares".to_string(), shares.into());
    }
    ("load".to_string(), payload, at)
}

/// The split run's merged measure's row read.
async fn read(tx: &mut Tx, parent: &str) -> Result<Option<State>> {
    tx.split_measure(parent)
        .await?
        .map(State::from_row)
        .transpose()
}

/// A split run's merged measure: the seconds merged so far per phase, and with
/// thresholds to judge, the measure so far and why it stopped.
struct State {
    thresholds: Vec<Threshold>,
    warmed: i64,
    measured: i64,
    measure: Option<MergedMeasure>,
    aborted: Option<String>,
}

impl State {
    fn from_row(row: SplitMeasure) -> Result<State> {
        // The measure is kept only to judge thresholds: without any, nothing to carry.
        let measure = match row.measure {
            _ if row.thresholds.is_empty() => None,
            Some(text) => Some(MergedMeasure::from_text(&text)),
            None => Some(MergedMeasure::new().map_err(Into::into)),
        }
        .transpose()
        .map_err(|e| StoreError::Corrupt(format!("split measure: {e}")))?;
        Ok(State {
            thresholds: row.thresholds,
            warmed: row.warmup_through,
            measured: row.through,
            measure,
            aborted: row.aborted,
        })
    }

    fn to_row(&self) -> Result<SplitMeasure> {
        let measure = self
            .measure
            .as_ref()
            .map(MergedMeasure::to_text)
            .transpose()
            .map_err(|e| StoreError::Corrupt(format!("split measure: {e}")))?;
        Ok(SplitMeasure {
            thresholds: self.thresholds.clone(),
            warmup_through: self.warmed,
            through: self.measured,
            measure,
            aborted: self.aborted.clone(),
        })
    }

    fn through(&self, phase: &str) -> i64 {
        if phase == "measure" {
            self.measured
        } else {
            self.warmed
        }
    }

    /// Second `second` of `phase` merged from `parts`, and (a measured second, with
    /// thresholds and none crossed yet) judged with the measure so far.
    fn take_second(
        &mut self,
        phase: &str,
        second: i64,
        parts: &[LoadSecond],
    ) -> Result<LoadSecond> {
        let whole = LoadSecond::merge(parts)
            .map_err(|e| StoreError::Corrupt(format!("split second: {e}")))?;
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
}

#[cfg(test)]
mod tests;
