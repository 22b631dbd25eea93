//! An account's OpenTelemetry export (`crate::otlp`): the OTLP/HTTP endpoint, the headers
//! sent with each export (each value sealed as account secrets are, `sealed.rs`, with the
//! account and the header's name as associated data; without a key a header is refused,
//! never stored in clear), and the counts of load frames exported and dropped. The API
//! reads the headers' names only; the exporter opens the values
//! ([`Store::otlp_export_target`]). Audit lines name the endpoint, never a header's value.

use std::collections::BTreeMap;

use sqlx::Row;

use super::audit::{AuditLine, AuditedPut, insert_audit, put_audited};
use super::sealed::SealError;
use super::{Result, Store, StoreError, format_ms, now_ms};

/// An account's export as the API shows it: never a header's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtlpExportRow {
    pub endpoint: String,
    /// The headers' names, lowercase, in order.
    pub header_names: Vec<String>,
    pub created_by: String,
    pub created_at: i64,
    pub updated_by: String,
    pub updated_at: i64,
    pub exported_frames: i64,
    pub dropped_frames: i64,
    /// The class of the last failure (`connect_failed`, `timeout`, `http_status`, ...):
    /// never the error's text, which may name the controller's network.
    pub last_error: Option<String>,
    pub last_error_at: Option<i64>,
    pub last_exported_at: Option<i64>,
}

impl OtlpExportRow {
    pub fn to_api(&self) -> serde_json::Value {
        serde_json::json!({
            "endpoint": self.endpoint,
            "headers": self.header_names,
            "created_by": self.created_by,
            "created_at": format_ms(self.created_at),
            "updated_by": self.updated_by,
            "updated_at": format_ms(self.updated_at),
            "exported_frames": self.exported_frames,
            "dropped_frames": self.dropped_frames,
            "last_error": self.last_error,
            "last_error_at": self.last_error_at.map(format_ms),
            "last_exported_at": self.last_exported_at.map(format_ms),
        })
    }
}

/// Where an account's frames go, the headers' values opened: the exporter's only.
#[derive(Clone, PartialEq, Eq)]
pub struct OtlpTarget {
    pub endpoint: String,
    pub headers: BTreeMap<String, String>,
}

impl std::fmt::Debug for OtlpTarget {
    // Header values are credentials: never in a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OtlpTarget")
            .field("endpoint", &self.endpoint)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// The associated data a header's value is sealed with.
fn sealed_as(account_id: &str, name: &str) -> String {
    format!("otlp-header:{account_id}:{name}")
}

fn stored_headers(text: &str) -> Result<BTreeMap<String, String>> {
    serde_json::from_str(text)
        .map_err(|e| StoreError::Corrupt(format!("an OTLP export's headers: {e}")))
}

fn export_from_row(row: &sqlx::any::AnyRow) -> Result<OtlpExportRow> {
    let headers: String = row.try_get("headers")?;
    Ok(OtlpExportRow {
        endpoint: row.try_get("endpoint")?,
        header_names: stored_headers(&headers)?.into_keys().collect(),
        created_by: row.try_get("created_by")?,
        created_at: row.try_get("created_at")?,
        updated_by: row.try_get("updated_by")?,
        updated_at: row.try_get("updated_at")?,
        exported_frames: row.try_get("exported_frames")?,
        dropped_frames: row.try_get("dropped_frames")?,
        last_error: row.try_get("last_error")?,
        last_error_at: row.try_get("last_error_at")?,
        last_exported_at: row.try_get("last_exported_at")?,
    })
}

impl Store {
    /// Sets (or replaces) the account's export with its audit line, in one transaction;
    /// `true` when it was created. The counts are kept across a replacement. `headers`
    /// are sealed; with any and no key it is [`SealError::NoKey`] and nothing is stored.
    pub async fn put_otlp_export(
        &self,
        account_id: &str,
        endpoint: &str,
        headers: &BTreeMap<String, String>,
        actor: &str,
    ) -> Result<(bool, OtlpExportRow)> {
        let mut sealed = BTreeMap::new();
        if !headers.is_empty() {
            let key = self.secrets.as_ref().ok_or(SealError::NoKey)?;
            for (name, value) in headers {
                sealed.insert(name.clone(), key.seal(&sealed_as(account_id, name), value)?);
            }
        }
        let sealed = serde_json::to_string(&sealed)
            .map_err(|e| StoreError::Corrupt(format!("an OTLP export's headers: {e}")))?;
        let put = AuditedPut {
            table: "otlp_exports",
            key: None,
            values: &[("endpoint", endpoint), ("headers", &sealed)],
            actor,
        };
        let line = |created: bool| AuditLine {
            actor: actor.to_string(),
            action: if created {
                "otlp.create"
            } else {
                "otlp.update"
            }
            .to_string(),
            targets: Some(endpoint.to_string()),
            outcome: format!(
                "OpenTelemetry export to {endpoint} {} ({} headers)",
                if created { "set" } else { "replaced" },
                headers.len()
            ),
            ..Default::default()
        };
        put_audited(self, account_id, put, line, export_from_row).await
    }

    /// The account's export, without the headers' values.
    pub async fn otlp_export(&self, account_id: &str) -> Result<Option<OtlpExportRow>> {
        sqlx::query("SELECT * FROM otlp_exports WHERE account_id = $1")
            .bind(account_id)
            .fetch_optional(&self.pool)
            .await?
            .as_ref()
            .map(export_from_row)
            .transpose()
    }

    /// Whether any account has an export (when none has, frames are not even offered).
    pub async fn any_otlp_export(&self) -> Result<bool> {
        let any = sqlx::query("SELECT account_id FROM otlp_exports LIMIT 1")
            .fetch_optional(&self.pool)
            .await?;
        Ok(any.is_some())
    }

    /// Where the account's frames go, its headers opened: for the exporter only.
    pub async fn otlp_export_target(&self, account_id: &str) -> Result<Option<OtlpTarget>> {
        let Some(row) =
            sqlx::query("SELECT endpoint, headers FROM otlp_exports WHERE account_id = $1")
                .bind(account_id)
                .fetch_optional(&self.pool)
                .await?
        else {
            return Ok(None);
        };
        let stored: String = row.try_get("headers")?;
        let mut headers = BTreeMap::new();
        for (name, value) in stored_headers(&stored)? {
            // Never stored in clear: a value that is not sealed is not one of ours.
            if !super::sealed::is_sealed(&value) {
                return Err(StoreError::Corrupt(format!(
                    "the OTLP export's header {name} is not sealed"
                )));
            }
            let key = self.secrets.as_ref().ok_or(SealError::NoKey)?;
            headers.insert(
                name.clone(),
                key.open(&sealed_as(account_id, &name), &value)?,
            );
        }
        Ok(Some(OtlpTarget {
            endpoint: row.try_get("endpoint")?,
            headers,
        }))
    }

    /// Deletes the account's export and writes the audit line; `false` when it had none.
    pub async fn delete_otlp_export(&self, account_id: &str, actor: &str) -> Result<bool> {
        let mut tx = self.write_tx().await?;
        let deleted = sqlx::query("DELETE FROM otlp_exports WHERE account_id = $1")
            .bind(account_id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if deleted == 0 {
            return Ok(false);
        }
        let line = AuditLine {
            actor: actor.to_string(),
            action: "otlp.delete".to_string(),
            outcome: "OpenTelemetry export deleted".to_string(),
            ..Default::default()
        };
        insert_audit(&mut tx, account_id, &line).await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Adds to the account's counts: `exported` frames accepted by the collector,
    /// `dropped` not delivered, with the class of the failure that dropped them.
    pub async fn record_otlp_outcome(
        &self,
        account_id: &str,
        exported: u64,
        dropped: u64,
        failure: Option<&str>,
    ) -> Result<()> {
        let now = now_ms();
        let exported = i64::try_from(exported).unwrap_or(i64::MAX);
        let dropped = i64::try_from(dropped).unwrap_or(i64::MAX);
        sqlx::query(
            "UPDATE otlp_exports SET
                 exported_frames = exported_frames + $1,
                 dropped_frames = dropped_frames + $2,
                 last_error = CASE WHEN $3 IS NULL THEN last_error ELSE $3 END,
                 last_error_at = CASE WHEN $3 IS NULL THEN last_error_at ELSE $4 END,
                 last_exported_at = CASE WHEN $1 > 0 THEN $4 ELSE last_exported_at END
             WHERE account_id = $5",
        )
        .bind(exported)
        .bind(dropped)
        .bind(failure)
        .bind(now)
        .bind(account_id)
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::sealed::{self, SecretKey};
    use super::super::tests::{both, seed};
    use super::*;

    fn key() -> SecretKey {
        let dir = std::env::temp_dir().join(format!("iohr-key-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("dir");
        SecretKey::load_or_create(&dir).expect("key").0
    }

    #[tokio::test]
    async fn an_export_keeps_its_headers_sealed_and_counts_what_it_sent() {
        for store in both().await {
            let (account, _) = seed(&store).await;
            let headers = BTreeMap::from([("x-api-key".to_string(), "k3y-value".to_string())]);
            // Without a key a header is refused and nothing is stored.
            assert!(matches!(
                store
                    .put_otlp_export(
                        &account.id,
                        "https://otel.example/v1/metrics",
                        &headers,
                        "t"
                    )
                    .await,
                Err(StoreError::Sealed(SealError::NoKey))
            ));
            assert_eq!(store.otlp_export(&account.id).await.expect("read"), None);
            let store = store.with_secret_key(key());
            let (created, row) = store
                .put_otlp_export(
                    &account.id,
                    "https://otel.example/v1/metrics",
                    &headers,
                    "person:ada",
                )
                .await
                .expect("put");
            assert!(created);
            assert_eq!(row.header_names, vec!["x-api-key".to_string()]);
            let at_rest: String = sqlx::query("SELECT headers FROM otlp_exports")
                .fetch_one(&store.pool)
                .await
                .expect("row")
                .try_get("headers")
                .expect("headers");
            assert!(!at_rest.contains("k3y-value"), "{at_rest}");
            let target = store
                .otlp_export_target(&account.id)
                .await
                .expect("target")
                .expect("one");
            assert_eq!(target.headers, headers);
            assert!(!format!("{target:?}").contains("k3y-value"));
            assert!(sealed::is_sealed(
                stored_headers(&at_rest).expect("json")["x-api-key"].as_str()
            ));

            store
                .record_otlp_outcome(&account.id, 3, 0, None)
                .await
                .expect("ok");
            store
                .record_otlp_outcome(&account.id, 0, 2, Some("http_status"))
                .await
                .expect("failed");
            let (created, row) = store
                .put_otlp_export(
                    &account.id,
                    "https://other.example/v1/metrics",
                    &BTreeMap::new(),
                    "person:bob",
                )
                .await
                .expect("replace");
            assert!(!created);
            assert_eq!((row.exported_frames, row.dropped_frames), (3, 2), "kept");
            assert_eq!(row.last_error.as_deref(), Some("http_status"));
            assert!(row.last_error_at.is_some() && row.last_exported_at.is_some());
            assert!(row.header_names.is_empty());
            assert!(
                store
                    .delete_otlp_export(&account.id, "person:bob")
                    .await
                    .expect("delete")
            );
            assert!(
                !store
                    .delete_otlp_export(&account.id, "person:bob")
                    .await
                    .expect("again")
            );
            assert_eq!(store.otlp_export(&account.id).await.expect("read"), None);
        }
    }
}
