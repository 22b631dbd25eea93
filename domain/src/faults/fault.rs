//! Every fault an agent can apply, as a `faults` run's experiment names it.
//!
//! An experiment action carries one [`Fault`] in its provider (`{"type": "iohr", "fault":
//! "network", ...}`) and a duration: the fault's own deadline, which the agent enforces even
//! when nothing else happens. The agent's policy decides what a fault may touch
//! (see [`Fault::touches`]); the agent's fault modules apply and undo them.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::request::{SpecError, spec_error};

/// The largest share is 1.0: every connection or request.
const ALL: f64 = 1.0;

fn all() -> f64 {
    ALL
}

/// One fault, tagged by `fault`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "fault", rename_all = "snake_case")]
pub enum Fault {
    /// A network fault in the agent's fault proxy in front of the run's target port.
    Network(NetworkFault),
    /// An HTTP fault in the same proxy (HTTP/1.1 requests it can read).
    Http(HttpFault),
    /// A signal to (or a restart of) a process on the agent's host.
    Process(ProcessFault),
    /// Busy workers in child processes of the agent.
    CpuHog(CpuHog),
    /// Memory held by a child process of the agent.
    MemoryHog(MemoryHog),
    /// A file filling a directory the policy allows.
    DiskFill(DiskFill),
    /// tc netem delay and loss on an interface in a network namespace, where the kernel has it.
    Netem(NetemFault),
}

/// Toxiproxy's toxics, by the same names and meanings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Toxic {
    /// Every chunk is held `latency_ms` ± `jitter_ms` (uniform) before it is passed on.
    Latency {
        latency_ms: u64,
        #[serde(default)]
        jitter_ms: u64,
    },
    /// At most `rate_kbps` kilobytes per second pass.
    Bandwidth { rate_kbps: u64 },
    /// The close is held `delay_ms` after the peer closed.
    SlowClose { delay_ms: u64 },
    /// Nothing passes; the connection is closed after `timeout_ms` (0: held open until the
    /// fault ends).
    Timeout { timeout_ms: u64 },
    /// The connection is reset (TCP RST) after `timeout_ms`.
    ResetPeer {
        #[serde(default)]
        timeout_ms: u64,
    },
    /// Data is cut into slices of `average_size` ± `size_variation` bytes, `delay_us` apart.
    Slicer {
        average_size: u64,
        #[serde(default)]
        size_variation: u64,
        #[serde(default)]
        delay_us: u64,
    },
    /// The connection is closed once `bytes` have passed.
    LimitData { bytes: u64 },
    /// The proxy refuses new connections and closes the ones it holds.
    Down {},
}

/// Which way a toxic acts: `upstream` is client to target, `downstream` target to client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    Upstream,
    #[default]
    Downstream,
    Both,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkFault {
    pub toxic: Toxic,
    #[serde(default)]
    pub direction: Direction,
    /// The share of connections the toxic acts on (0 < toxicity <= 1).
    #[serde(default = "all")]
    pub toxicity: f64,
}

/// What an HTTP fault does to a request it hits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum HttpEffect {
    /// Answer with this status (and a short body) instead of forwarding.
    Status { status: u16 },
    /// Close the connection without an answer.
    Abort {},
    /// Forward after `delay_ms`.
    Delay { delay_ms: u64 },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpFault {
    pub effect: HttpEffect,
    /// Only requests whose path starts with this; every path when absent.
    #[serde(default)]
    pub path: Option<String>,
    /// The share of matching requests hit (0 < rate <= 1).
    #[serde(default = "all")]
    pub rate: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProcessAction {
    /// SIGSTOP now, SIGCONT as the undo.
    Pause,
    /// SIGTERM; the undo runs the policy's restart command when it has one.
    Terminate,
    /// SIGKILL; the undo as for terminate.
    Kill,
    /// SIGTERM, then the policy's restart command.
    Restart,
}

/// The process a fault acts on: by name (the policy must list it), or by pid, which the agent
/// pins with the process's start time so a reused pid is never hit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessFault {
    pub action: ProcessAction,
    /// The process name (`comm`), as the policy lists it.
    pub name: String,
    /// One process of that name; the only one by that name when absent.
    #[serde(default)]
    pub pid: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CpuHog {
    pub workers: u32,
    /// How busy each worker keeps its core, 1..=100.
    #[serde(default = "full_load")]
    pub load_percent: u8,
}

fn full_load() -> u8 {
    100
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryHog {
    pub size_mb: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiskFill {
    /// A directory the policy allows; the agent writes one file of its own in it.
    pub directory: String,
    pub size_mb: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetemFault {
    #[serde(default)]
    pub delay_ms: u64,
    #[serde(default)]
    pub jitter_ms: u64,
    #[serde(default)]
    pub loss_percent: f64,
    /// The interface in the agent's network namespace (`lo` when absent).
    #[serde(default)]
    pub interface: Option<String>,
}

/// What a fault touches on the agent's host, for the policy to allow or refuse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Touch {
    /// The fault proxy in front of the run's target port.
    TargetPort,
    Process(String),
    Directory(String),
    /// A hog: CPU workers or megabytes of memory or disk.
    CpuWorkers(u32),
    MemoryMb(u64),
    DiskMb(u64),
    Interface(String),
}

impl Fault {
    /// The name a journal and a ledger entry use for this fault.
    pub fn name(&self) -> &'static str {
        match self {
            Fault::Network(_) => "network",
            Fault::Http(_) => "http",
            Fault::Process(_) => "process",
            Fault::CpuHog(_) => "cpu_hog",
            Fault::MemoryHog(_) => "memory_hog",
            Fault::DiskFill(_) => "disk_fill",
            Fault::Netem(_) => "netem",
        }
    }

    /// What the fault touches.
    pub fn touches(&self) -> Touch {
        match self {
            Fault::Network(_) | Fault::Http(_) => Touch::TargetPort,
            Fault::Process(p) => Touch::Process(p.name.clone()),
            Fault::CpuHog(h) => Touch::CpuWorkers(h.workers),
            Fault::MemoryHog(h) => Touch::MemoryMb(h.size_mb),
            Fault::DiskFill(d) => Touch::Directory(d.directory.clone()),
            Fault::Netem(n) => Touch::Interface(n.interface.clone().unwrap_or_else(|| "lo".into())),
        }
    }

    /// Checks the values a type cannot (shares in (0, 1], sizes above zero), naming `field`.
    pub fn validate(&self, field: &str) -> Result<(), SpecError> {
        let share = |name: &str, v: f64| {
            if v > 0.0 && v <= 1.0 {
                Ok(())
            } else {
                Err(spec_error(
                    format!("{field}.{name}"),
                    "must be > 0 and <= 1",
                ))
            }
        };
        let positive = |name: &str, v: u64| {
            if v > 0 {
                Ok(())
            } else {
                Err(spec_error(format!("{field}.{name}"), "must be > 0"))
            }
        };
        // No wait inside a fault outlasts the fault itself: a longer one is a mistake, and
        // the proxy's timers stay far from overflowing an instant.
        let max_ms = MAX_FAULT_DURATION.as_millis() as u64;
        let within = |name: &str, v: u64, max: u64, unit: &str| {
            if v <= max {
                Ok(())
            } else {
                Err(spec_error(
                    format!("{field}.{name}"),
                    format!("must be at most {max} {unit} (a fault's longest duration, 1h)"),
                ))
            }
        };
        let ms = |name: &str, v: u64| within(name, v, max_ms, "ms");
        match self {
            Fault::Network(n) => {
                share("toxicity", n.toxicity)?;
                match &n.toxic {
                    Toxic::Latency {
                        latency_ms,
                        jitter_ms,
                    } => {
                        ms("toxic.latency_ms", *latency_ms)?;
                        ms("toxic.jitter_ms", *jitter_ms)
                    }
                    Toxic::SlowClose { delay_ms } => ms("toxic.delay_ms", *delay_ms),
                    Toxic::Timeout { timeout_ms } | Toxic::ResetPeer { timeout_ms } => {
                        ms("toxic.timeout_ms", *timeout_ms)
                    }
                    Toxic::Bandwidth { rate_kbps } => positive("toxic.rate_kbps", *rate_kbps),
                    Toxic::Slicer {
                        average_size,
                        delay_us,
                        ..
                    } => {
                        within("toxic.delay_us", *delay_us, max_ms * 1000, "us")?;
                        positive("toxic.average_size", *average_size)
                    }
                    _ => Ok(()),
                }
            }
            Fault::Http(h) => {
                share("rate", h.rate)?;
                if let HttpEffect::Delay { delay_ms } = h.effect {
                    ms("effect.delay_ms", delay_ms)?;
                }
                if let HttpEffect::Status { status } = h.effect
                    && !(100..=599).contains(&status)
                {
                    return Err(spec_error(
                        format!("{field}.effect.status"),
                        "must be an HTTP status, 100..=599",
                    ));
                }
                match &h.path {
                    Some(p) if !p.starts_with('/') => {
                        Err(spec_error(format!("{field}.path"), "must start with '/'"))
                    }
                    _ => Ok(()),
                }
            }
            Fault::Process(p) if p.name.is_empty() => {
                Err(spec_error(format!("{field}.name"), "must name a process"))
            }
            Fault::Process(_) => Ok(()),
            Fault::CpuHog(h) => {
                positive("workers", u64::from(h.workers))?;
                if (1..=100).contains(&h.load_percent) {
                    Ok(())
                } else {
                    Err(spec_error(
                        format!("{field}.load_percent"),
                        "must be 1..=100",
                    ))
                }
            }
            Fault::MemoryHog(h) => positive("size_mb", h.size_mb),
            Fault::DiskFill(d) => positive("size_mb", d.size_mb),
            Fault::Netem(n) if !(0.0..=100.0).contains(&n.loss_percent) => Err(spec_error(
                format!("{field}.loss_percent"),
                "must be 0..=100",
            )),
            Fault::Netem(n) => {
                ms("delay_ms", n.delay_ms)?;
                ms("jitter_ms", n.jitter_ms)
            }
        }
    }
}

/// The longest a fault may last; its duration is also its deadline.
pub const MAX_FAULT_DURATION: Duration = Duration::from_secs(3600);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_read_their_documented_shape() {
        let f: Fault = serde_json::from_value(serde_json::json!({
            "fault": "network",
            "toxic": {"type": "latency", "latency_ms": 100, "jitter_ms": 10},
            "direction": "downstream"
        }))
        .unwrap();
        assert_eq!(f.name(), "network");
        assert_eq!(f.touches(), Touch::TargetPort);
        f.validate("method[0]").unwrap();

        let bad: Result<Fault, _> = serde_json::from_value(serde_json::json!({
            "fault": "network", "toxic": {"type": "latency", "latency_ms": 1, "extra": 2}
        }));
        assert!(bad.is_err(), "unknown fields are refused");

        let hog: Fault =
            serde_json::from_value(serde_json::json!({"fault": "cpu_hog", "workers": 2})).unwrap();
        assert_eq!(
            hog,
            Fault::CpuHog(CpuHog {
                workers: 2,
                load_percent: 100
            })
        );
        let zero = Fault::Http(HttpFault {
            effect: HttpEffect::Status { status: 503 },
            path: None,
            rate: 0.0,
        });
        assert_eq!(zero.validate("m").unwrap_err().field, "m.rate");
    }
}
