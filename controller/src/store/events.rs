//! The outbox: product events (`reliability.run.finished`, `reliability.finding.created`),
//! written inside the transaction that finishes a run, so an event exists exactly when
//! the change it announces committed. Ids only, never a body. Readers (webhook fan-out,
//! the MQTT publisher, the SSE feed) resume after a per-account sequence number.

use serde::Serialize;
use sqlx::{Any, Row, Transaction};

use super::{Result, Store, StoreError, format_ms, new_id};

pub const RUN_FINISHED: &str = "reliability.run.finished";
pub const FINDING_CREATED: &str = "reliability.finding.created";
/// Every event type, as subscriptions name them.
pub const EVENT_TYPES: [&str; 2] = [RUN_FINISHED, FINDING_CREATED];

/// One stored event.
#[derive(Debug, Clone, PartialEq)]
pub struct EventRow {
    pub account_id: String,
    pub seq: i64,
    pub id: String,
    pub event_type: String,
    pub at: i64,
    pub data: serde_json::Value,
}

/// An event as every surface shows it (SSE data, MQTT payload, webhook body).
#[derive(Debug, Clone, Serialize)]
pub struct EventBody<'a> {
    pub id: &'a str,
    pub seq: i64,
    #[serde(rename = "type")]
    pub event_type: &'a str,
    pub timestamp: String,
    pub data: &'a serde_json::Value,
}

impl EventRow {
    pub fn body(&self) -> EventBody<'_> {
        EventBody {
            id: &self.id,
            seq: self.seq,
            event_type: &self.event_type,
            timestamp: format_ms(self.at),
            data: &self.data,
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(&self.body()).unwrap_or_default()
    }
}

fn event_from_row(row: &sqlx::any::AnyRow) -> Result<EventRow> {
    let data: String = row.try_get("data")?;
    Ok(EventRow {
        account_id: row.try_get("account_id")?,
        seq: row.try_get("seq")?,
        id: row.try_get("id")?,
        event_type: row.try_get("type")?,
        at: row.try_get("at")?,
        data: serde_json::from_str(&data)
            .map_err(|e| StoreError::Corrupt(format!("event data: {e}")))?,
    })
}

/// Appends one event to the account's outbox inside `tx`. The counter row's update locks
/// it until `tx` ends, so the account's events commit in `seq` order.
pub(super) async fn insert_event(
    tx: &mut Transaction<'_, Any>,
    account_id: &str,
    event_type: &str,
    data: serde_json::Value,
    now: i64,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO event_counters (account_id, last) VALUES ($1, 0)
         ON CONFLICT (account_id) DO NOTHING",
    )
    .bind(account_id)
    .execute(&mut **tx)
    .await?;
    let seq: i64 = sqlx::query(
        "UPDATE event_counters SET last = last + 1 WHERE account_id = $1 RETURNING last",
    )
    .bind(account_id)
    .fetch_one(&mut **tx)
    .await?
    .try_get("last")?;
    sqlx::query(
        "INSERT INTO events (account_id, seq, id, type, at, data) VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(account_id)
    .bind(seq)
    .bind(format!("evt_{}", new_id().replace('-', "")))
    .bind(event_type)
    .bind(now)
    .bind(data.to_string())
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// An account with events its consumer has not handled yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backlog {
    pub account_id: String,
    pub account_name: String,
    /// The last seq the consumer handled.
    pub done: i64,
}

impl Store {
    /// The account's events after `after`, oldest first, at most `limit`.
    pub async fn events_after(
        &self,
        account_id: &str,
        after: i64,
        limit: u32,
    ) -> Result<Vec<EventRow>> {
        let rows = sqlx::query(
            "SELECT * FROM events WHERE account_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
        )
        .bind(account_id)
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(event_from_row).collect()
    }

    /// The account's last event seq (0 before its first).
    pub async fn last_event_seq(&self, account_id: &str) -> Result<i64> {
        let row = sqlx::query("SELECT last FROM event_counters WHERE account_id = $1")
            .bind(account_id)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.map(|r| r.try_get("last")).transpose()?.unwrap_or(0))
    }

    /// The accounts whose events `consumer` has not all handled.
    pub async fn event_backlog(&self, consumer: &str) -> Result<Vec<Backlog>> {
        let rows = sqlx::query(
            "SELECT c.account_id, a.name, COALESCE(k.last, 0) AS done
             FROM event_counters c
             JOIN accounts a ON a.id = c.account_id
             LEFT JOIN event_cursors k ON k.account_id = c.account_id AND k.consumer = $1
             WHERE c.last > COALESCE(k.last, 0)
             ORDER BY c.account_id",
        )
        .bind(consumer)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(Backlog {
                    account_id: row.try_get("account_id")?,
                    account_name: row.try_get("name")?,
                    done: row.try_get("done")?,
                })
            })
            .collect()
    }

    /// Records that `consumer` handled the account's events through `last`.
    pub async fn set_event_cursor(
        &self,
        consumer: &str,
        account_id: &str,
        last: i64,
    ) -> Result<()> {
        sqlx::query(
            "INSERT INTO event_cursors (consumer, account_id, last) VALUES ($1, $2, $3)
             ON CONFLICT (consumer, account_id) DO UPDATE SET last = excluded.last",
        )
        .bind(consumer)
        .bind(account_id)
        .bind(last)
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
