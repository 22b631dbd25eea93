//! The keyset page of every listing (runs, findings, audit lines, scenario names,
//! webhooks, deliveries): the filters as bound `AND` clauses, ordered by the listing's
//! key (newest first, or in the key's order), the cursor the key of the last row of the
//! previous page, and one row more than the page asked for, to know whether there is a
//! next one. The one place a page is cut: no listing counts a full page as "more".

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
/// with text). Also the cursor of a listing: the key of the previous page's last row.
pub(super) enum Bind {
    Text(String),
    Int(i64),
}

impl Keyset {
    /// `select` ends with the condition on the owner (the account, or the webhook of a
    /// delivery log), bound to `$1`.
    pub(super) fn new(select: String, owner: &str) -> Keyset {
        Keyset {
            sql: select,
            binds: vec![Bind::Text(owner.to_string())],
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
        self,
        pool: &AnyPool,
        id_column: &str,
        cursor: Option<&str>,
        limit: u32,
        from_row: impl Fn(&AnyRow) -> Result<T>,
        id: impl Fn(&T) -> &str,
    ) -> Result<(Vec<T>, Option<String>)> {
        let after = cursor.map(|c| Bind::Text(c.to_string()));
        let key = move |row: &T| id(row).to_string();
        self.page(
            pool,
            Order::NewestFirst,
            id_column,
            after,
            limit,
            from_row,
            key,
        )
        .await
    }

    /// The page after `after` in `order` of `key_column` (at most `limit` rows) and the
    /// cursor of the next page, the key of its last row, when there is one.
    #[allow(clippy::too_many_arguments)] // a page is all of these; a struct would only rename them
    pub(super) async fn page<T, K: std::fmt::Display>(
        mut self,
        pool: &AnyPool,
        order: Order,
        key_column: &str,
        after: Option<Bind>,
        limit: u32,
        from_row: impl Fn(&AnyRow) -> Result<T>,
        key: impl Fn(&T) -> K,
    ) -> Result<(Vec<T>, Option<String>)> {
        let (past, direction) = match order {
            Order::NewestFirst => ("<", "DESC"),
            Order::Ascending => (">", "ASC"),
        };
        if let Some(after) = after {
            self.push(&format!("{key_column} {past}"), after);
        }
        let limit = limit.clamp(1, MAX_PAGE);
        self.sql.push_str(&format!(
            " ORDER BY {key_column} {direction} LIMIT {}",
            limit + 1
        ));
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
            page.last().map(|row| key(row).to_string())
        } else {
            None
        };
        Ok((page, next))
    }
}

/// Which way a listing runs.
#[derive(Debug, Clone, Copy)]
pub(super) enum Order {
    /// Newest first, by a key that grows with time (runs, findings, audit lines, deliveries).
    NewestFirst,
    /// In the key's order (scenario names, webhook ids).
    Ascending,
}

#[cfg(test)]
mod tests;
