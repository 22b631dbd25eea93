-- Audit lines name a schedule (schedule changes and the runs they start) and the faults a
-- line is about, beside the run and targets; both stay empty where they do not apply.
ALTER TABLE audit ADD COLUMN schedule_id TEXT;
ALTER TABLE audit ADD COLUMN faults TEXT;
CREATE INDEX audit_by_account_action ON audit (account_id, action, at);
