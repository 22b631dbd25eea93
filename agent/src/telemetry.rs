//! The agent's spans of a lease, in the run's one trace (`iohr_telemetry`): `lease` from
//! the accepted offer to the completion, with `execute` (the kind running) and `ended`
//! (its outcome as `iohr.run.status`, the frames the run sent as `iohr.frames`) under it.
//! The per-second frames are counted, not spanned. With export off, every span here is
//! `Span::none()`: nothing is made.

use iohr_domain::RunKind;
use tracing::Span;

use crate::kinds::Outcome;

/// One lease's spans.
pub struct LeaseSpans {
    lease: Span,
}

impl LeaseSpans {
    /// The lease of `run_id` accepted by `agent`.
    pub fn accepted(run_id: &str, kind: RunKind, agent: &str, lease_id: &str) -> LeaseSpans {
        if !iohr_telemetry::enabled() {
            return LeaseSpans {
                lease: Span::none(),
            };
        }
        let lease = tracing::info_span!(
            target: iohr_telemetry::TARGET,
            "lease",
            iohr.run_id = %run_id,
            iohr.run.kind = %kind.as_str(),
            iohr.agent_id = %agent,
            iohr.lease_id = %lease_id,
            iohr.frames = tracing::field::Empty,
        );
        iohr_telemetry::join_run(&lease, run_id);
        LeaseSpans { lease }
    }

    /// The span the kind runs in.
    pub fn execute(&self) -> Span {
        if self.lease.is_none() {
            return Span::none();
        }
        tracing::info_span!(target: iohr_telemetry::TARGET, parent: &self.lease, "execute")
    }

    /// The run ended here with `outcome` (`None`: its executor failed) after `frames`.
    pub fn ended(self, outcome: Option<&Outcome>, frames: u64) {
        if self.lease.is_none() {
            return;
        }
        let status = outcome.map_or("error", |o| o.status.as_str());
        // As a signed integer: OTLP has no unsigned one, and the bridge sends a u64 as text.
        self.lease
            .record("iohr.frames", i64::try_from(frames).unwrap_or(i64::MAX));
        let _ended = tracing::info_span!(
            target: iohr_telemetry::TARGET,
            parent: &self.lease,
            "ended",
            iohr.run.status = %status,
        );
    }
}
