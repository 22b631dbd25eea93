//! Webhook subscriptions and their delivery log. A subscription's `cursor` is the last
//! event of its account fanned out into deliveries; each delivery row is the state of one
//! event's delivery (status, attempts, last status code and error, times), never a body.

use sqlx::Row;

use super::audit::{AuditLine, insert_audit};
use super::events::EventRow;
use super::page::{Bind, Keyset, Order};
use super::{Result, Store, StoreError, format_ms, json_list, new_id, now_ms, to_json};

/// A URL's scheme, host and port: what an audit line names, since a path may hold a
/// credential (a Slack incoming webhook's does).
fn origin(url: &str) -> String {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    let end = url[after_scheme..]
        .find(['/', '?'])
        .map_or(url.len(), |i| after_scheme + i);
    url[..end].to_string()
}

/// Subscriptions one account may hold.
pub const MAX_WEBHOOKS_PER_ACCOUNT: i64 = 20;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewWebhook {
    pub url: String,
    pub events: Vec<String>,
    pub format: String,
    pub secret: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookRow {
    pub id: String,
    pub account_id: String,
    pub url: String,
    pub events: Vec<String>,
    pub format: String,
    /// As stored (sealed, `store/sealed.rs`), except in the rows of
    /// [`Store::create_webhook`] and [`Store::due_deliveries`], which hold it opened.
    pub secret: String,
    pub state: String,
    pub disabled_reason: Option<String>,
    pub cursor: i64,
    pub created_by: String,
    pub created_at: i64,
}

impl WebhookRow {
    /// As the API shows it: everything but the secret.
    pub fn to_api(&self) -> serde_json::Value {
        serde_json::json!({
            "id": self.id,
            "url": self.url,
            "events": self.events,
            "format": self.format,
            "state": self.state,
            "disabled_reason": self.disabled_reason,
            "created_by": self.created_by,
            "created_at": format_ms(self.created_at),
        })
    }
}

fn webhook_from_row(row: &sqlx::any::AnyRow) -> Result<WebhookRow> {
    Ok(WebhookRow {
        id: row.try_get("id")?,
        account_id: row.try_get("account_id")?,
        url: row.try_get("url")?,
        events: json_list(&row.try_get::<String, _>("events")?),
        format: row.try_get("format")?,
        secret: row.try_get("secret")?,
        state: row.try_get("state")?,
        disabled_reason: row.try_get("disabled_reason")?,
        cursor: row.try_get("cursor")?,
        created_by: row.try_get("created_by")?,
        created_at: row.try_get("created_at")?,
    })
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryRow {
    pub webhook_id: String,
    pub event_seq: i64,
    pub event_id: String,
    pub event_type: String,
    pub status: String,
    pub attempts: i64,
    pub schedule_from: i64,
    pub last_status_code: Option<i64>,
    pub last_error: Option<String>,
    pub next_attempt_at: Option<i64>,
    pub created_at: i64,
    pub last_attempt_at: Option<i64>,
    pub delivered_at: Option<i64>,
}

/// The classes a failed attempt's `last_error` holds (outbox/deliveries.rs): what a
/// tenant reads instead of the error's text.
pub const FAILURE_CLASSES: [&str; 6] = [
    "denied",
    "connect_failed",
    "timeout",
    "tls",
    "http_status",
    "internal",
];

impl DeliveryRow {
    /// `last_error` as a class: rows written before errors were classes held an error's
    /// text, shown as the class it must have been.
    fn error_class(&self) -> Option<&str> {
        let error = self.last_error.as_deref()?;
        Some(if FAILURE_CLASSES.contains(&error) {
            error
        } else if self.last_status_code.is_some() {
            "http_status"
        } else {
            "connect_failed"
        })
    }

    pub fn to_api(&self) -> serde_json::Value {
        serde_json::json!({
            "event_id": self.event_id,
            "event_seq": self.event_seq,
            "event_type": self.event_type,
            "status": self.status,
            "attempts": self.attempts,
            "last_status_code": self.last_status_code,
            "last_error": self.error_class(),
            "next_attempt_at": self.next_attempt_at.map(format_ms),
            "created_at": format_ms(self.created_at),
            "last_attempt_at": self.last_attempt_at.map(format_ms),
            "delivered_at": self.delivered_at.map(format_ms),
        })
    }
}

fn delivery_from_row(row: &sqlx::any::AnyRow) -> Result<DeliveryRow> {
    Ok(DeliveryRow {
        webhook_id: row.try_get("webhook_id")?,
        event_seq: row.try_get("event_seq")?,
        event_id: row.try_get("event_id")?,
        event_type: row.try_get("event_type")?,
        status: row.try_get("status")?,
        attempts: row.try_get("attempts")?,
        schedule_from: row.try_get("schedule_from")?,
        last_status_code: row.try_get("last_status_code")?,
        last_error: row.try_get("last_error")?,
        next_attempt_at: row.try_get("next_attempt_at")?,
        created_at: row.try_get("created_at")?,
        last_attempt_at: row.try_get("last_attempt_at")?,
        delivered_at: row.try_get("delivered_at")?,
    })
}

/// A delivery due now, with what sending it needs.
#[derive(Debug, Clone)]
pub struct DueDelivery {
    pub delivery: DeliveryRow,
    pub webhook: WebhookRow,
    pub event: EventRow,
}

/// What one attempt came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttemptOutcome {
    Delivered {
        status_code: i64,
    },
    /// Failed; tried again at `retry_at`, or given up when `None`.
    Failed {
        status_code: Option<i64>,
        error: String,
        retry_at: Option<i64>,
    },
    /// The receiver answered 410 Gone: the delivery fails and the subscription is disabled.
    Gone,
}

impl Store {
    /// Stores a subscription and its audit line, in one transaction; past
    /// [`MAX_WEBHOOKS_PER_ACCOUNT`] nothing is stored ([`StoreError::Conflict`]). New
    /// subscriptions get the events after now, not the account's past ones.
    pub async fn create_webhook(
        &self,
        account_id: &str,
        hook: &NewWebhook,
        actor: &str,
    ) -> Result<WebhookRow> {
        let mut tx = self.write_tx().await?;
        self.lock_account(&mut tx, account_id).await?;
        let count: i64 = sqlx::query("SELECT COUNT(*) AS n FROM webhooks WHERE account_id = $1")
            .bind(account_id)
            .fetch_one(&mut *tx)
            .await?
            .try_get("n")?;
        if count >= MAX_WEBHOOKS_PER_ACCOUNT {
            return Err(StoreError::Conflict(format!(
                "the account has {count} webhook subscriptions, the limit is {MAX_WEBHOOKS_PER_ACCOUNT}"
            )));
        }
        let cursor: i64 = sqlx::query("SELECT last FROM event_counters WHERE account_id = $1")
            .bind(account_id)
            .fetch_optional(&mut *tx)
            .await?
            .map(|row| row.try_get("last"))
            .transpose()?
            .unwrap_or(0);
        let id = format!("wh_{}", new_id().replace('-', ""));
        let now = now_ms();
        let stored_secret = match &self.secrets {
            Some(key) => key.seal(&id, &hook.secret)?,
            None => hook.secret.clone(),
        };
        sqlx::query(
            "INSERT INTO webhooks (id, account_id, url, events, format, secret, state, cursor,
                 created_by, created_at)
             VALUES ($1, $2, $3, $4, $5, $6, 'active', $7, $8, $9)",
        )
        .bind(&id)
        .bind(account_id)
        .bind(&hook.url)
        .bind(to_json(&hook.events))
        .bind(&hook.format)
        .bind(&stored_secret)
        .bind(cursor)
        .bind(actor)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        let line = AuditLine {
            at: now,
            actor: actor.to_string(),
            action: "webhook.create".to_string(),
            targets: Some(origin(&hook.url)),
            outcome: format!("webhook {id} created for {}", hook.events.join(",")),
            ..Default::default()
        };
        insert_audit(&mut tx, account_id, &line).await?;
        let row = sqlx::query("SELECT * FROM webhooks WHERE id = $1")
            .bind(&id)
            .fetch_one(&mut *tx)
            .await?;
        let mut stored = webhook_from_row(&row)?;
        tx.commit().await?;
        // The creation's answer shows it, this once.
        stored.secret = hook.secret.clone();
        Ok(stored)
    }

    /// Seals every webhook secret still stored in clear (rows written before sealing);
    /// `serve` does it once it has its key. Returns how many were sealed.
    pub async fn seal_plain_secrets(&self) -> Result<u64> {
        let Some(key) = &self.secrets else {
            return Ok(0);
        };
        let rows = sqlx::query("SELECT id, secret FROM webhooks WHERE secret NOT LIKE 'sealed:%'")
            .fetch_all(&self.pool)
            .await?;
        let mut sealed = 0;
        for row in rows {
            let id: String = row.try_get("id")?;
            let plain: String = row.try_get("secret")?;
            // Only the value read: a concurrent change of the row is not overwritten.
            let done = sqlx::query("UPDATE webhooks SET secret = $1 WHERE id = $2 AND secret = $3")
                .bind(key.seal(&id, &plain)?)
                .bind(&id)
                .bind(&plain)
                .execute(&self.pool)
                .await?;
            sealed += done.rows_affected();
        }
        Ok(sealed)
    }

    /// The account's subscriptions in the order of their ids, after `cursor` (an id), at
    /// most `limit`, and the cursor of the next page.
    pub async fn webhooks_page(
        &self,
        account_id: &str,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<(Vec<WebhookRow>, Option<String>)> {
        Keyset::new(
            "SELECT * FROM webhooks WHERE account_id = $1".to_string(),
            account_id,
        )
        .page(
            &self.pool,
            Order::Ascending,
            "id",
            cursor.map(|c| Bind::Text(c.to_string())),
            limit,
            webhook_from_row,
            |hook| hook.id.clone(),
        )
        .await
    }

    /// Every subscription of the account, in the order of their ids.
    pub async fn webhooks(&self, account_id: &str) -> Result<Vec<WebhookRow>> {
        let rows = sqlx::query("SELECT * FROM webhooks WHERE account_id = $1 ORDER BY id")
            .bind(account_id)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(webhook_from_row).collect()
    }

    /// A subscription of this account; another account's is "not found".
    pub async fn webhook(&self, account_id: &str, id: &str) -> Result<Option<WebhookRow>> {
        let row = sqlx::query("SELECT * FROM webhooks WHERE id = $1 AND account_id = $2")
            .bind(id)
            .bind(account_id)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(webhook_from_row).transpose()
    }

    /// Deletes a subscription with its delivery log, and writes the audit line; `false`
    /// when the account has no such subscription.
    pub async fn delete_webhook(&self, account_id: &str, id: &str, actor: &str) -> Result<bool> {
        let mut tx = self.write_tx().await?;
        let url: Option<String> =
            sqlx::query("SELECT url FROM webhooks WHERE id = $1 AND account_id = $2")
                .bind(id)
                .bind(account_id)
                .fetch_optional(&mut *tx)
                .await?
                .map(|row| row.try_get("url"))
                .transpose()?;
        let Some(url) = url else {
            return Ok(false);
        };
        sqlx::query("DELETE FROM webhook_deliveries WHERE webhook_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM webhooks WHERE id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        let line = AuditLine {
            actor: actor.to_string(),
            action: "webhook.delete".to_string(),
            targets: Some(origin(&url)),
            outcome: format!("webhook {id} deleted"),
            ..Default::default()
        };
        insert_audit(&mut tx, account_id, &line).await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Turns the account's new events into pending deliveries of every active
    /// subscription (at most `limit` events per subscription per call), moving each
    /// subscription's cursor in the same transaction. Returns the deliveries made.
    pub async fn fan_out_events(&self, limit: u32) -> Result<u64> {
        let hooks = sqlx::query(
            "SELECT w.* FROM webhooks w JOIN event_counters c ON c.account_id = w.account_id
             WHERE w.state = 'active' AND c.last > w.cursor ORDER BY w.id",
        )
        .fetch_all(&self.pool)
        .await?;
        let mut made = 0;
        for hook in hooks.iter().map(webhook_from_row) {
            let hook = hook?;
            let events = self
                .events_after(&hook.account_id, hook.cursor, limit)
                .await?;
            let Some(last) = events.last().map(|e| e.seq) else {
                continue;
            };
            let now = now_ms();
            let mut tx = self.write_tx().await?;
            // The cursor moves only from where this read started: a concurrent fan-out
            // (a second controller) that moved it first makes this one a no-op.
            let moved =
                sqlx::query("UPDATE webhooks SET cursor = $1 WHERE id = $2 AND cursor = $3")
                    .bind(last)
                    .bind(&hook.id)
                    .bind(hook.cursor)
                    .execute(&mut *tx)
                    .await?;
            if moved.rows_affected() != 1 {
                continue;
            }
            for event in events
                .iter()
                .filter(|e| hook.events.contains(&e.event_type))
            {
                sqlx::query(
                    "INSERT INTO webhook_deliveries (webhook_id, event_seq, event_id, event_type,
                         status, attempts, schedule_from, next_attempt_at, created_at)
                     VALUES ($1, $2, $3, $4, 'pending', 0, 0, $5, $5)
                     ON CONFLICT (webhook_id, event_seq) DO NOTHING",
                )
                .bind(&hook.id)
                .bind(event.seq)
                .bind(&event.id)
                .bind(&event.event_type)
                .bind(now)
                .execute(&mut *tx)
                .await?;
                made += 1;
            }
            tx.commit().await?;
        }
        Ok(made)
    }

    /// Pending deliveries due at `now`, the longest waiting first, at most `limit`, of
    /// which at most `per_account` of one account's subscriptions: an account with a
    /// backlog takes its share of the attempts, not all of them.
    pub async fn due_deliveries(
        &self,
        now: i64,
        limit: u32,
        per_account: u32,
    ) -> Result<Vec<DueDelivery>> {
        let rows = sqlx::query(
            "SELECT * FROM (
                 SELECT d.*, ROW_NUMBER() OVER (PARTITION BY w.account_id
                     ORDER BY d.next_attempt_at, d.webhook_id, d.event_seq) AS account_rank
                 FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id
                 WHERE d.status = 'pending' AND d.next_attempt_at <= $1 AND w.state = 'active'
             ) due WHERE account_rank <= $3
             ORDER BY next_attempt_at, webhook_id, event_seq LIMIT $2",
        )
        .bind(now)
        .bind(i64::from(limit))
        .bind(i64::from(per_account))
        .fetch_all(&self.pool)
        .await?;
        let mut due = Vec::with_capacity(rows.len());
        for delivery in rows.iter().map(delivery_from_row) {
            let delivery = delivery?;
            let Some(hook) = sqlx::query("SELECT * FROM webhooks WHERE id = $1")
                .bind(&delivery.webhook_id)
                .fetch_optional(&self.pool)
                .await?
            else {
                continue;
            };
            let mut webhook = webhook_from_row(&hook)?;
            if let Some(key) = &self.secrets {
                match key.open(&webhook.id, &webhook.secret) {
                    Ok(secret) => webhook.secret = secret,
                    Err(error) => {
                        // Not sent unsigned nor signed wrong: it waits for the right key.
                        tracing::error!(webhook = %webhook.id, %error, "a webhook secret does not open: its deliveries wait");
                        continue;
                    }
                }
            }
            let Some(event) = self
                .events_after(&webhook.account_id, delivery.event_seq - 1, 1)
                .await?
                .into_iter()
                .find(|e| e.seq == delivery.event_seq)
            else {
                continue;
            };
            due.push(DueDelivery {
                delivery,
                webhook,
                event,
            });
        }
        Ok(due)
    }

    /// Records one attempt's outcome (and disables the subscription on a 410).
    pub async fn record_attempt(
        &self,
        webhook_id: &str,
        event_seq: i64,
        outcome: &AttemptOutcome,
    ) -> Result<()> {
        let now = now_ms();
        let mut tx = self.write_tx().await?;
        let (status, code, error, next, delivered) = match outcome {
            AttemptOutcome::Delivered { status_code } => {
                ("delivered", Some(*status_code), None, None, Some(now))
            }
            AttemptOutcome::Failed {
                status_code,
                error,
                retry_at,
            } => (
                if retry_at.is_some() {
                    "pending"
                } else {
                    "failed"
                },
                *status_code,
                Some(error.clone()),
                *retry_at,
                None,
            ),
            AttemptOutcome::Gone => (
                "failed",
                Some(410),
                // The subscription's disabled_reason says 410 Gone.
                Some("http_status".to_string()),
                None,
                None,
            ),
        };
        sqlx::query(
            "UPDATE webhook_deliveries SET status = $1, attempts = attempts + 1,
                 last_status_code = $2, last_error = $3, next_attempt_at = $4,
                 last_attempt_at = $5, delivered_at = COALESCE($6, delivered_at)
             WHERE webhook_id = $7 AND event_seq = $8",
        )
        .bind(status)
        .bind(code)
        .bind(error)
        .bind(next)
        .bind(now)
        .bind(delivered)
        .bind(webhook_id)
        .bind(event_seq)
        .execute(&mut *tx)
        .await?;
        if *outcome == AttemptOutcome::Gone {
            sqlx::query(
                "UPDATE webhooks SET state = 'disabled', disabled_reason = $1 WHERE id = $2",
            )
            .bind(format!(
                "the receiver answered 410 Gone at {}",
                format_ms(now)
            ))
            .bind(webhook_id)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// A subscription's delivery log, newest event first, at most `limit`, before the
    /// event seq `before` when given.
    pub async fn deliveries(
        &self,
        webhook_id: &str,
        limit: u32,
        before: Option<i64>,
    ) -> Result<Vec<DeliveryRow>> {
        Ok(self.deliveries_page(webhook_id, before, limit).await?.0)
    }

    /// A page of a subscription's delivery log, newest event first, before the event seq
    /// `cursor`, at most `limit`, and the cursor of the next page (an event seq).
    pub async fn deliveries_page(
        &self,
        webhook_id: &str,
        cursor: Option<i64>,
        limit: u32,
    ) -> Result<(Vec<DeliveryRow>, Option<String>)> {
        Keyset::new(
            "SELECT * FROM webhook_deliveries WHERE webhook_id = $1".to_string(),
            webhook_id,
        )
        .page(
            &self.pool,
            Order::NewestFirst,
            "event_seq",
            cursor.map(Bind::Int),
            limit,
            delivery_from_row,
            |delivery| delivery.event_seq,
        )
        .await
    }

    /// Sends a delivery again: pending now, its retry schedule started over. `None` when
    /// the subscription has no delivery of that event.
    pub async fn redeliver(&self, webhook_id: &str, event_id: &str) -> Result<Option<DeliveryRow>> {
        let now = now_ms();
        let mut tx = self.write_tx().await?;
        let done = sqlx::query(
            "UPDATE webhook_deliveries SET status = 'pending', next_attempt_at = $1,
                 schedule_from = attempts
             WHERE webhook_id = $2 AND event_id = $3",
        )
        .bind(now)
        .bind(webhook_id)
        .bind(event_id)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() == 0 {
            return Ok(None);
        }
        let row =
            sqlx::query("SELECT * FROM webhook_deliveries WHERE webhook_id = $1 AND event_id = $2")
                .bind(webhook_id)
                .bind(event_id)
                .fetch_one(&mut *tx)
                .await?;
        let delivery = delivery_from_row(&row)?;
        tx.commit().await?;
        Ok(Some(delivery))
    }
}

#[cfg(test)]
#[path = "webhook_secrets_tests.rs"]
mod secrets_tests;
