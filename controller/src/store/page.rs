//! The keyset page of a listing (runs, findings, audit lines): the filters as bound `AND` clauses, newest
//! first by id, the cursor the id of the last row of the previous page, and one row more
//! than the page asked for, to know whether there is a next one.

use sqlx::AnyPool;
use sqlx::AssertSqlSafe;
use sqlx::any::AnyRow;

use super::Result;

/// The largest page, whatever the caller asks for.
const MAX_PAGE: u32 = 500;

/// A listing's query under construction: `SELECT ... WHERE <owner> = $1`, then its filters.
pub(super) struct Keyset {
    sql: String,
    binds: Vec<Bind>,
}

/// A bound value: text, or a number for integer columns (PostgreSQL compares no `BIGINT`
/// with text).
enum Bind {
    Text(String),
    Int(i64),
}

impl Keyset {
    /// `select` ends with the condition on the account, bound to `$1`.
    pub(super) fn new(select: String, account_id: &str) -> Keyset {
        Keyset {
            sql: select,
            binds: vec![Bind::Text(account_id.to_string())],
        }
    }

    /// Adds ` AND <clause> $n` with `value` bound to it (`clause` such as `"r.status ="`).
    pub(super) fn and(&mut self, clause: &str, value: Option<String>) {
        if let Some(value) = value {
            self.push(clause, Bind::Text(value));
        }
    }

    /// [`Keyset::and`] for an integer column (`clause` such as `"at >="`).
    pub(super) fn and_int(&mut self, clause: &str, value: Option<i64>) {
        if let Some(value) = value {
            self.push(clause, Bind::Int(value));
        }
    }

    fn push(&mut self, clause: &str, bind: Bind) {
        self.binds.push(bind);
        self.sql
            .push_str(&format!(" AND {clause} ${}", self.binds.len()));
    }

    /// The page after `cursor` (at most `limit` rows, newest first by `id_column`) and the
    /// cursor of the next page when there is one.
    pub(super) async fn fetch<T>(
        mut self,
        pool: &AnyPool,
        id_column: &str,
        cursor: Option<&str>,
        limit: u32,
        from_row: impl Fn(&AnyRow) -> Result<T>,
        id: impl Fn(&T) -> &str,
    ) -> Result<(Vec<T>, Option<String>)> {
        self.and(&format!("{id_column} <"), cursor.map(str::to_string));
        let limit = limit.clamp(1, MAX_PAGE);
        self.sql
            .push_str(&format!(" ORDER BY {id_column} DESC LIMIT {}", limit + 1));
        let mut query = sqlx::query(AssertSqlSafe(self.sql));
        for bind in self.binds {
            query = match bind {
                Bind::Text(value) => query.bind(value),
                Bind::Int(value) => query.bind(value),
            };
        }
        let rows = query.fetch_all(pool).await?;
        let mut page = rows.iter().map(from_row).collect::<Result<Vec<_>>>()?;
        let next = if page.len() > limit as usize {
            page.truncate(limit as usize);
            page.last().map(|row| id(row).to_string())
        } else {
            None
        };
        Ok((page, next))
    }
}
