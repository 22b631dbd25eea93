-- Every split load or replay run now merges its shares' seconds, warm-up and measure,
-- into one `load` frame per second of its own stream (see store/split_seconds.rs), with
-- or without `abort_on_fail`. `split_seconds` is keyed by phase too (a warm-up second
-- and a measured one share a number), and `split_measures` counts the warm-up seconds
-- merged. A pending second is transient (it goes with the run's ending): the table is
-- made again rather than altered, which SQLite cannot do to a primary key.
DROP TABLE split_seconds;
CREATE TABLE split_seconds (
    run_id TEXT NOT NULL,
    phase TEXT NOT NULL,
    second BIGINT NOT NULL,
    share_index BIGINT NOT NULL,
    payload TEXT NOT NULL,
    PRIMARY KEY (run_id, phase, second, share_index)
);
ALTER TABLE split_measures ADD COLUMN warmup_through BIGINT NOT NULL DEFAULT 0;
