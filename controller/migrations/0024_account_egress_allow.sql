-- Per-account egress exceptions: `CIDR|HOST[:PORT]` entries the controller's operator
-- (never a tenant) opens for one account with `iohr-controller account allow-target`;
-- they widen that account's webhooks and cloud runs beyond the process-wide exceptions.
CREATE TABLE account_egress_allow (
    account_id TEXT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
    entry TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (account_id, entry)
);
