-- One run over several agents (`"agents": N` at POST). The run people see (the parent)
-- has `share_count` N and no lease of its own; each of its N shares is a run row of its
-- own (`parent_id` the parent's id, `share_index` 0..N-1) that the queue places, leases
-- and ends as any run (no foreign key: retention sweeps shares and parent alike, a share
-- ending first). The parent's frames relay its shares' frames; it ends, with the
-- shares' results merged, when its last share ends (see store/shares.rs).
ALTER TABLE runs ADD COLUMN parent_id TEXT;
ALTER TABLE runs ADD COLUMN share_index BIGINT;
ALTER TABLE runs ADD COLUMN share_count BIGINT;
CREATE INDEX runs_by_parent ON runs (parent_id);
