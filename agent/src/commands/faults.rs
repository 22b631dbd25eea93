//! Fault start-up (the policy read, the ledger opened, what a previous agent left
//! undone), and the commands of the fault machinery: `faults list|undo` of a state
//! directory, and the hidden `warden` and `hog` an agent starts itself.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use iohr_agent::faults::hog::HogCommand;
use iohr_agent::faults::ledger::Ledger;
use iohr_agent::faults::warden::admin::FaultsCommand;
use iohr_agent::faults::warden::watch::WardenArgs;
use iohr_agent::kinds::faults::{FaultsConfig, recover_left_overs};
use iohr_domain::faults::Policy;

use crate::cli::FaultArgs;

impl FaultArgs {
    /// Reads the policy, opens the ledger and undoes what a previous agent left open.
    pub async fn config(self, allow_run_target: bool) -> anyhow::Result<Arc<FaultsConfig>> {
        let policy = match &self.policy {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading the policy {}", path.display()))?;
                let mut policy =
                    Policy::parse(&text).with_context(|| format!("policy {}", path.display()))?;
                // Process rules' owners by name, once, as the host knows them now.
                iohr_agent::faults::process::resolve_users(&mut policy)
                    .with_context(|| format!("policy {}", path.display()))?;
                policy
            }
            None => Policy::default(),
        };
        let state_dir = match self.state_dir {
            Some(dir) => dir,
            None => default_state_dir()?,
        };
        // Before the ledger is made in it: private whatever the umask.
        let wider = iohr_agent::state_dir::ensure_private(&state_dir)
            .with_context(|| format!("making the state directory {}", state_dir.display()))?;
        if let Some(mode) = wider {
            tracing::warn!(
                dir = %state_dir.display(),
                mode = format!("{mode:o}"),
                "the agent's state directory is readable by others: chmod 700 it"
            );
        }
        let ledger_dir = state_dir.join("ledger");
        let hog_program = std::env::current_exe().context("finding the agent's own binary")?;
        let ledger = Ledger::open(&ledger_dir)
            .and_then(|ledger| ledger.with_wardens(&hog_program))
            .with_context(|| format!("opening the fault ledger in {}", ledger_dir.display()))?;
        let mut config = FaultsConfig {
            policy,
            allow_run_target,
            ledger,
            hog_program,
            recovered: Vec::new(),
        };
        config.recovered = recover_left_overs(&config)
            .await
            .context("reading the fault ledger")?;
        for r in &config.recovered {
            match &r.error {
                None => {
                    tracing::warn!(ledger_id = %r.ledger_id, run = %r.run_id, fault = %r.fault, "a fault left by a previous agent was undone")
                }
                Some(error) => {
                    tracing::error!(ledger_id = %r.ledger_id, run = %r.run_id, fault = %r.fault, %error, "ALERT: a fault left by a previous agent could not be undone")
                }
            }
        }
        Ok(Arc::new(config))
    }
}

pub fn default_state_dir() -> anyhow::Result<PathBuf> {
    if let Some(dir) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir).join("iohr-agent"));
    }
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .context("no --state-dir, XDG_STATE_HOME or HOME to keep the fault ledger in")?;
    Ok(PathBuf::from(home).join(".local/state/iohr-agent"))
}

/// `faults list|undo`: exits with the command's own status.
pub fn admin(command: FaultsCommand) -> anyhow::Result<()> {
    let code = iohr_agent::faults::warden::admin::run(command, default_state_dir().ok())?;
    std::process::exit(code)
}

/// The hidden `warden`, started by the agent itself.
pub fn warden(args: WardenArgs) -> anyhow::Result<()> {
    Ok(iohr_agent::faults::warden::watch::run(args)?)
}

/// The hidden `hog` child (CPU, memory or disk), started by the agent itself.
pub fn hog(hog: HogCommand) -> anyhow::Result<()> {
    Ok(iohr_agent::faults::hog::run_child(hog)?)
}
