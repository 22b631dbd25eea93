//! What every executor is given ([`RunContext`]) and what it returns ([`Outcome`]).
//!
//! A leaf of the crate (iohr-domain, tokio and std only, and the leaves [`crate::egress`]
//! and [`crate::secrets`]), like [`crate::frames`] and [`crate::stress::meter`]: the load
//! engine runs on it without knowing the kinds, the faults or the lease table.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use iohr_domain::RunStatus;
use iohr_domain::request::Reference;
use tokio_util::sync::CancellationToken;

use crate::egress::Egress;
use crate::frames::FrameSender;
use crate::secrets::{EnvRefusal, SecretGrant};
use crate::stress::Meter;
use crate::verdicts::StepVerdicts;

/// How a run ended on the agent.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub status: RunStatus,
    pub reason: Option<String>,
    pub result: serde_json::Value,
    pub units_spent: u64,
}

impl Outcome {
    /// An `error` with no result: the run could not measure anything it can report.
    pub fn error(reason: String, units_spent: u64) -> Outcome {
        Outcome {
            status: RunStatus::Error,
            reason: Some(reason),
            result: serde_json::Value::Null,
            units_spent,
        }
    }
}

/// What the agent's configuration adds to every run.
#[derive(Debug, Clone, Default)]
pub struct TargetOptions {
    /// PEM roots trusted for https targets besides the system's.
    pub extra_ca: Option<PathBuf>,
    /// Which addresses the run may connect to ([`crate::egress`]); by default any.
    pub egress: Arc<Egress>,
}

/// Where `${env:NAME}` values are read: the agent's own environment, or (tests) a lookup
/// of their own, so that they need not mutate the process environment (unsafe in edition
/// 2024); and which names a run may read at all ([`SecretGrant`]). `${secret:NAME}` values
/// are the account secrets the run's lease carried, on any agent.
#[derive(Clone)]
pub struct EnvVars {
    lookup: Arc<Lookup>,
    grant: Arc<SecretGrant>,
    account: Arc<BTreeMap<String, String>>,
}

type Lookup = dyn Fn(&str) -> Option<String> + Send + Sync;

impl EnvVars {
    /// The process environment, every name readable (`exec`; an agent's leased runs are
    /// given [`EnvVars::granting`] its operator's grant).
    pub fn process() -> EnvVars {
        EnvVars::from_fn(|name| std::env::var(name).ok())
    }

    pub fn from_fn(lookup: impl Fn(&str) -> Option<String> + Send + Sync + 'static) -> EnvVars {
        EnvVars {
            lookup: Arc::new(lookup),
            grant: Arc::new(SecretGrant::All),
            account: Arc::default(),
        }
    }

    /// The same, with the account secrets a lease carried.
    pub fn with_account_secrets(self, secrets: BTreeMap<String, String>) -> EnvVars {
        EnvVars {
            account: Arc::new(secrets),
            ..self
        }
    }

    /// The value a header's reference names, or why a run gets none.
    pub fn resolve(&self, reference: Reference<'_>) -> Result<String, EnvRefusal> {
        match reference {
            Reference::Env(name) => self.get(name),
            Reference::Secret(name) => self
                .account
                .get(name)
                .cloned()
                .ok_or_else(|| EnvRefusal::UnknownSecret(name.to_string())),
        }
    }

    /// The same lookup, reading only the names `grant` allows.
    pub fn granting(self, grant: SecretGrant) -> EnvVars {
        EnvVars {
            grant: Arc::new(grant),
            ..self
        }
    }

    /// The value of `name`, or why a run gets none: not granted, or not set. A refused
    /// name is never looked up.
    pub fn get(&self, name: &str) -> Result<String, EnvRefusal> {
        self.grant.check(name)?;
        (self.lookup)(name).ok_or_else(|| EnvRefusal::NotSet(name.to_string()))
    }
}

impl Default for EnvVars {
    fn default() -> EnvVars {
        EnvVars::process()
    }
}

impl fmt::Debug for EnvVars {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("EnvVars")
    }
}

/// Everything a run is given besides its plan. `F` is the faults configuration, a type of
/// the agent's that this module (and the load engine) never reads; `None` where the agent
/// has none.
pub struct RunContext<F = ()> {
    /// The run's id: its requests' trace context names it ([`iohr_domain::trace`]).
    pub run_id: String,
    /// The run's target, as the spec's paths are sent to it.
    pub target: String,
    pub options: TargetOptions,
    pub frames: FrameSender,
    pub cancel: CancellationToken,
    pub env: EnvVars,
    pub faults: Option<Arc<F>>,
    /// The run's stress meter ([`crate::stress`]), which the load engine tells its
    /// measure and late sends; `None` in a part of a run (a capacity step, a fault's load
    /// probe), whose measure is not the run's.
    pub stress: Option<Meter>,
    /// Where a share of a split sweep gets the controller's verdict on each step
    /// ([`crate::verdicts`]); `None` without a controller (`exec`) and in a part of a run.
    pub verdicts: Option<StepVerdicts>,
}

impl<F> Clone for RunContext<F> {
    fn clone(&self) -> RunContext<F> {
        RunContext {
            run_id: self.run_id.clone(),
            target: self.target.clone(),
            options: self.options.clone(),
            frames: self.frames.clone(),
            cancel: self.cancel.clone(),
            env: self.env.clone(),
            faults: self.faults.clone(),
            stress: self.stress.clone(),
            verdicts: self.verdicts.clone(),
        }
    }
}

impl<F> fmt::Debug for RunContext<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunContext")
            .field("run_id", &self.run_id)
            .field("target", &self.target)
            .field("options", &self.options)
            .field("faults", &self.faults.is_some())
            .finish_non_exhaustive()
    }
}

impl<F> RunContext<F> {
    /// A run against `target` with the default options, a cancel token of its own, the
    /// process environment and no faults configuration.
    pub fn new(target: impl Into<String>, frames: FrameSender) -> RunContext<F> {
        RunContext {
            run_id: String::new(),
            target: target.into(),
            options: TargetOptions::default(),
            frames,
            cancel: CancellationToken::new(),
            env: EnvVars::process(),
            faults: None,
            stress: None,
            verdicts: None,
        }
    }

    pub fn with_run_id(mut self, run_id: impl Into<String>) -> RunContext<F> {
        self.run_id = run_id.into();
        self
    }

    pub fn with_options(mut self, options: TargetOptions) -> RunContext<F> {
        self.options = options;
        self
    }

    pub fn with_cancel(mut self, cancel: CancellationToken) -> RunContext<F> {
        self.cancel = cancel;
        self
    }

    pub fn with_env(mut self, env: EnvVars) -> RunContext<F> {
        self.env = env;
        self
    }

    pub fn with_stress(mut self, stress: Option<Meter>) -> RunContext<F> {
        self.stress = stress;
        self
    }

    pub fn with_verdicts(mut self, verdicts: Option<StepVerdicts>) -> RunContext<F> {
        self.verdicts = verdicts;
        self
    }

    pub fn with_faults(mut self, faults: Option<Arc<F>>) -> RunContext<F> {
        self.faults = faults;
        self
    }

    /// A part of this run (a capacity step): the same target, options and environment,
    /// its own frames and cancel token, no faults configuration and no stress meter.
    pub fn part<G>(&self, frames: FrameSender, cancel: CancellationToken) -> RunContext<G> {
        RunContext {
            run_id: self.run_id.clone(),
            target: self.target.clone(),
            options: self.options.clone(),
            frames,
            cancel,
            env: self.env.clone(),
            faults: None,
            stress: None,
            verdicts: None,
        }
    }

    /// The reference lookup as the closure header resolution takes.
    pub fn env_fn(&self) -> impl Fn(Reference<'_>) -> Result<String, EnvRefusal> + '_ {
        |reference| self.env.resolve(reference)
    }
}
