//! What a kind is to the agent ([`Kind`]) and the `kinds!` macro that turns the list of
//! kinds in [`crate::kinds`] into the [`Plan`] an accepted lease holds, the kinds the
//! agent announces and every `match` over them (the compiler refuses a [`RunKind`](iohr_domain::RunKind)
//! missing from the list).

use std::future::Future;

use iohr_domain::kind::Kind as Contract;
use iohr_domain::load::Share;
use iohr_domain::target::TargetError;
use serde_json::Value;

use super::{Outcome, RunContext};
use crate::dry_run::Described;

/// What a kind of run is to the agent.
pub trait Kind {
    /// The kind's contract in the domain (`iohr_domain::kind`): its spec, plan, cost,
    /// findings and compare, which the controller reads too.
    type Contract: Contract;

    /// Its spec, parsed and checked, ready to run.
    type Plan: std::fmt::Debug + Clone + Send + 'static;

    /// `exec` opens the fault ledger (and holds its lock) only for a kind that needs it:
    /// other kinds run side by side freely.
    const NEEDS_FAULTS: bool = false;

    /// `exec --ops-file`: whether the kind takes an ops file's operations into its spec
    /// (scenario); `exec` refuses the flag for the others.
    const OPS_FILE: bool = false;

    /// `exec`: the target as this kind accepts it, checked before the spec is read (the
    /// API checks a lease's): the general rule, or the kind's own (scenario's base URL).
    fn exec_target(target: &str) -> Result<(), TargetError> {
        iohr_domain::target::validate_target(target)
    }

    /// The plan as the agent holds it, from the contract's.
    fn from_contract(plan: <Self::Contract as Contract>::Plan) -> Self::Plan;

    /// Reads and plans the spec by the kind's contract, as the controller checked it;
    /// the error is the reason an offer is refused.
    fn plan(spec: &Value) -> Result<Self::Plan, String> {
        <Self::Contract as Contract>::read(spec)
            .map(|(_, plan)| Self::from_contract(plan))
            .map_err(|e| e.to_string())
    }

    /// Binds the plan to the run it executes (its id, who confirmed it, a dry run).
    fn bind(_plan: &mut Self::Plan, _run: &RunOf<'_>) -> Result<(), String> {
        Ok(())
    }

    /// The plan as `share` of a run split over agents runs it: the contract's
    /// ([`Contract::share`]) for the kinds that split; the others refuse every share but
    /// the whole, as their contract does.
    fn share(plan: Self::Plan, share: Share) -> Result<Self::Plan, String> {
        iohr_domain::kind::one_agent(<Self::Contract as Contract>::KIND, share.count())
            .map(|()| plan)
            .map_err(|e| e.to_string())
    }

    /// Runs the plan to its outcome, sending frames as it goes.
    fn run(plan: Self::Plan, ctx: &RunContext) -> impl Future<Output = Outcome> + Send;

    /// `exec --dry-run`: the plan described, nothing sent; `None` for a kind whose dry
    /// run goes through its run (faults: its lifecycle checks the policy).
    fn dry_run(_plan: &Self::Plan, _ctx: &RunContext) -> Result<Option<Described>, String> {
        Ok(None)
    }

    /// The result for people (`exec` without `--json`), under the status line; `None`
    /// when the value is not this kind's result.
    fn summary(result: &Value) -> Option<Vec<String>>;

    /// A leased run's result as the controller will store it.
    fn stored(result: Value, _lease: &Leased<'_>) -> Value {
        result
    }
}

/// The run a plan is bound to.
#[derive(Debug, Clone, Copy)]
pub struct RunOf<'a> {
    pub run_id: &'a str,
    /// The person who confirmed a production run.
    pub confirmed_by: Option<&'a str>,
    /// `exec --dry-run`.
    pub dry_run: bool,
    /// `exec`: the target the spec's own URLs must name (the API checks a lease's).
    pub check_target: Option<&'a str>,
    /// The part of the run this agent runs (the lease's, `exec --share`): the whole
    /// unless the run is split over agents.
    pub share: Share,
}

/// What a lease says of its run besides the plan.
#[derive(Debug, Clone, Copy)]
pub struct Leased<'a> {
    pub target: &'a str,
    pub environment: &'a str,
    /// The stored scenario the spec is a version of.
    pub scenario_id: &'a str,
    pub scenario_version: &'a str,
}

/// A result read as its kind's, from the value in place (no copy of a long log).
pub fn read<'a, T: serde::Deserialize<'a>>(result: &'a Value) -> Option<T> {
    T::deserialize(result).ok()
}

/// Summary lines indented under the status line.
pub fn indented(lines: Vec<String>) -> Vec<String> {
    lines.iter().map(|l| format!("  {l}")).collect()
}

/// Generates, from the list of kinds, everything that names each of them.
macro_rules! kinds {
    ($($variant:ident => $kind:ty),* $(,)?) => {
        // Each line's contract is the domain's for that kind, checked as the crate builds.
        $(const _: () = assert!(matches!(
            <<$kind as $crate::kinds::registry::Kind>::Contract as ::iohr_domain::kind::Kind>::KIND,
            ::iohr_domain::RunKind::$variant
        ));)*

        /// The kinds this agent can execute, in the order its hello names them.
        pub const SUPPORTED_KINDS: &[::iohr_domain::RunKind] = &[$(::iohr_domain::RunKind::$variant),*];

        /// A spec parsed for its kind, ready to run.
        #[derive(Debug, Clone)]
        pub enum Plan {
            $($variant(<$kind as $crate::kinds::registry::Kind>::Plan)),*
        }

        impl Plan {
            /// Parses a spec of `kind`; the error is the reason the offer is refused.
            pub fn parse(kind: ::iohr_domain::RunKind, spec: &::serde_json::Value) -> Result<Plan, String> {
                match kind {
                    $(::iohr_domain::RunKind::$variant => <$kind as $crate::kinds::registry::Kind>::plan(spec).map(Plan::$variant)),*
                }
            }

            pub fn kind(&self) -> ::iohr_domain::RunKind {
                match self {
                    $(Plan::$variant(_) => ::iohr_domain::RunKind::$variant),*
                }
            }

            /// Binds the plan to its run: its share first (a kind that does not split
            /// refuses one), then what the kind binds.
            pub fn bind(self, run: &$crate::kinds::registry::RunOf<'_>) -> Result<Plan, String> {
                match self {
                    $(Plan::$variant(plan) => {
                        let mut plan = <$kind as $crate::kinds::registry::Kind>::share(plan, run.share)?;
                        <$kind as $crate::kinds::registry::Kind>::bind(&mut plan, run)?;
                        Ok(Plan::$variant(plan))
                    }),*
                }
            }

            pub async fn run(self, ctx: &$crate::kinds::RunContext) -> $crate::kinds::Outcome {
                match self {
                    $(Plan::$variant(plan) => <$kind as $crate::kinds::registry::Kind>::run(plan, ctx).await),*
                }
            }

            pub fn dry_run(&self, ctx: &$crate::kinds::RunContext) -> Result<Option<$crate::dry_run::Described>, String> {
                match self {
                    $(Plan::$variant(plan) => <$kind as $crate::kinds::registry::Kind>::dry_run(plan, ctx)),*
                }
            }
        }

        pub fn needs_faults(kind: ::iohr_domain::RunKind) -> bool {
            match kind {
                $(::iohr_domain::RunKind::$variant => <$kind as $crate::kinds::registry::Kind>::NEEDS_FAULTS),*
            }
        }

        pub fn takes_ops_file(kind: ::iohr_domain::RunKind) -> bool {
            match kind {
                $(::iohr_domain::RunKind::$variant => <$kind as $crate::kinds::registry::Kind>::OPS_FILE),*
            }
        }

        pub fn exec_target(kind: ::iohr_domain::RunKind, target: &str) -> Result<(), ::iohr_domain::target::TargetError> {
            match kind {
                $(::iohr_domain::RunKind::$variant => <$kind as $crate::kinds::registry::Kind>::exec_target(target)),*
            }
        }

        pub fn summary(kind: ::iohr_domain::RunKind, result: &::serde_json::Value) -> Option<Vec<String>> {
            match kind {
                $(::iohr_domain::RunKind::$variant => <$kind as $crate::kinds::registry::Kind>::summary(result)),*
            }
        }

        pub fn stored(kind: ::iohr_domain::RunKind, result: ::serde_json::Value, lease: &$crate::kinds::registry::Leased<'_>) -> ::serde_json::Value {
            match kind {
                $(::iohr_domain::RunKind::$variant => <$kind as $crate::kinds::registry::Kind>::stored(result, lease)),*
            }
        }
    };
}

pub(crate) use kinds;

// What `kinds!` generated in [`crate::kinds`], where the list is.
pub use super::{
    Plan, SUPPORTED_KINDS, exec_target, needs_faults, stored, summary, takes_ops_file,
};

#[cfg(test)]
mod tests {
    use iohr_domain::RunKind;
    use iohr_domain::load::Share;
    use serde_json::json;

    use crate::kinds::Plan;

    fn bound(kind: RunKind, spec: serde_json::Value, share: Share) -> Result<Plan, String> {
        let plan = Plan::parse(kind, &spec)?;
        plan.bind(&super::RunOf {
            run_id: "r1",
            confirmed_by: None,
            dry_run: false,
            check_target: None,
            share,
        })
    }

    /// What a lease's share does to each kind's plan: load, replay and capacity take it
    /// (their connections split), every other kind refuses a share but the whole.
    #[test]
    fn a_share_binds_to_the_kinds_that_split_and_is_refused_by_the_others() {
        let share = Share::new(1, 3).expect("share");
        let load = json!({"operations": [{"path": "/"}], "model": "closed", "connections": 7,
            "duration": "1s"});
        match bound(RunKind::Load, load.clone(), share) {
            Ok(Plan::Load(plan)) => assert_eq!((plan.connections, plan.share), (2, share)),
            other => panic!("{other:?}"),
        }
        let replay = json!({"requests": [{"offset_ms": 0, "method": "GET", "path": "/"}],
            "connections": 3});
        match bound(RunKind::Replay, replay, share) {
            Ok(Plan::Replay(plan)) => assert_eq!(plan.load.connections, 1),
            other => panic!("{other:?}"),
        }
        let capacity = json!({"operations": [{"path": "/"}], "rates": [10, 20],
            "step": "2s", "slo": {"p99": "100ms"}});
        match bound(RunKind::Capacity, capacity, share) {
            Ok(Plan::Capacity(plan)) => assert_eq!(plan.share_of(), share),
            other => panic!("{other:?}"),
        }
        let too_many = Share::new(7, 8).expect("share");
        let err = bound(RunKind::Load, load, too_many).expect_err("8 agents, 7 connections");
        assert!(err.contains("spec.connections"), "{err}");
        let checks = json!({"checks": [{"name": "home", "path": "/"}]});
        let err = bound(RunKind::Checks, checks.clone(), share).expect_err("checks");
        assert!(err.contains("runs on one agent"), "{err}");
        assert!(bound(RunKind::Checks, checks, Share::WHOLE).is_ok());
    }
}
