//! The durable record: accounts, tokens, agents, scenarios, runs, frames and audit lines.
//!
//! One SQLite file by default, PostgreSQL when given a `postgres://` URL; both through
//! sqlx's `Any` driver with one portable schema (`migrations/`), so every query here runs
//! unchanged on both and every store test runs against both.

mod account_deletion;
mod account_secrets;
mod accounts;
mod admission;
mod agents;
mod audit;
mod baselines;
mod claim;
mod confirmations;
mod console;
mod counts;
mod egress_allow;
mod enrollment;
mod events;
mod files;
mod findings;
mod forge_credentials;
mod forge_reports;
mod frame_row;
mod frames;
mod otlp_exports;
mod page;
mod pooled;
mod reasons;
mod replicas;
mod retention;
mod run_row;
mod runs;
mod scenarios;
mod schedules;
pub mod sealed;
mod shares;
mod split_seconds;
mod steps;
#[cfg(test)]
pub(crate) mod tests;
mod triggers;
mod tx;
mod webhooks;

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use sqlx::any::{AnyPoolOptions, install_default_drivers};
use sqlx::{AnyPool, Executor};

pub use account_deletion::{ACCOUNT_TABLES, AccountDeletion};
pub use account_secrets::{
    MAX_SECRET_BYTES, MAX_SECRET_NAME, MAX_SECRETS_PER_ACCOUNT, SecretPut, SecretRow,
};
pub use accounts::{
    Account, DEFAULT_MAX_QUEUED, DEFAULT_MAX_RUN_DURATION_MS, DEFAULT_MAX_RUNNING, Environment,
    PlanChange, Scope, TokenInfo, TokenListing,
};
pub use admission::{MonthUse, month_bounds};
pub use agents::{AgentIdentity, AgentRow, AgentScope, Declaration, StoredLease};
pub use audit::{AuditFilter, AuditLine};
pub use baselines::BaselineQuery;
pub use claim::Claim;
pub use confirmations::ConfirmRefusal;
pub use console::{ConsoleSession, MAX_SESSIONS_PER_TOKEN, SESSION_TTL_MS};
pub use egress_allow::{AllowAdd, MAX_EGRESS_ALLOW_PER_ACCOUNT};
pub use enrollment::{Consumed, EnrollmentGrant, EnrollmentTokenRow, TokenRefusal};
pub use events::{Backlog, EVENT_TYPES, EventRow, FINDING_CREATED, RUN_FINISHED};
pub use files::{secure_data_dir, tighten};
pub use findings::{FindingFilter, FindingRow};
pub use forge_credentials::{ForgeCredentialRow, ForgeCredentials, MAX_FORGE_TOKEN_BYTES};
pub use forge_reports::{DueReport, MAX_REPORT_LOG_PER_ACCOUNT, ReportKey, ReportLogLine};
pub use frames::{AgentAppend, StoredFrame};
pub use otlp_exports::{OtlpExportRow, OtlpTarget};
pub use pooled::{OFFERS_CHANNEL, PoolAsk, Pooled, PooledShare};
pub use replicas::{
    CANCELS_CHANNEL, ENDED_CHANNEL, FRAMES_CHANNEL, FramesNotice, QUEUE_CHANNEL, ReplicaOffer,
};
pub use retention::{Periods, Swept};
pub use run_row::{ConfirmState, Ending, LeaseGuard, NewRun, RunFilter, RunRow};
pub use scenarios::{Scenario, ScenarioName, ScenarioVersion, Stored};
pub use schedules::{Fire, MAX_SCHEDULES, NewSchedule, ScheduleChange, ScheduleRow};
pub use split_seconds::SplitMeasure;
pub use steps::StepVerdict;
pub use triggers::{
    Claimed, MAX_TRIGGER_DELIVERIES, MAX_TRIGGERS, NewTrigger, TriggerDelivery, TriggerRow,
};
pub use tx::Tx;
pub use webhooks::{
    AttemptOutcome, DeliveryRow, DueDelivery, FAILURE_CLASSES, MAX_WEBHOOKS_PER_ACCOUNT,
    NewWebhook, WebhookRow,
};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    #[error("migrations: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("{0} not found")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    /// The account has as many queued runs as its plan allows: the new one is not stored.
    #[error("the account has {limit} queued runs, its plan's limit")]
    TooManyQueued { limit: i64 },
    #[error("stored data is invalid: {0}")]
    Corrupt(String),
    #[error("store files: {0}")]
    Files(#[from] std::io::Error),
    #[error(transparent)]
    Sealed(#[from] sealed::SealError),
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

#[derive(Debug, Clone)]
pub struct Store {
    pool: AnyPool,
    backend: Backend,
    /// The URL, for the connections that are not the pool's (a replica's listener).
    url: std::sync::Arc<str>,
    /// This process's replica number (`serve --replica`), 0 when it serves alone; see
    /// `replicas.rs`.
    replica: i64,
    /// The key webhook secrets are sealed with (`sealed.rs`); without one (commands that
    /// never read a secret) new secrets would be stored in clear, so `serve` sets it.
    secrets: Option<sealed::SecretKey>,
}

/// How long a PostgreSQL store operation waits for a working connection before it fails
/// (docs/guarantees.md, scenario 3).
pub const POSTGRES_ACQUIRE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// The SQLite URL of the store file in a data dir.
pub fn sqlite_url(data_dir: &Path) -> String {
    format!("sqlite://{}?mode=rwc", data_dir.join("iohr.db").display())
}

impl Store {
    /// Opens (and creates, for SQLite) the store and brings its schema up to date.
    pub async fn open(url: &str) -> Result<Store> {
        install_default_drivers();
        let backend = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Backend::Postgres
        } else {
            Backend::Sqlite
        };
        let options = AnyPoolOptions::new().max_connections(match backend {
            // SQLite writes one at a time; a few readers beside the writer are enough.
            Backend::Sqlite => 4,
            Backend::Postgres => 16,
        });
        let options = if backend == Backend::Postgres {
            // A server cut off or restarting: the pool's ping of an idle connection (or its
            // new connection) waits this long, then the caller answers 503
            // `store_unavailable`, rather than hanging sqlx's default 30 s (issue 34).
            options.acquire_timeout(POSTGRES_ACQUIRE_TIMEOUT)
        } else {
            options
        };
        let options = if backend == Backend::Sqlite {
            options.after_connect(|conn, _meta| {
                Box::pin(async move {
                    conn.execute("PRAGMA synchronous = NORMAL; PRAGMA busy_timeout = 10000;")
                        .await?;
                    Ok(())
                })
            })
        } else {
            options
        };
        if backend == Backend::Sqlite {
            files::secure_sqlite(url)?;
        }
        let pool = options.connect(url).await?;
        if backend == Backend::Sqlite {
            // WAL lets readers (the API, SSE replays) go on while a frame batch is written.
            pool.execute("PRAGMA journal_mode = WAL;").await?;
        }
        MIGRATOR.run(&pool).await?;
        Ok(Store {
            pool,
            backend,
            url: url.into(),
            replica: 0,
            secrets: None,
        })
    }

    /// This store with the key webhook secrets are sealed with.
    pub fn with_secret_key(mut self, key: sealed::SecretKey) -> Store {
        self.secrets = Some(key);
        self
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// A transaction that reads a row and then writes. SQLite takes its write lock at
    /// `BEGIN IMMEDIATE`, so the read cannot go stale before the write (a deferred
    /// transaction would fail with "database is locked" under concurrent writers);
    /// PostgreSQL callers lock what they read with [`Store::for_update`].
    pub(crate) async fn write_tx(&self) -> Result<sqlx::Transaction<'static, sqlx::Any>> {
        Ok(match self.backend {
            Backend::Sqlite => self.pool.begin_with("BEGIN IMMEDIATE").await?,
            Backend::Postgres => self.pool.begin().await?,
        })
    }

    /// Orders the bounded writes of one account inside a [`Store::write_tx`], taken
    /// first: under PostgreSQL's read committed, two puts of one new key would both find
    /// no row and both insert (the second failing on the key), and two racing for the
    /// account's last place would both count under its bound. The account's row, locked,
    /// orders them; `NO KEY UPDATE` leaves its children's foreign keys free (run
    /// admission takes the same lock as it reads the plan). SQLite's `BEGIN IMMEDIATE`
    /// already does.
    pub(crate) async fn lock_account(
        &self,
        tx: &mut sqlx::Transaction<'static, sqlx::Any>,
        account_id: &str,
    ) -> Result<()> {
        if self.backend == Backend::Postgres {
            sqlx::query("SELECT id FROM accounts WHERE id = $1 FOR NO KEY UPDATE")
                .bind(account_id)
                .fetch_optional(&mut **tx)
                .await?;
        }
        Ok(())
    }

    /// The row-locking clause for a read inside [`Store::write_tx`] (`OF r` names the
    /// table when the query joins others).
    pub(crate) fn for_update(&self, of: Option<&str>) -> String {
        match (self.backend, of) {
            (Backend::Sqlite, _) => String::new(),
            (Backend::Postgres, None) => " FOR UPDATE".to_string(),
            (Backend::Postgres, Some(alias)) => format!(" FOR UPDATE OF {alias}"),
        }
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }
}

/// A split run's merged measures while it runs (`split_seconds.rs`, `steps.rs`): keyed by the
/// split run's id, they go with its ending, its retention and its account.
pub(crate) const SPLIT_MEASURE_TABLES: [&str; 4] = [
    "split_measures",
    "split_seconds",
    "split_step_points",
    "split_steps",
];

/// Milliseconds since the Unix epoch: the store's only notion of time.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// RFC 3339 UTC with milliseconds, as the API shows times.
pub fn format_ms(ms: i64) -> String {
    let t = UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_millis(t).to_string()
}

pub(crate) fn new_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// Lists and maps are stored as JSON text.
fn to_json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

fn json_list(text: &str) -> Vec<String> {
    serde_json::from_str(text).unwrap_or_default()
}
