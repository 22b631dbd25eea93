//! The `faults` kind: an experiment's lifecycle (see `faults::lifecycle`) against the
//! agent's real effects: the fault proxy in front of the run's target, process and host
//! faults, and probes sent through the proxy so they see the faults.
//!
//! The agent's [`FaultsConfig`] holds its policy and its ledger. A starting agent undoes
//! what its ledger still holds ([`recover_left_overs`]) before it takes work.

use std::net::SocketAddr;
use std::path::PathBuf;

use super::registry::{Kind, RunOf, read};
use super::{EnvVars, Outcome, RunContext, to_json};
use crate::egress::Egress;
use crate::faults::ledger::{Ledger, LedgerEntry};
use crate::faults::lifecycle::{
    Deadline, Driver, ProbeError, Retry, Run, SystemClock, recover, timeline_frames,
};
use crate::faults::probe::Prober;
use crate::faults::proxy::FaultProxy;
use crate::faults::{FaultError, Undo, host};
use iohr_domain::RunStatus;
use iohr_domain::faults::experiment::Provider;
use iohr_domain::faults::journal::Journal;
use iohr_domain::faults::{Experiment, Fault, JournalStatus, Policy, ProbeOutput};
use serde_json::Value;

/// What the agent's configuration gives every faults run.
#[derive(Debug)]
pub struct FaultsConfig {
    /// What the agent's policy file allows (empty without one: every fault is refused).
    pub policy: Policy,
    /// `iohr-agent exec`: the run's own target port is allowed as well.
    pub allow_run_target: bool,
    pub ledger: Ledger,
    /// The program hogs run as (the agent binary itself).
    pub hog_program: PathBuf,
    /// What the ledger held at start and was undone (or not): reported in every hello.
    pub recovered: Vec<Recovered>,
}

/// A fault a previous agent process left applied, found in the ledger at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovered {
    pub run_id: String,
    pub ledger_id: String,
    pub fault: String,
    /// Why it could not be undone; `None` when it was.
    pub error: Option<String>,
}

impl FaultsConfig {
    /// The policy one run is checked against.
    fn policy_for(&self, target_port: u16) -> Policy {
        if self.allow_run_target {
            Policy::for_exec(target_port).grant(self.policy.clone())
        } else {
            self.policy.clone()
        }
    }
}

/// A faults run as the agent received it.
#[derive(Debug, Clone)]
pub struct FaultsPlan {
    /// The run's id, for its ledger entries.
    pub run_id: String,
    pub experiment: Experiment,
    /// The person who confirmed a production run.
    pub confirmed_by: Option<String>,
    /// List what would be applied and how it would be undone; apply nothing.
    pub dry_run: bool,
}

pub struct Faults;

impl Kind for Faults {
    type Contract = iohr_domain::kind::faults::Faults;
    type Plan = Box<FaultsPlan>;

    const NEEDS_FAULTS: bool = true;

    fn from_contract(experiment: Experiment) -> Box<FaultsPlan> {
        Box::new(FaultsPlan {
            run_id: String::new(),
            experiment,
            confirmed_by: None,
            dry_run: false,
        })
    }

    fn bind(plan: &mut Box<FaultsPlan>, run: &RunOf<'_>) -> Result<(), String> {
        if let Some(target) = run.check_target {
            // The API's rule: a probe's url must name the run's own target.
            plan.experiment
                .check_target(target)
                .map_err(|e| e.to_string())?;
        }
        plan.run_id = run.run_id.to_string();
        plan.confirmed_by = run.confirmed_by.map(str::to_string);
        plan.dry_run = run.dry_run;
        Ok(())
    }

    async fn run(plan: Box<FaultsPlan>, ctx: &RunContext) -> Outcome {
        run(*plan, ctx).await
    }

    fn summary(result: &Value) -> Option<Vec<String>> {
        read::<Journal>(result).map(|j| j.summary())
    }
}

/// The agent's effects: the run's fault proxy (none while recovering: a proxy died with
/// the agent that ran it), host faults and probes.
struct AgentDriver<'a> {
    proxy: Option<&'a FaultProxy>,
    prober: Option<Prober>,
    policy: &'a Policy,
    hog_program: &'a std::path::Path,
    /// Where probes read `${env:NAME}` values.
    env: EnvVars,
}

impl Driver for AgentDriver<'_> {
    async fn plan(&self, fault: &Fault) -> Result<Undo, FaultError> {
        match fault {
            Fault::Network(_) | Fault::Http(_) => match self.proxy {
                // The proxy numbers the fault when it is added; apply gives the real id.
                Some(proxy) => Ok(Undo::ProxyFault {
                    proxy: proxy.local_addr().to_string(),
                    id: 0,
                }),
                None => Err(FaultError::Failed("no fault proxy for this run".into())),
            },
            other => host::plan(other, self.policy),
        }
    }

    async fn apply(&self, fault: &Fault, deadline: Deadline) -> Result<Undo, FaultError> {
        match fault {
            Fault::Network(_) | Fault::Http(_) => {
                let proxy = self
                    .proxy
                    .ok_or_else(|| FaultError::Failed("no fault proxy for this run".into()))?;
                let id = proxy.add(fault)?;
                Ok(proxy.undo(id))
            }
            other => host::apply(other, self.policy, self.hog_program, deadline.at_ms).await,
        }
    }

    async fn undo(&self, undo: &Undo) -> Result<(), FaultError> {
        match undo {
            Undo::ProxyFault { proxy, id } => {
                if let Some(ours) = self.proxy
                    && ours.local_addr().to_string() == *proxy
                {
                    ours.remove(*id);
                }
                // Another proxy lived in an agent process that is gone, and its faults
                // with it.
                Ok(())
            }
            other => host::undo(other).await,
        }
    }

    async fn probe(&self, provider: &Provider) -> Result<ProbeOutput, ProbeError> {
        match &self.prober {
            Some(prober) => prober.probe(provider, &self.env).await,
            None => Err(ProbeError("no probes while recovering".into())),
        }
    }
}

/// Undoes every fault the ledger still holds open (a crashed agent's), newest first.
/// Returns each one with why it could not be undone, if it could not.
pub async fn recover_left_overs(
    config: &FaultsConfig,
) -> Result<Vec<Recovered>, crate::faults::ledger::LedgerError> {
    let open = config.ledger.open_entries()?;
    if open.is_empty() {
        return Ok(Vec::new());
    }
    tracing::warn!(
        open = open.len(),
        "the fault ledger holds faults a previous agent left; undoing them"
    );
    let driver = AgentDriver {
        proxy: None,
        prober: None,
        policy: &config.policy,
        hog_program: &config.hog_program,
        env: EnvVars::process(),
    };
    let failed: Vec<(LedgerEntry, String)> =
        recover(&driver, &SystemClock, &config.ledger, Retry::default()).await?;
    Ok(open
        .into_iter()
        .map(|entry| Recovered {
            error: failed
                .iter()
                .find(|(f, _)| f.id == entry.id)
                .map(|(_, e)| e.clone()),
            run_id: entry.run_id,
            ledger_id: entry.id,
            fault: entry.fault.name().to_string(),
        })
        .collect())
}

/// The target's socket address (resolved, and allowed by the agent's target policy: the
/// proxy dials this address and no other, so it cannot be rebound later) and port.
async fn upstream_of(target: &str, egress: &Egress) -> Result<SocketAddr, String> {
    let url: hyper::Uri = target
        .parse()
        .map_err(|e| format!("target {target:?}: {e}"))?;
    if url.scheme_str() != Some("http") {
        return Err(
            "faults runs take http:// targets (the fault proxy speaks TCP in front of them)".into(),
        );
    }
    let host = url.host().ok_or("the target has no host")?;
    let port = url.port_u16().unwrap_or(80);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    egress
        .resolve(host, port)
        .await
        .map_err(|e| e.to_string())?
        .first()
        .copied()
        .ok_or_else(|| format!("{host} resolves to no address"))
}

/// Runs an experiment against the context's target and returns its journal as the run's
/// result. An agent without a faults configuration runs none.
pub async fn run(plan: FaultsPlan, ctx: &RunContext) -> Outcome {
    let Some(config) = ctx.faults.as_deref() else {
        return Outcome::error("this agent has no faults configuration".into(), 0);
    };
    let target = ctx.target.as_str();
    let upstream = match upstream_of(target, &ctx.options.egress).await {
        Ok(addr) => addr,
        Err(e) => return Outcome::error(e, 0),
    };
    let listen = SocketAddr::new(
        if upstream.is_ipv6() {
            std::net::Ipv6Addr::LOCALHOST.into()
        } else {
            std::net::Ipv4Addr::LOCALHOST.into()
        },
        0,
    );
    let proxy = match FaultProxy::start(listen, upstream, rand::random()).await {
        Ok(proxy) => proxy,
        Err(e) => return Outcome::error(format!("starting the fault proxy: {e}"), 0),
    };
    let send_to = format!("http://{}", proxy.local_addr());
    let policy = config.policy_for(upstream.port());
    let prober = Prober::new(&send_to, target).traced(&plan.run_id, plan.experiment.trace_sample);
    let driver = AgentDriver {
        proxy: Some(&proxy),
        prober: Some(prober.clone()),
        policy: &policy,
        hog_program: &config.hog_program,
        env: ctx.env.clone(),
    };
    let mut journal = Run {
        run_id: plan.run_id.clone(),
        driver: &driver,
        clock: &SystemClock,
        ledger: &config.ledger,
        policy: &policy,
        target_port: upstream.port(),
        target: target.to_string(),
        timeline: timeline_frames(ctx.frames.clone()),
        cancel: ctx.cancel.clone(),
        dry_run: plan.dry_run,
        retry: Retry::default(),
        env: ctx.env.clone(),
    }
    .execute(&plan.experiment)
    .await;
    journal.confirmed_by = plan.confirmed_by;
    proxy.shutdown().await;
    outcome_of(journal, &send_to, prober.sent())
}

/// The run's status from its journal; its units are the requests its probes sent.
fn outcome_of(journal: Journal, proxy: &str, sent: u64) -> Outcome {
    let (status, reason) = match journal.status {
        JournalStatus::Completed => (RunStatus::Passed, None),
        JournalStatus::Failed if journal.deviated => (
            RunStatus::Failed,
            Some("deviated: the steady state did not hold after the method".to_string()),
        ),
        JournalStatus::Failed => (
            RunStatus::Failed,
            Some("the steady state did not hold before the method; nothing was injected".into()),
        ),
        JournalStatus::Aborted => (RunStatus::Error, None),
        JournalStatus::Interrupted => (RunStatus::Cancelled, None),
        JournalStatus::RollbackFailed => {
            tracing::error!(
                open = journal.open_faults().count(),
                "ALERT: a fault could not be undone; the ledger keeps it and the agent retries it at its next start"
            );
            (RunStatus::Error, None)
        }
        JournalStatus::Refused => (RunStatus::Refused, None),
    };
    // The journal's own sentence when it has one, so the run and its journal say the same.
    let reason = match (&journal.status, journal.reason.clone(), reason) {
        (JournalStatus::RollbackFailed, Some(r), _) => Some(format!("rollback failed: {r}")),
        (JournalStatus::RollbackFailed, None, _) => Some("rollback failed".into()),
        (_, Some(r), _) => Some(r),
        (_, None, ours) => ours,
    };
    let mut result = to_json(&journal);
    if let Some(map) = result.as_object_mut() {
        map.insert("fault_proxy".into(), proxy.into());
    }
    Outcome {
        status,
        reason,
        result,
        units_spent: sent,
    }
}
