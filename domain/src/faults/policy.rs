//! The agent's policy: what `faults` runs may touch on its host. It is the agent's
//! configuration (a JSON file), never the run's: a run asking for anything outside it is
//! refused, with the reason, before anything is applied.
//!
//! ```json
//! {"target_ports": [8080],
//!  "processes": [{"name": "worker", "restart": "systemctl restart worker"}],
//!  "directories": ["/var/tmp/iohr-fill"],
//!  "max_cpu_workers": 2, "max_memory_mb": 256, "max_disk_mb": 512,
//!  "interfaces": ["lo"]}
//! ```
//!
//! Everything absent is refused. Under `iohr-agent exec` the policy is
//! [`Policy::for_exec`]: the run's own target port (faults through the proxy) and nothing
//! else, unless a policy file grants more ([`Policy::grant`]).

use std::path::{Component, Path};

use serde::{Deserialize, Serialize};

use crate::request::{SpecError, parse_spec, spec_error};

use super::experiment::Experiment;
use super::fault::{Fault, ProcessAction};

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// Ports whose target may be put behind the fault proxy (network and HTTP faults).
    #[serde(default)]
    pub target_ports: Vec<u16>,
    #[serde(default)]
    pub processes: Vec<ProcessRule>,
    /// Absolute directories a disk fill may write in (and below).
    #[serde(default)]
    pub directories: Vec<String>,
    #[serde(default)]
    pub max_cpu_workers: u32,
    #[serde(default)]
    pub max_memory_mb: u64,
    #[serde(default)]
    pub max_disk_mb: u64,
    /// Interfaces netem may shape.
    #[serde(default)]
    pub interfaces: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessRule {
    /// The process name (`comm`).
    pub name: String,
    /// A shell command that starts the process again: the undo of terminate and kill,
    /// and the second half of restart.
    #[serde(default)]
    pub restart: Option<String>,
    /// Only processes owned by this user id (the owner of `/proc/PID`); any owner when
    /// absent, so a run cannot reach another user's process of the same name when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    /// Only processes owned by this user (a user name): the agent resolves it to its uid
    /// when it reads the policy, and refuses the policy when no such user exists. Give
    /// `user` or `uid`, not both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

/// Which fault the policy refused, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct PolicyRefusal {
    pub field: String,
    pub reason: String,
}

impl Policy {
    /// `iohr-agent exec`'s default: the run's own target port, nothing else.
    pub fn for_exec(target_port: u16) -> Policy {
        Policy {
            target_ports: vec![target_port],
            ..Policy::default()
        }
    }

    /// Reads a policy file's text, refusing unknown fields and relative directories.
    pub fn parse(text: &str) -> Result<Policy, SpecError> {
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| spec_error("policy", e.to_string()))?;
        let policy: Policy = parse_spec("policy", &value)?;
        for (i, d) in policy.directories.iter().enumerate() {
            if !is_plain_absolute(Path::new(d)) {
                return Err(spec_error(
                    format!("policy.directories[{i}]"),
                    "must be an absolute path without '..'",
                ));
            }
        }
        for (i, p) in policy.processes.iter().enumerate() {
            if p.name.is_empty() {
                return Err(spec_error(
                    format!("policy.processes[{i}].name"),
                    "must name a process",
                ));
            }
            match (&p.user, p.uid) {
                (Some(user), _) if user.is_empty() => {
                    return Err(spec_error(
                        format!("policy.processes[{i}].user"),
                        "must name a user",
                    ));
                }
                (Some(_), Some(_)) => {
                    return Err(spec_error(
                        format!("policy.processes[{i}].user"),
                        "give user or uid, not both",
                    ));
                }
                _ => {}
            }
        }
        Ok(policy)
    }

    /// This policy with everything `more` allows as well (the larger of each limit).
    pub fn grant(mut self, more: Policy) -> Policy {
        for port in more.target_ports {
            if !self.target_ports.contains(&port) {
                self.target_ports.push(port);
            }
        }
        for rule in more.processes {
            if !self.processes.iter().any(|p| p.name == rule.name) {
                self.processes.push(rule);
            }
        }
        for d in more.directories {
            if !self.directories.contains(&d) {
                self.directories.push(d);
            }
        }
        for i in more.interfaces {
            if !self.interfaces.contains(&i) {
                self.interfaces.push(i);
            }
        }
        self.max_cpu_workers = self.max_cpu_workers.max(more.max_cpu_workers);
        self.max_memory_mb = self.max_memory_mb.max(more.max_memory_mb);
        self.max_disk_mb = self.max_disk_mb.max(more.max_disk_mb);
        self
    }

    /// The user id a process fault on `process` is held to, if its rule names one (a
    /// `user` counts once the agent has resolved it into `uid`).
    pub fn process_owner(&self, process: &str) -> Option<u32> {
        self.processes
            .iter()
            .find(|p| p.name == process)
            .and_then(|p| p.uid)
    }

    /// The restart command the policy gives a process, if any.
    pub fn restart_command(&self, process: &str) -> Option<&str> {
        self.processes
            .iter()
            .find(|p| p.name == process)
            .and_then(|p| p.restart.as_deref())
    }

    /// Whether the policy allows `fault` for a run whose target listens on
    /// `run_target_port`; the reason when it does not.
    pub fn check(&self, fault: &Fault, run_target_port: u16) -> Result<(), String> {
        match fault {
            Fault::Network(_) | Fault::Http(_) => {
                if self.target_ports.contains(&run_target_port) {
                    Ok(())
                } else {
                    Err(format!(
                        "the run's target port {run_target_port} is not in the policy's target_ports {:?}",
                        self.target_ports
                    ))
                }
            }
            Fault::Process(p) => {
                let Some(rule) = self.processes.iter().find(|r| r.name == p.name) else {
                    return Err(format!(
                        "process {:?} is not in the policy's processes",
                        p.name
                    ));
                };
                if p.action == ProcessAction::Restart && rule.restart.is_none() {
                    return Err(format!(
                        "restarting {:?} needs a restart command in the policy",
                        p.name
                    ));
                }
                Ok(())
            }
            Fault::CpuHog(_) if self.max_cpu_workers == 0 => Err(
                "the policy allows no CPU hog (max_cpu_workers is 0; grant one with --policy FILE)"
                    .to_string(),
            ),
            Fault::CpuHog(h) if h.workers > self.max_cpu_workers => Err(format!(
                "a CPU hog of {} workers is more than the policy's max_cpu_workers {}",
                h.workers, self.max_cpu_workers
            )),
            Fault::CpuHog(_) => Ok(()),
            Fault::MemoryHog(_) if self.max_memory_mb == 0 => Err(
                "the policy allows no memory hog (max_memory_mb is 0; grant one with --policy FILE)"
                    .to_string(),
            ),
            Fault::MemoryHog(h) if h.size_mb > self.max_memory_mb => Err(format!(
                "{} MB of memory is more than the policy's max_memory_mb {}",
                h.size_mb, self.max_memory_mb
            )),
            Fault::MemoryHog(_) => Ok(()),
            Fault::DiskFill(d) => {
                let dir = Path::new(&d.directory);
                if !is_plain_absolute(dir) {
                    return Err(format!(
                        "directory {:?} must be an absolute path without '..'",
                        d.directory
                    ));
                }
                if !self
                    .directories
                    .iter()
                    .any(|allowed| dir.starts_with(Path::new(allowed)))
                {
                    return Err(format!(
                        "directory {:?} is not inside the policy's directories",
                        d.directory
                    ));
                }
                if d.size_mb > self.max_disk_mb {
                    return Err(format!(
                        "{} MB of disk is more than the policy's max_disk_mb {}",
                        d.size_mb, self.max_disk_mb
                    ));
                }
                Ok(())
            }
            Fault::Netem(n) => {
                let interface = n.interface.as_deref().unwrap_or("lo");
                if self.interfaces.iter().any(|i| i == interface) {
                    Ok(())
                } else {
                    Err(format!(
                        "interface {interface:?} is not in the policy's interfaces"
                    ))
                }
            }
        }
    }

    /// Checks every fault of the experiment; the first refusal names its action.
    pub fn check_experiment(
        &self,
        experiment: &Experiment,
        run_target_port: u16,
    ) -> Result<(), PolicyRefusal> {
        for (field, action) in experiment.faults() {
            self.check(&action.fault, run_target_port)
                .map_err(|reason| PolicyRefusal {
                    field: format!("{field}.provider"),
                    reason,
                })?;
        }
        Ok(())
    }
}

/// Absolute, and no `..` or `.` that could lead out of an allowed directory by text.
fn is_plain_absolute(path: &Path) -> bool {
    path.is_absolute()
        && path
            .components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::fault::{
        CpuHog, DiskFill, HttpEffect, HttpFault, MemoryHog, NetemFault, ProcessFault,
    };

    fn file() -> Policy {
        Policy::parse(
            r#"{"target_ports": [8080],
                "processes": [{"name": "worker", "restart": "worker --daemon"}, {"name": "cache"}],
                "directories": ["/var/tmp/fill"],
                "max_cpu_workers": 2, "max_memory_mb": 256, "max_disk_mb": 100,
                "interfaces": ["lo"]}"#,
        )
        .unwrap()
    }

    fn process(name: &str, action: ProcessAction) -> Fault {
        Fault::Process(ProcessFault {
            action,
            name: name.into(),
            pid: None,
        })
    }

    fn disk(dir: &str, size_mb: u64) -> Fault {
        Fault::DiskFill(DiskFill {
            directory: dir.into(),
            size_mb,
        })
    }

    #[test]
    fn exec_allows_the_runs_own_target_port_and_nothing_else() {
        let p = Policy::for_exec(3000);
        let http = Fault::Http(HttpFault {
            effect: HttpEffect::Abort {},
            path: None,
            rate: 1.0,
        });
        assert!(p.check(&http, 3000).is_ok());
        assert!(p.check(&http, 3001).unwrap_err().contains("3001"));
        assert!(
            p.check(&process("worker", ProcessAction::Pause), 3000)
                .is_err()
        );
        let hog = Fault::CpuHog(CpuHog {
            workers: 1,
            load_percent: 100,
        });
        assert!(
            p.check(&hog, 3000)
                .unwrap_err()
                .contains("allows no CPU hog (max_cpu_workers is 0")
        );
        // A file grants more.
        let p = p.grant(file());
        assert!(p.check(&hog, 3000).is_ok());
        assert!(p.check(&http, 3000).is_ok() && p.check(&http, 8080).is_ok());
    }

    #[test]
    fn each_kind_of_fault_is_held_to_its_limit() {
        let p = file();
        assert!(
            p.check(&process("worker", ProcessAction::Restart), 1)
                .is_ok()
        );
        assert!(p.check(&process("cache", ProcessAction::Pause), 1).is_ok());
        assert!(
            p.check(&process("cache", ProcessAction::Restart), 1)
                .unwrap_err()
                .contains("restart command")
        );
        assert!(p.check(&process("sshd", ProcessAction::Kill), 1).is_err());
        assert!(p.check(&disk("/var/tmp/fill", 100), 1).is_ok());
        assert!(p.check(&disk("/var/tmp/fill/sub", 1), 1).is_ok());
        assert!(p.check(&disk("/var/tmp/fill", 101), 1).is_err());
        assert!(p.check(&disk("/var/tmp/fill/../../etc", 1), 1).is_err());
        assert!(p.check(&disk("/var/tmp/filler", 1), 1).is_err());
        assert!(p.check(&disk("var/tmp/fill", 1), 1).is_err());
        let mem = |size_mb| Fault::MemoryHog(MemoryHog { size_mb });
        assert!(p.check(&mem(256), 1).is_ok());
        assert!(p.check(&mem(257), 1).is_err());
        let netem = |i: Option<&str>| {
            Fault::Netem(NetemFault {
                delay_ms: 10,
                jitter_ms: 0,
                loss_percent: 0.0,
                interface: i.map(str::to_string),
            })
        };
        assert!(p.check(&netem(None), 1).is_ok());
        assert!(p.check(&netem(Some("eth0")), 1).is_err());
        assert_eq!(p.restart_command("worker"), Some("worker --daemon"));
        assert_eq!(p.restart_command("cache"), None);
    }

    #[test]
    fn the_whole_experiment_is_checked_and_the_refusal_names_the_action() {
        let e = Experiment::from_json(&serde_json::json!({
            "title": "t", "description": "d",
            "method": [
                {"type": "action", "name": "slow", "provider": {"type": "iohr", "fault": "network", "toxic": {"type": "latency", "latency_ms": 5}}},
                {"type": "action", "name": "hog", "provider": {"type": "iohr", "fault": "cpu_hog", "workers": 1}}
            ]
        }))
        .unwrap();
        let refusal = Policy::for_exec(80).check_experiment(&e, 80).unwrap_err();
        assert_eq!(refusal.field, "method[1].provider");
        assert!(
            file()
                .grant(Policy::for_exec(80))
                .check_experiment(&e, 80)
                .is_ok()
        );
    }

    #[test]
    fn a_policy_file_is_read_strictly() {
        assert!(Policy::parse(r#"{"target_port": [1]}"#).is_err());
        assert_eq!(
            Policy::parse(r#"{"directories": ["tmp"]}"#)
                .unwrap_err()
                .field,
            "policy.directories[0]"
        );
        assert_eq!(Policy::parse("{}").unwrap(), Policy::default());
    }

    #[test]
    fn a_process_rule_names_its_owner_by_user_or_uid_not_both() {
        let p = Policy::parse(r#"{"processes": [{"name": "w", "user": "svc"}]}"#).unwrap();
        assert_eq!(p.processes[0].user.as_deref(), Some("svc"));
        // Not yet resolved: the agent sets uid when it reads the policy.
        assert_eq!(p.process_owner("w"), None);
        for (text, reason) in [
            (
                r#"{"processes": [{"name": "w", "user": "svc", "uid": 7}]}"#,
                "not both",
            ),
            (
                r#"{"processes": [{"name": "w", "user": ""}]}"#,
                "must name a user",
            ),
        ] {
            let error = Policy::parse(text).unwrap_err();
            assert_eq!(error.field, "policy.processes[0].user", "{text}");
            assert!(error.to_string().contains(reason), "{error}");
        }
    }
}
