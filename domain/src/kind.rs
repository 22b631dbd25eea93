//! The kind contract: what every kind of run says for itself, in one place per kind.
//!
//! A kind is a line in the `kinds!` list below (its [`RunKind`] variant, its word, its
//! contract) and a type implementing [`Kind`] in `kind/NAME.rs`: how its
//! spec is read and planned, what a run of it costs, what it may do (exclusive, https,
//! confirmed in production), the findings its result gives and how two of its results
//! compare. [`visit`] is the registry, the one `match` over the kinds, generated from the
//! list with the enum, its words and `ALL`: the controller, the findings and compare reach
//! every kind through it, as do the surfaces for what they decide by kind
//! ([`decisions`]), and the trait names every item the new kind must fill. The agent keeps its own registry for what only it does (executing, dry runs).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::compare::Comparison;
use crate::cost::RunCost;
use crate::finding::{Found, RunFacts};
use crate::load::{AgentLoss, LoadResult, MergeError, Share, Threshold};
use crate::request::SpecError;
use crate::run::{RunStatus, UnknownWord};

pub use decisions::{LiveView, ResultPlot};

pub mod capacity;
pub mod checks;
pub mod decisions;
pub mod faults;
pub mod load;
pub mod replay;
pub mod scenario;

/// What a kind may do, as the queue and the API ask it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Traits {
    /// Runs that would measure each other: at most one at a time per agent.
    pub exclusive: bool,
    /// Whether the target may be `https://`.
    pub https: bool,
    /// Whether a run in a production environment waits for a person's confirmation.
    pub confirmed_in_production: bool,
    /// Whether two of its results compare (else compare refuses the kind).
    pub compared: bool,
    /// Whether a run may be split over agents (`"agents": N`), each sending its share; the
    /// kinds that say so override [`Kind::check_split`] and [`Kind::share`].
    pub split: bool,
}

/// One kind of run. Every item is about the spec or the result as JSON, so that each side
/// (controller, agent, CLI) reads them the same way.
pub trait Kind {
    const KIND: RunKind;
    const TRAITS: Traits;
    /// The spec as read from JSON.
    type Spec;
    /// The spec checked and ready to run.
    type Plan;

    /// Reads a spec; the error names the field.
    fn spec(value: &Value) -> Result<Self::Spec, SpecError>;
    /// Checks every range and planning rule of a spec.
    fn plan(spec: &Self::Spec) -> Result<Self::Plan, SpecError>;
    /// The units a run reserves and, for the kinds a plan caps, the longest it can last.
    fn cost(spec: &Self::Spec, plan: &Self::Plan) -> RunCost;
    /// Refuses a spec that reaches outside the run's target (faults' probes).
    fn check_target(_plan: &Self::Plan, _target: &str) -> Result<(), SpecError> {
        Ok(())
    }
    /// The findings a finished run's result gives.
    fn findings(facts: &RunFacts, found: &mut Vec<Found>);
    /// Compares two results of this kind (only called when `TRAITS.compared`).
    fn compare(before: Value, after: Value, out: &mut Comparison);

    /// Whether a run of this kind may be split over `count` agents (`"agents": N`); a
    /// kind that does not split refuses every count but 1.
    fn check_split(_plan: &Self::Plan, count: u32) -> Result<(), SpecError> {
        one_agent(Self::KIND, count)
    }
    /// The plan one agent runs as `share` of a split run ([`Share`]).
    fn share(plan: Self::Plan, share: Share) -> Result<Self::Plan, SpecError> {
        one_agent(Self::KIND, share.count()).map(|()| plan)
    }
    /// The thresholds that stop a run as soon as its measure so far crosses one
    /// (`abort_on_fail`): in a split run, what the controller judges on the merged seconds
    /// (a share runs with `abort_on_fail` off).
    fn abort_thresholds(_plan: &Self::Plan) -> Vec<Threshold> {
        Vec::new()
    }
    /// The faults a run applies, named on its audit line (faults' method).
    fn applied_faults(_plan: &Self::Plan) -> Vec<String> {
        Vec::new()
    }
    /// Whether a spec names an earlier run whose record the controller writes into it
    /// before storing it (a replay's `from_run`).
    fn reads_earlier_run(_value: &Value) -> bool {
        false
    }
    /// Whether a split run's shares send seconds of one schedule that the controller
    /// merges into the whole's, one per second, judging its `abort_on_fail` on them.
    fn merges_seconds() -> bool;
    /// Whether a split run's steps are judged on its shares' parts merged (a sweep's).
    fn judges_steps() -> bool;
    /// Whether a run that ended `error` still has findings in its result (a faults run
    /// whose rollback failed reports the fault it left applied: that finding is the alert).
    fn finds_on_error() -> bool;
    /// What losing one share's agent does to a split run (`on_agent_lost`).
    fn on_agent_lost(_spec: &Self::Spec) -> AgentLoss {
        AgentLoss::Error
    }
    /// A split run's result from its shares' results (JSON), with its verdict judged
    /// again on the whole; a kind that does not split has nothing to merge.
    fn merge_shares(_plan: &Self::Plan, _results: &[Value]) -> Result<MergedRun, MergeError> {
        Err(MergeError::NotSplit(Self::KIND))
    }
    /// The name an inline spec is stored under when the run names none: a kind whose spec
    /// names itself (a scenario's slug) says so; the others are stored as `inline-KIND`.
    fn stored_name(_spec: &Self::Spec) -> Option<String> {
        None
    }

    // What each surface decides by the kind ([`decisions`]): no defaults, so that a new
    // kind says each of them.
    /// How often a schedule of this kind may fire unless the account's plan says
    /// otherwise (`set-plan --schedule-floor`).
    const SCHEDULE_FLOOR: Duration;
    /// Whether the agent samples its own stress (CPU, lag, sockets) beside a run of this
    /// kind: the kinds that send load, whose result then says when the generator set the
    /// pace ([`crate::stress`]).
    const STRESS_SAMPLED: bool;
    /// Whether `POST /halt` (stop the account's experiments now) cancels this kind's
    /// queued and running runs.
    const HALTED: bool;
    /// What the run's page draws from its live feed.
    const LIVE_VIEW: LiveView;
    /// What a finished run's page and compare draw from its result and seconds.
    const RESULT_PLOT: ResultPlot;
    /// The measured part's length in seconds, read leniently from the spec as sent (the
    /// CLI's progress bar); `None` when the spec does not say it or the kind has none.
    fn measured_seconds(spec: &Value) -> Option<u64>;

    /// Reads and plans a spec in one step.
    fn read(value: &Value) -> Result<(Self::Spec, Self::Plan), SpecError> {
        let spec = Self::spec(value)?;
        let plan = Self::plan(&spec)?;
        Ok((spec, plan))
    }
}

/// Something done with a kind's type: [`visit`] calls `visit::<K>` for the kind named.
pub trait KindVisitor {
    type Output;
    fn visit<K: Kind>(self) -> Self::Output;
}

struct TraitsOf;
impl KindVisitor for TraitsOf {
    type Output = Traits;
    fn visit<K: Kind>(self) -> Traits {
        K::TRAITS
    }
}

/// Validates a spec for its kind and says what a run of it may cost; with `target`, also
/// that the spec stays on that target.
pub fn cost(kind: RunKind, spec: &Value, target: Option<&str>) -> Result<RunCost, SpecError> {
    struct CostOf<'a>(&'a Value, Option<&'a str>);
    impl KindVisitor for CostOf<'_> {
        type Output = Result<RunCost, SpecError>;
        fn visit<K: Kind>(self) -> Self::Output {
            let (spec, plan) = K::read(self.0)?;
            if let Some(target) = self.1 {
                K::check_target(&plan, target)?;
            }
            Ok(K::cost(&spec, &plan))
        }
    }
    visit(kind, CostOf(spec, target))
}

/// The refusal of a kind that runs on one agent, for any other count (the default of
/// [`Kind::check_split`] and [`Kind::share`]).
pub fn one_agent(kind: RunKind, count: u32) -> Result<(), SpecError> {
    if count == 1 {
        Ok(())
    } else {
        Err(crate::request::spec_error(
            "agents",
            format!(
                "a {kind} run runs on one agent; only {} runs are split",
                RunKind::listed_where(|t| t.split, "and")
            ),
        ))
    }
}

/// A split run's result merged from its shares' ([`Kind::merge_shares`]) and the verdict
/// on it as a whole.
#[derive(Debug, Clone, PartialEq)]
pub struct MergedRun {
    pub result: Value,
    pub status: RunStatus,
    pub reason: Option<String>,
}

impl MergedRun {
    /// Merged load results ([`crate::load::merge_results`]) with [`LoadResult::verdict`].
    pub(crate) fn of_load(results: &[Value]) -> Result<MergedRun, MergeError> {
        let result = crate::load::merge_results(results)?;
        let merged =
            LoadResult::deserialize(&result).map_err(|e| MergeError::NotLoad(e.to_string()))?;
        let (status, reason) = merged.verdict(false);
        Ok(MergedRun {
            result,
            status,
            reason,
        })
    }
}

/// The name an inline spec of `kind` is stored under when the run names none
/// ([`Kind::stored_name`], else `inline-KIND`).
pub fn stored_name(kind: RunKind, spec: &Value) -> String {
    struct NameOf<'a>(&'a Value);
    impl KindVisitor for NameOf<'_> {
        type Output = Option<String>;
        fn visit<K: Kind>(self) -> Option<String> {
            K::stored_name(&K::spec(self.0).ok()?)
        }
    }
    visit(kind, NameOf(spec)).unwrap_or_else(|| format!("inline-{kind}"))
}

/// The shares' results of a split run of `kind` with this spec, merged into the run's
/// ([`Kind::merge_shares`]).
pub fn merge_shares(
    kind: RunKind,
    spec: &Value,
    results: &[Value],
) -> Result<MergedRun, MergeError> {
    struct MergeOf<'a>(&'a Value, &'a [Value]);
    impl KindVisitor for MergeOf<'_> {
        type Output = Result<MergedRun, MergeError>;
        fn visit<K: Kind>(self) -> Self::Output {
            let (_, plan) = K::read(self.0).map_err(|e| MergeError::Mismatch(e.to_string()))?;
            K::merge_shares(&plan, self.1)
        }
    }
    visit(kind, MergeOf(spec, results))
}

/// Whether a run of `kind` with this spec may be split over `agents` agents: what the
/// controller asks at POST for `"agents": N` (a refusal names `agents` or the spec's
/// field, e.g. `spec.connections` when there are fewer connections than agents).
pub fn check_split(kind: RunKind, spec: &Value, agents: u32) -> Result<(), SpecError> {
    struct SplitOf<'a>(&'a Value, u32);
    impl KindVisitor for SplitOf<'_> {
        type Output = Result<(), SpecError>;
        fn visit<K: Kind>(self) -> Self::Output {
            let (_, plan) = K::read(self.0)?;
            K::check_split(&plan, self.1)
        }
    }
    visit(kind, SplitOf(spec, agents))
}

/// The thresholds that stop a run of `kind` early ([`Kind::abort_thresholds`]): none
/// for a spec that does not read.
pub fn abort_thresholds(kind: RunKind, spec: &Value) -> Vec<Threshold> {
    struct AbortOf<'a>(&'a Value);
    impl KindVisitor for AbortOf<'_> {
        type Output = Vec<Threshold>;
        fn visit<K: Kind>(self) -> Self::Output {
            K::read(self.0).map_or_else(|_| Vec::new(), |(_, plan)| K::abort_thresholds(&plan))
        }
    }
    visit(kind, AbortOf(spec))
}

/// Whether a split run of `kind` has its seconds merged ([`Kind::merges_seconds`]).
pub fn merges_seconds(kind: RunKind) -> bool {
    struct MergesOf;
    impl KindVisitor for MergesOf {
        type Output = bool;
        fn visit<K: Kind>(self) -> bool {
            K::merges_seconds()
        }
    }
    visit(kind, MergesOf)
}

/// Whether a split run of `kind` has its steps judged ([`Kind::judges_steps`]).
pub fn judges_steps(kind: RunKind) -> bool {
    struct StepsOf;
    impl KindVisitor for StepsOf {
        type Output = bool;
        fn visit<K: Kind>(self) -> bool {
            K::judges_steps()
        }
    }
    visit(kind, StepsOf)
}

/// Whether a run of `kind` ending `error` has findings ([`Kind::finds_on_error`]).
pub fn finds_on_error(kind: RunKind) -> bool {
    struct ErrorFindingsOf;
    impl KindVisitor for ErrorFindingsOf {
        type Output = bool;
        fn visit<K: Kind>(self) -> bool {
            K::finds_on_error()
        }
    }
    visit(kind, ErrorFindingsOf)
}

/// What losing one share's agent does to a split run of `kind` ([`Kind::on_agent_lost`]):
/// `error` for a spec that does not read.
pub fn on_agent_lost(kind: RunKind, spec: &Value) -> AgentLoss {
    struct LossOf<'a>(&'a Value);
    impl KindVisitor for LossOf<'_> {
        type Output = AgentLoss;
        fn visit<K: Kind>(self) -> Self::Output {
            K::spec(self.0).map_or(AgentLoss::Error, |spec| K::on_agent_lost(&spec))
        }
    }
    visit(kind, LossOf(spec))
}

/// The findings of a finished run's result, as its kind derives them.
pub(crate) fn findings(facts: &RunFacts, found: &mut Vec<Found>) {
    struct FindingsOf<'a, 'b>(&'a RunFacts<'a>, &'b mut Vec<Found>);
    impl KindVisitor for FindingsOf<'_, '_> {
        type Output = ();
        fn visit<K: Kind>(self) {
            K::findings(self.0, self.1)
        }
    }
    visit(facts.kind, FindingsOf(facts, found))
}

/// Compares two results of one kind into `out`.
pub(crate) fn compare(kind: RunKind, before: Value, after: Value, out: &mut Comparison) {
    struct CompareOf<'a>(Value, Value, &'a mut Comparison);
    impl KindVisitor for CompareOf<'_> {
        type Output = ();
        fn visit<K: Kind>(self) {
            K::compare(self.0, self.1, self.2)
        }
    }
    visit(kind, CompareOf(before, after, out))
}

/// Generates, from the list of kinds below, the [`RunKind`] enum, its words, `ALL` and the
/// registry [`visit`]: one line per kind, so that no list can miss one.
macro_rules! kinds {
    ($($variant:ident = $word:literal => $kind:ty),* $(,)?) => {
        /// What a run does: every kind runs on agents (see `iohr_agent::execute`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
        // utoipa does not read the variants' `serde(rename = $word)` through the macro's
        // fragment, and every word is the variant in lower case (the words stay checked by
        // the controller's test that round-trips every schema enum through serde).
        #[cfg_attr(feature = "openapi", schema(rename_all = "lowercase"))]
        pub enum RunKind {
            $(#[serde(rename = $word)] $variant),*
        }

        impl RunKind {
            /// Every kind, in the registry's order.
            pub const ALL: [RunKind; [$(stringify!($variant)),*].len()] = [$(RunKind::$variant),*];

            /// The kind's word in the API, the store and the CLI (also its serde name).
            pub fn as_str(self) -> &'static str {
                match self {
                    $(RunKind::$variant => $word),*
                }
            }
        }

        /// The registry: the one place that maps each [`RunKind`] to its [`Kind`].
        pub fn visit<V: KindVisitor>(kind: RunKind, visitor: V) -> V::Output {
            match kind {
                $(RunKind::$variant => visitor.visit::<$kind>()),*
            }
        }

        // Each line's contract names its own kind, checked as the crate builds.
        $(const _: () = assert!(matches!(<$kind as Kind>::KIND, RunKind::$variant));)*
    };
}

// The kinds: one line each (the variant, its word, its contract in `kind/NAME.rs`).
kinds! {
    Checks = "checks" => checks::Checks,
    Load = "load" => load::Load,
    Scenario = "scenario" => scenario::Scenario,
    Faults = "faults" => faults::Faults,
    Capacity = "capacity" => capacity::Capacity,
    Replay = "replay" => replay::Replay,
}

impl RunKind {
    /// What this kind may do.
    pub fn traits(self) -> Traits {
        visit(self, TraitsOf)
    }

    /// Load, faults, capacity and replay runs would measure each other: at most one at a
    /// time per agent.
    pub fn is_exclusive(self) -> bool {
        self.traits().exclusive
    }
}

impl fmt::Display for RunKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RunKind {
    type Err = UnknownWord;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        RunKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| UnknownWord {
                what: "kind",
                value: s.to_string(),
                expected: RunKind::ALL.map(|k| k.as_str()).join(", "),
            })
    }
}

#[cfg(test)]
mod tests;
