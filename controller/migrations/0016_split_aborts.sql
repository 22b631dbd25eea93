-- A split run with `abort_on_fail`: its thresholds are judged on the whole, the shares'
-- measured seconds merged (a share runs with `abort_on_fail` off; see store/aborts.rs).
-- `split_measures`: per such split run, its thresholds, the seconds merged so far
-- (`through`), the merged measure (histogram and counts) and, once one crossed, why it
-- stopped. `split_seconds`: a share's measured second that not every share has sent
-- yet. Both hold measures only (never a request or a body), and go with the run's
-- ending.
CREATE TABLE split_measures (
    run_id TEXT PRIMARY KEY,
    thresholds TEXT NOT NULL,
    through BIGINT NOT NULL DEFAULT 0,
    measure TEXT,
    aborted TEXT
);
CREATE TABLE split_seconds (
    run_id TEXT NOT NULL,
    second BIGINT NOT NULL,
    share_index BIGINT NOT NULL,
    payload TEXT NOT NULL,
    PRIMARY KEY (run_id, second, share_index)
);
