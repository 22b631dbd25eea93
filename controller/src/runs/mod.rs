//! The run-lifecycle layer: a run's life has one owner here, between the surfaces (REST,
//! MCP, console, schedule ticker, agent link), which authenticate, translate and call it,
//! and the store, which persists what it decides.
//!
//! - [`start`]: a request checked against the account, its spec read once into a
//!   [`plan::PlannedRun`] through the kind contract (`iohr_domain::kind`), then stored
//!   and queued ([`start::store_run`]: a run the plan refuses at the door is stored
//!   ended, its `finished` frame and event with it). Refusals are a typed
//!   [`error::StartError`] with the code each surface says in its own terms.
//! - [`read`]: the account's runs a page at a time and one run as its record, typed
//!   ([`crate::query::Page`], `RunRecord`), for the REST API and the console alike.
//! - [`frames`]: a run's frames for one viewer, stored then live, in order.
//! - [`relay`]: an agent's frames stored, a share's relayed onto its split run, which is
//!   judged on the whole as they come ([`judge`]: merged seconds against `abort_on_fail`,
//!   a sweep's steps against its SLO); [`step_verdict`] answers a share's agent asking
//!   for a step's verdict, or for the start once every share holds its lease.
//! - [`ending`]: what a run's ending means (its findings, events, last frames) and, for
//!   a split run's last share, its split run's settlement ([`settle`]).
//! - `spans`: an ended run's life as spans for the operator's tracing backend.
//! - [`cancel`] and [`confirm`]: a run cancelled (or every experiment halted) and a
//!   production faults run confirmed by a person, refusals typed ([`cancel::CancelError`],
//!   [`confirm::ConfirmError`]).
//! - [`compare`]: two of an account's runs compared, refusals a typed
//!   [`compare::CompareError`].
//!
//! The layer imports the store, the queue and `domain`; never a surface (`crate::api`,
//! `crate::console`, `crate::mcp`, `crate::schedule`). It opens the store's transactions
//! (`Store::begin`) and decides what they write; `relay`, `judge`, `ending` and `settle`
//! import only the store and `domain`, so the queue's dispatcher may call them.

pub mod baseline;
pub mod cancel;
pub mod compare;
pub mod confirm;
pub mod ending;
pub mod error;
pub mod frames;
pub mod from_run;
pub mod guards;
mod judge;
pub mod plan;
pub mod read;
pub mod relay;
pub mod settle;
mod spans;
pub mod start;

pub use error::{Refusal, StartError};
pub use judge::steps::step_verdict;
pub use plan::PlannedRun;
pub use start::{CheckedRun, RunRequest};
