//! A stored frame and its one insert, shared by the modules that write a run's stream
//! (an agent's frames, a split run's relayed ones, an ending's last ones).

use sqlx::{Any, Transaction};

use super::{Result, format_ms};

#[derive(Debug, Clone, PartialEq)]
pub struct StoredFrame {
    pub run_id: String,
    pub number: u64,
    pub kind: String,
    pub payload: serde_json::Value,
    pub at: i64,
}

impl StoredFrame {
    pub fn to_api(&self) -> iohr_domain::Frame {
        iohr_domain::Frame {
            run_id: self.run_id.clone(),
            number: self.number,
            kind: self.kind.clone(),
            at: format_ms(self.at),
            data: self.payload.clone(),
        }
    }
}

/// Stores one frame in `tx`; false when that `(run_id, number)` is stored already.
pub(super) async fn insert_frame(
    tx: &mut Transaction<'_, Any>,
    frame: &StoredFrame,
) -> Result<bool> {
    let done = sqlx::query(
        "INSERT INTO frames (run_id, number, kind, payload, at) VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (run_id, number) DO NOTHING",
    )
    .bind(&frame.run_id)
    .bind(frame.number as i64)
    .bind(&frame.kind)
    .bind(frame.payload.to_string())
    .bind(frame.at)
    .execute(&mut **tx)
    .await?;
    Ok(done.rows_affected() == 1)
}
