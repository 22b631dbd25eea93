//! Per-account egress exceptions: `CIDR|HOST[:PORT]` entries (`iohr_domain::egress::AllowRule`,
//! stored in its canonical spelling) that the controller's operator opens for one account
//! with `iohr-controller account allow-target`. No API writes them: a tenant never widens
//! its own egress. Each change writes an audit line in the same transaction.

use sqlx::Row;

use super::audit::{AuditLine, insert_audit};
use super::{Result, Store, now_ms};

/// Entries one account may hold.
pub const MAX_EGRESS_ALLOW_PER_ACCOUNT: usize = 100;

/// What an add came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllowAdd {
    /// The entries newly stored (those already held are not repeated).
    Added(Vec<String>),
    /// Storing them would pass [`MAX_EGRESS_ALLOW_PER_ACCOUNT`]: nothing stored.
    TooMany,
}

impl Store {
    /// Adds entries to the account's exceptions, with one audit line naming those added.
    pub async fn add_egress_allow(
        &self,
        account_id: &str,
        entries: &[String],
        actor: &str,
    ) -> Result<AllowAdd> {
        let mut tx = self.write_tx().await?;
        let held = held(&mut tx, account_id).await?;
        let mut new: Vec<String> = Vec::new();
        for entry in entries {
            if !held.contains(entry) && !new.contains(entry) {
                new.push(entry.clone());
            }
        }
        if held.len() + new.len() > MAX_EGRESS_ALLOW_PER_ACCOUNT {
            return Ok(AllowAdd::TooMany);
        }
        if new.is_empty() {
            return Ok(AllowAdd::Added(new));
        }
        let now = now_ms();
        for entry in &new {
            sqlx::query(
                "INSERT INTO account_egress_allow (account_id, entry, created_at)
                 VALUES ($1, $2, $3)",
            )
            .bind(account_id)
            .bind(entry)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        }
        let line = AuditLine {
            at: now,
            actor: actor.to_string(),
            action: "egress.allow".to_string(),
            targets: Some(new.join(" ")),
            outcome: format!("egress exceptions added: {}", new.join(" ")),
            ..Default::default()
        };
        insert_audit(&mut tx, account_id, &line).await?;
        tx.commit().await?;
        Ok(AllowAdd::Added(new))
    }

    /// Removes entries from the account's exceptions; the ones it held, with one audit
    /// line naming them.
    pub async fn remove_egress_allow(
        &self,
        account_id: &str,
        entries: &[String],
        actor: &str,
    ) -> Result<Vec<String>> {
        let mut tx = self.write_tx().await?;
        let mut removed = Vec::new();
        for entry in entries {
            let n = sqlx::query(
                "DELETE FROM account_egress_allow WHERE account_id = $1 AND entry = $2",
            )
            .bind(account_id)
            .bind(entry)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if n > 0 && !removed.contains(entry) {
                removed.push(entry.clone());
            }
        }
        if removed.is_empty() {
            return Ok(removed);
        }
        let line = AuditLine {
            actor: actor.to_string(),
            action: "egress.disallow".to_string(),
            targets: Some(removed.join(" ")),
            outcome: format!("egress exceptions removed: {}", removed.join(" ")),
            ..Default::default()
        };
        insert_audit(&mut tx, account_id, &line).await?;
        tx.commit().await?;
        Ok(removed)
    }

    /// The account's exceptions, in order.
    pub async fn egress_allow(&self, account_id: &str) -> Result<Vec<String>> {
        let mut conn = self.pool.acquire().await?;
        held(&mut conn, account_id).await
    }

    /// Every account's exceptions, `(account_id, entry)` in order (for deliveries, which
    /// serve all accounts).
    pub async fn all_egress_allow(&self) -> Result<Vec<(String, String)>> {
        let rows = sqlx::query(
            "SELECT account_id, entry FROM account_egress_allow ORDER BY account_id, entry",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| Ok((row.try_get("account_id")?, row.try_get("entry")?)))
            .collect()
    }
}

async fn held(conn: &mut sqlx::AnyConnection, account_id: &str) -> Result<Vec<String>> {
    let rows =
        sqlx::query("SELECT entry FROM account_egress_allow WHERE account_id = $1 ORDER BY entry")
            .bind(account_id)
            .fetch_all(conn)
            .await?;
    rows.iter().map(|row| Ok(row.try_get("entry")?)).collect()
}

#[cfg(test)]
mod tests {
    use super::super::tests::{both, seed};
    use super::*;

    fn list(entries: &[&str]) -> Vec<String> {
        entries.iter().map(|s| s.to_string()).collect()
    }

    #[tokio::test]
    async fn exceptions_are_added_listed_removed_audited_and_bounded() {
        for store in both().await {
            let (account, _) = seed(&store).await;
            let added = store
                .add_egress_allow(
                    &account.id,
                    &list(&["127.0.0.1/32", "hooks.internal:8443"]),
                    "operator:ops",
                )
                .await
                .expect("add");
            assert_eq!(
                added,
                AllowAdd::Added(list(&["127.0.0.1/32", "hooks.internal:8443"]))
            );
            // Adding one held again stores nothing new and writes no line.
            let again = store
                .add_egress_allow(&account.id, &list(&["127.0.0.1/32"]), "operator:ops")
                .await
                .expect("again");
            assert_eq!(again, AllowAdd::Added(Vec::new()));
            assert_eq!(
                store.egress_allow(&account.id).await.expect("list"),
                list(&["127.0.0.1/32", "hooks.internal:8443"])
            );
            let removed = store
                .remove_egress_allow(
                    &account.id,
                    &list(&["127.0.0.1/32", "10.0.0.0/8"]),
                    "operator:ops",
                )
                .await
                .expect("remove");
            assert_eq!(removed, list(&["127.0.0.1/32"]));
            assert_eq!(
                store.all_egress_allow().await.expect("all"),
                vec![(account.id.clone(), "hooks.internal:8443".to_string())]
            );
            let actions: Vec<String> = store
                .audit_lines(&account.id)
                .await
                .expect("audit")
                .into_iter()
                .filter(|l| l.action.starts_with("egress."))
                .map(|l| format!("{} {}", l.action, l.targets.unwrap_or_default()))
                .collect();
            assert_eq!(
                actions,
                [
                    "egress.allow 127.0.0.1/32 hooks.internal:8443",
                    "egress.disallow 127.0.0.1/32"
                ]
            );
            let many: Vec<String> = (0..=MAX_EGRESS_ALLOW_PER_ACCOUNT)
                .map(|i| format!("10.0.{}.{}/32", i / 256, i % 256))
                .collect();
            assert_eq!(
                store
                    .add_egress_allow(&account.id, &many, "operator:ops")
                    .await
                    .expect("many"),
                AllowAdd::TooMany
            );
            assert_eq!(
                store.egress_allow(&account.id).await.expect("kept").len(),
                1
            );
        }
    }
}
