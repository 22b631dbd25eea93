//! Why a run would wait for an agent, for the API's handlers that queue one outside
//! `POST /runs` (a confirmed faults run): the run-lifecycle layer's answer
//! (`crate::runs::guards`, where a new run's other checks live).

pub use crate::runs::guards::waiting_reason;
