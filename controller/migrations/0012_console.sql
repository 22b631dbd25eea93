-- The console. `console_open`: whether the account's people who are not admins may sign
-- in (the owner opens it; until then it is admin-only). A session row holds the hash of
-- its cookie, never the cookie, and ends with its token (revoked or deleted).
ALTER TABLE accounts ADD COLUMN console_open BIGINT NOT NULL DEFAULT 0;

CREATE TABLE console_sessions (
    hash TEXT PRIMARY KEY,
    token_id TEXT NOT NULL REFERENCES tokens(id) ON DELETE CASCADE,
    account_id TEXT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE INDEX console_sessions_token ON console_sessions (token_id, created_at);
