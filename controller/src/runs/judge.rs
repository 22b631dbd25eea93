//! A split run judged on the whole while its shares run: its seconds merged and its
//! `abort_on_fail` thresholds judged on them ([`seconds`]), a capacity sweep's steps
//! judged on every share's part merged ([`steps`]). One share's measure is not the
//! run's, so neither is any one agent's to judge. The state lives in the store's rows
//! (shares may stream to different replicas); the judging is here.

pub(super) mod seconds;
pub(super) mod steps;
