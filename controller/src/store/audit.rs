//! Audit lines: one per start, cancel, confirmation, lapse, finding close and halt (and
//! schedule and webhook changes): who, which run or schedule, which targets and faults,
//! and the outcome. Never a request body or a credential.

use sqlx::Row;

use super::{Result, Store, new_id, now_ms};

/// One audit line. Build it with `AuditLine { actor, action, outcome, ..Default::default() }`
/// and the subjects that apply; `at: 0` means "now" when it is written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditLine {
    pub at: i64,
    pub actor: String,
    pub action: String,
    pub run_id: Option<String>,
    pub schedule_id: Option<String>,
    pub targets: Option<String>,
    /// The fault types a line is about (a faults run's start, confirmation, halt).
    pub faults: Option<String>,
    pub outcome: String,
}

/// Writes one audit line on a connection (alone, or inside the transaction of the change
/// it records).
pub(super) async fn insert_audit(
    conn: &mut sqlx::AnyConnection,
    account_id: &str,
    line: &AuditLine,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO audit
             (id, at, account_id, actor, action, run_id, schedule_id, targets, faults, outcome)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
    )
    .bind(new_id())
    .bind(if line.at == 0 { now_ms() } else { line.at })
    .bind(account_id)
    .bind(&line.actor)
    .bind(&line.action)
    .bind(&line.run_id)
    .bind(&line.schedule_id)
    .bind(&line.targets)
    .bind(&line.faults)
    .bind(&line.outcome)
    .execute(conn)
    .await?;
    Ok(())
}

impl Store {
    pub async fn audit(&self, account_id: &str, line: &AuditLine) -> Result<()> {
        let mut conn = self.pool.acquire().await?;
        insert_audit(&mut conn, account_id, line).await
    }

    pub async fn audit_lines(&self, account_id: &str) -> Result<Vec<AuditLine>> {
        let rows = sqlx::query("SELECT * FROM audit WHERE account_id = $1 ORDER BY at, id")
            .bind(account_id)
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|row| {
                Ok(AuditLine {
                    at: row.try_get("at")?,
                    actor: row.try_get("actor")?,
                    action: row.try_get("action")?,
                    run_id: row.try_get("run_id")?,
                    schedule_id: row.try_get("schedule_id")?,
                    targets: row.try_get("targets")?,
                    faults: row.try_get("faults")?,
                    outcome: row.try_get("outcome")?,
                })
            })
            .collect()
    }
}
