-- A run started for a forge's change keeps the head commit it measures and the change
-- its baseline is looked for on (a pull request's base branch, `owner/repo@main`),
-- and the forge (github, gitlab) the change lives on, where its comparison goes back.
ALTER TABLE runs ADD COLUMN change_commit TEXT;
ALTER TABLE runs ADD COLUMN change_base TEXT;
ALTER TABLE runs ADD COLUMN change_forge TEXT;
-- The before-run a trigger started beside this run as its baseline, when it asked for one.
ALTER TABLE runs ADD COLUMN baseline_run TEXT;
-- Baselines are looked up by what a run measures and the change it was run for.
CREATE INDEX runs_baseline ON runs (account_id, scenario_id, scenario_version, environment, target, change_ref, status);
