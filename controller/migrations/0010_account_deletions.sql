-- What remains of a deleted account: that it was deleted, when and by whom. Everything
-- else of it (runs, frames, findings, scenarios, schedules, webhooks and their logs,
-- events, tokens, agents and their certificates, audit lines) is gone.
CREATE TABLE account_deletions (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL,
    name TEXT NOT NULL,
    deleted_at BIGINT NOT NULL,
    deleted_by TEXT NOT NULL
);
