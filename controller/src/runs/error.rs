//! Why a run did not start: a typed refusal with its machine-readable code, so that each
//! surface says it in its own terms (the API as an `ApiError` of the same code, the
//! schedule ticker as a fire's reason) without the layer knowing either.

use crate::queue::Refused;
use crate::store::StoreError;

/// What in a run's request is refused; [`Refusal::code`] is the word the API sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    UnknownKind,
    UnknownEnvironment,
    InvalidConfirmWithin,
    InvalidTarget,
    InvalidExecutor,
    UnknownAgent,
    InvalidChange,
    InvalidSpec,
    InvalidScenarioName,
    UnknownScenario,
    KindMismatch,
    SpecOrScenario,
    RunTooLong,
    InvalidAgents,
    AgentsNotPlaceable,
    /// A cloud run's target the platform agents' deny-list refuses.
    TargetNotAllowed,
    /// A `${secret:NAME}` the account does not have.
    UnknownSecret,
}

impl Refusal {
    /// The machine-readable code (the API's `error.code`).
    pub fn code(self) -> &'static str {
        match self {
            Refusal::UnknownKind => "unknown_kind",
            Refusal::UnknownEnvironment => "unknown_environment",
            Refusal::InvalidConfirmWithin => "invalid_confirm_within",
            Refusal::InvalidTarget => "invalid_target",
            Refusal::InvalidExecutor => "invalid_executor",
            Refusal::UnknownAgent => "unknown_agent",
            Refusal::InvalidChange => "invalid_change",
            Refusal::InvalidSpec => "invalid_spec",
            Refusal::InvalidScenarioName => "invalid_scenario_name",
            Refusal::UnknownScenario => "unknown_scenario",
            Refusal::KindMismatch => "kind_mismatch",
            Refusal::SpecOrScenario => "spec_or_scenario",
            Refusal::RunTooLong => "run_too_long",
            Refusal::InvalidAgents => "invalid_agents",
            Refusal::AgentsNotPlaceable => "agents_not_placeable",
            Refusal::TargetNotAllowed => "target_not_allowed",
            Refusal::UnknownSecret => "unknown_secret",
        }
    }

    /// Whether the request is well formed but names what cannot be (HTTP 422) rather than
    /// being wrong in itself (400).
    pub fn unprocessable(self) -> bool {
        matches!(self, Refusal::TargetNotAllowed | Refusal::UnknownSecret)
    }
}

/// Why a run could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The request is refused; the message says what to fix.
    #[error("{message}")]
    Refused { refusal: Refusal, message: String },
    /// The account's queue is full (checked before anything is written, and again in the
    /// transaction that stores the run).
    #[error(
        "this account has {limit} queued runs, its plan's limit; retry once some have started (a plan can raise it: iohr-controller account set-plan --max-queued)"
    )]
    TooManyQueued { limit: i64 },
    #[error(transparent)]
    Store(StoreError),
    /// The dispatcher could not take the run's place in its queue.
    #[error(transparent)]
    Dispatcher(#[from] Refused),
}

impl StartError {
    pub fn refused(refusal: Refusal, message: impl Into<String>) -> StartError {
        StartError::Refused {
            refusal,
            message: message.into(),
        }
    }

    /// The machine-readable code, as the API sends it for this error.
    pub fn code(&self) -> &'static str {
        match self {
            StartError::Refused { refusal, .. } => refusal.code(),
            StartError::TooManyQueued { .. } => "too_many_queued",
            StartError::Store(StoreError::NotFound(_)) => "not_found",
            StartError::Store(StoreError::Conflict(_)) => "conflict",
            StartError::Store(_) => "store_unavailable",
            StartError::Dispatcher(Refused::Busy) => "busy",
            StartError::Dispatcher(Refused::Stopped) => "shutting_down",
        }
    }

    /// `code: message`, what a caller without HTTP (a schedule's fire) records; a store's
    /// or the dispatcher's failure is said as the API says it, without its internals.
    pub fn reason(&self) -> String {
        let message = match self {
            StartError::Store(StoreError::NotFound(_) | StoreError::Conflict(_))
            | StartError::Refused { .. }
            | StartError::TooManyQueued { .. } => self.to_string(),
            StartError::Store(_) => "the store failed; retry later".to_string(),
            StartError::Dispatcher(Refused::Busy) => {
                "the controller's dispatcher has a full queue; retry shortly".to_string()
            }
            StartError::Dispatcher(Refused::Stopped) => "the controller is stopping".to_string(),
        };
        format!("{}: {message}", self.code())
    }
}

impl From<StoreError> for StartError {
    fn from(error: StoreError) -> StartError {
        match error {
            StoreError::TooManyQueued { limit } => StartError::TooManyQueued { limit },
            other => StartError::Store(other),
        }
    }
}
