//! An agent's frames taken: stored fenced by the lease, and a share's relayed onto its
//! split run's stream in the same transaction, numbered after the split run's, each
//! payload naming its `share`. A load or replay run's `load` frames are merged instead,
//! one per second of the whole, and its `abort_on_fail` judged on them
//! (`judge/seconds.rs`); a capacity sweep's steps are judged on the whole as they end
//! (`judge/steps.rs`).

use iohr_domain::load::{LoadSecond, Share};
use serde::Deserialize;

use crate::store::{LeaseGuard, Result, RunRow, Store, StoredFrame, Tx};

/// What an append did.
#[derive(Debug, Clone, PartialEq)]
pub enum AppendOutcome {
    /// Stored; `contiguous_through` is what the controller acknowledges, `new` the frames
    /// that were not stored before (duplicates are dropped).
    Stored {
        contiguous_through: u64,
        new: Vec<StoredFrame>,
        /// A share's frames relayed onto its split run's stream.
        relayed: Vec<StoredFrame>,
        /// The split run and why it stops: these frames' seconds made its merged
        /// measure cross an `abort_on_fail` threshold.
        split_aborted: Option<(String, String)>,
    },
    /// The lease is not the run's current accepted lease: nothing was stored.
    Stale,
}

/// Appends an agent's frames (number, kind, payload JSON) in one transaction, fenced by
/// the lease, and relays a share's onto its split run.
pub async fn append_frames(
    store: &Store,
    run_id: &str,
    guard: &LeaseGuard,
    frames: &[(u64, String, serde_json::Value)],
) -> Result<AppendOutcome> {
    let mut tx = store.begin().await?;
    let Some(stored) = tx.append_agent_frames(run_id, guard, frames).await? else {
        return Ok(AppendOutcome::Stale);
    };
    let (relayed, split_aborted) = match stored.share_of {
        Some((parent, share)) => {
            let relayed = relay_frames(
                &mut tx,
                run_id,
                (&parent, share),
                stored.before,
                stored.through,
            )
            .await?;
            (relayed.frames, relayed.aborted.map(|why| (parent, why)))
        }
        None => (Vec::new(), None),
    };
    tx.commit().await?;
    Ok(AppendOutcome::Stored {
        contiguous_through: stored.through,
        new: stored.new,
        relayed,
        split_aborted,
    })
}

/// What relaying a share's frames did to its split run.
#[derive(Debug, Default)]
struct Relayed {
    /// The split run's new frames, for its live viewers.
    frames: Vec<StoredFrame>,
    /// Why the split run stops, when these frames' seconds made its merged measure cross
    /// an `abort_on_fail` threshold.
    aborted: Option<String>,
}

/// Relays a share's frames `after + 1 ..= through` (now stored without a gap) onto its
/// parent's stream.
async fn relay_frames(
    tx: &mut Tx,
    share_run: &str,
    (parent, share): (&str, Share),
    after: u64,
    through: u64,
) -> Result<Relayed> {
    if through <= after {
        return Ok(Relayed::default());
    }
    let run = super::settle::locked(tx, parent).await?;
    if run.status.is_finished() {
        return Ok(Relayed::default());
    }
    let frames = tx.frames_between(share_run, after, through).await?;
    let seconds: Vec<LoadSecond> = frames
        .iter()
        .filter(|(kind, _, _)| kind == "load")
        .filter_map(|(_, payload, _)| LoadSecond::deserialize(payload).ok())
        .collect();
    // A batch without seconds (a `started`, `phase` or `stress` frame) merges nothing;
    // a kind whose seconds are not merged relays them as they are.
    let merged = if seconds.is_empty() || !iohr_domain::kind::merges_seconds(run.kind) {
        None
    } else {
        super::judge::seconds::merge(tx, parent, share, &seconds).await?
    };
    let at = frames
        .last()
        .map_or_else(crate::store::now_ms, |(_, _, at)| *at);
    if iohr_domain::kind::judges_steps(run.kind) {
        // A sweep's step ends, judged on the whole as they come.
        super::judge::steps::judge(tx, &run, share, &frames).await?;
    }
    let mut out: Vec<(String, serde_json::Value, i64)> = frames
        .into_iter()
        .filter(|(kind, _, _)| merged.is_none() || kind != "load")
        .map(|(kind, payload, at)| (kind, with_share(payload, share), at))
        .collect();
    let aborted = match merged {
        Some(merged) => {
            out.extend(
                merged
                    .seconds
                    .into_iter()
                    .map(|second| super::judge::seconds::whole_second(second, at)),
            );
            merged.aborted
        }
        None => None,
    };
    Ok(Relayed {
        frames: append_to_parent(tx, &run, out).await?,
        aborted,
    })
}

/// `frames` (kind, payload, at) appended to the parent `run`'s stream, numbered after
/// its last, and told to its viewers on every replica.
pub(super) async fn append_to_parent(
    tx: &mut Tx,
    run: &RunRow,
    frames: Vec<(String, serde_json::Value, i64)>,
) -> Result<Vec<StoredFrame>> {
    let stored = numbered(run, frames);
    tx.append_frames(&run.id, run.frames_through, &stored, false)
        .await?;
    Ok(stored)
}

/// `frames` (kind, payload, at) as `run`'s, numbered after its last.
fn numbered(run: &RunRow, frames: Vec<(String, serde_json::Value, i64)>) -> Vec<StoredFrame> {
    frames
        .into_iter()
        .zip(run.frames_through + 1..)
        .map(|((kind, payload, at), number)| StoredFrame {
            run_id: run.id.clone(),
            number,
            kind,
            payload,
            at,
        })
        .collect()
}

/// A share's frame as its parent relays it: the payload with `share` (its index) added.
fn with_share(payload: serde_json::Value, share: Share) -> serde_json::Value {
    match payload {
        serde_json::Value::Object(mut object) => {
            object.insert("share".to_string(), share.index().into());
            serde_json::Value::Object(object)
        }
        other => serde_json::json!({"share": share.index(), "value": other}),
    }
}
