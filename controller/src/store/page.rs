//! The keyset page of a listing (runs, findings): the filters as bound `AND` clauses, newest
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
    binds: Vec<String>,
}

impl Keyset {
    /// `select` ends with the condition on the account, bound to `$1`.
    pub(super) fn new(select: String, account_id: &str) -> Keyset {
        Keyset {
            sql: select,
            binds: vec![account_id.to_string()],
        }
    }

    /// Adds ` AND <clause> $n` with `value` bound to it (`clause` such as `"r.status ="`).
    pub(super) fn and(&mut self, clause: &str, value: Option<String>) {
        if let Some(value) = value {
            self.binds.push(value);
            self.sql
                .push_str(&format!(" AND {clause} ${}", self.binds.len()));
        }
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
        for value in &self.binds {
            query = query.bind(value);
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
