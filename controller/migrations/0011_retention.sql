-- Retention: a run whose per-second frames were deleted keeps its record (and its result's
-- summary) and says since when its frames are gone; the sweeps' queries by age get
-- indexes of their own.
ALTER TABLE runs ADD COLUMN frames_expired_at BIGINT;
CREATE INDEX runs_by_ended ON runs (ended_at);
CREATE INDEX audit_by_at ON audit (at);
CREATE INDEX findings_by_closed ON findings (closed_at);
CREATE INDEX webhook_deliveries_by_created ON webhook_deliveries (created_at);
