-- One-time enrollment tokens (`iohr-controller agent-token create`). A row holds the hash
-- of the token's secret, never the secret; `used_at` is set once, by the enrollment that
-- consumes it (one UPDATE ... WHERE used_at IS NULL AND expires_at > now).
CREATE TABLE enrollment_tokens (
    id TEXT PRIMARY KEY,
    hash TEXT NOT NULL,
    account_id TEXT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
    agent_name TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    used_at BIGINT
);
CREATE INDEX enrollment_tokens_account ON enrollment_tokens (account_id, agent_name);
