//! The queues: where a run waits and which agent it is leased to.
//!
//! - [`scheduler`]: the pure rules (order, plans, `max_concurrent_jobs`, exclusivity, turns).
//! - [`dispatcher`]: the one task that owns them, offers leases over the agent link, and
//!   enforces every deadline (offers, lost agents, the restart grace).

pub mod dispatcher;
pub mod scheduler;

pub use dispatcher::{AgentUp, Dispatcher, DispatcherHandle, OnlineAgent, QueueSlot, Refused};
pub use scheduler::{QueuedRun, SessionId};
