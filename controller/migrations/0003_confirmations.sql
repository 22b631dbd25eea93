-- A faults run in a production environment waits for a person's confirmation, bound to
-- the hash of its exact experiment, target and environment, until a deadline.
ALTER TABLE runs ADD COLUMN confirm_hash TEXT;
ALTER TABLE runs ADD COLUMN confirm_deadline BIGINT;
ALTER TABLE runs ADD COLUMN confirmed_by TEXT;
ALTER TABLE runs ADD COLUMN confirmed_at BIGINT;
