//! tc netem delay and loss on an interface of the agent's network namespace, where the
//! kernel has it.
//!
//! The agent adds its qdisc as the interface's root with a handle of its own
//! ([`HANDLE`]) and never replaces one: an interface that already has a root qdisc refuses
//! the fault (fail closed), and the undo deletes the root only when it is the agent's netem.
//! Support is detected, not assumed: no `tc` binary, a kernel without `sch_netem` or a
//! missing privilege are [`FaultError::Unsupported`] with the reason.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use iohr_domain::faults::fault::NetemFault;

use super::host::UndoReport;
use super::{FaultError, Undo};

/// The root qdisc handle the agent owns (the one pumba reserves for the same reason).
pub const HANDLE: &str = "504d:";

/// The interface a fault without one acts on.
pub const DEFAULT_INTERFACE: &str = "lo";

/// How `tc` is run: on the agent's own network namespace, or (tests) in another one.
#[derive(Debug, Clone)]
pub struct Tc {
    /// The words before `tc`'s own arguments, e.g. `nsenter --net=/proc/PID/ns/net tc`.
    command: Vec<OsString>,
}

impl Default for Tc {
    fn default() -> Self {
        Tc::host()
    }
}

impl Tc {
    /// `tc` in the agent's network namespace.
    pub fn host() -> Self {
        Tc {
            command: vec!["tc".into()],
        }
    }

    /// `tc` in the network namespace of process `pid` (through `nsenter`).
    pub fn in_namespace_of(pid: u32) -> Self {
        Tc {
            command: vec![
                "nsenter".into(),
                format!("--net=/proc/{pid}/ns/net").into(),
                "tc".into(),
            ],
        }
    }

    fn run(&self, args: &[String]) -> Result<Output, FaultError> {
        let (program, prefix) = self
            .command
            .split_first()
            .ok_or_else(|| FaultError::Failed("no tc command".into()))?;
        Command::new(program)
            .args(prefix)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => FaultError::Unsupported(format!(
                    "no {} binary in PATH",
                    program.to_string_lossy()
                )),
                _ => FaultError::Failed(format!("running tc: {e}")),
            })
    }

    /// The root qdisc line of `interface` (`tc qdisc show dev IF root`).
    pub fn root_qdisc(&self, interface: &str) -> Result<String, FaultError> {
        check_interface(interface)?;
        let out = self.run(&words(&["qdisc", "show", "dev", interface, "root"]))?;
        if !out.status.success() {
            return Err(FaultError::Failed(format!(
                "tc qdisc show dev {interface}: {}",
                stderr(&out)
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }
}

fn words(w: &[&str]) -> Vec<String> {
    w.iter().map(|s| s.to_string()).collect()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).trim().to_string()
}

/// The interface a fault acts on.
pub fn interface(fault: &NetemFault) -> &str {
    fault.interface.as_deref().unwrap_or(DEFAULT_INTERFACE)
}

/// Interface names are short words; anything else is refused before tc sees it.
fn check_interface(name: &str) -> Result<(), FaultError> {
    let fine = !name.is_empty()
        && name.len() <= 15
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '@'));
    if fine {
        Ok(())
    } else {
        Err(FaultError::NotFound(format!(
            "{name:?} is not an interface name"
        )))
    }
}

/// `tc` arguments that add the fault as the interface's root qdisc.
pub fn add_args(fault: &NetemFault) -> Result<Vec<String>, FaultError> {
    let interface = interface(fault);
    check_interface(interface)?;
    let mut args = words(&[
        "qdisc", "add", "dev", interface, "root", "handle", HANDLE, "netem",
    ]);
    if fault.delay_ms > 0 || fault.jitter_ms > 0 {
        args.push("delay".into());
        args.push(format!("{}ms", fault.delay_ms));
        if fault.jitter_ms > 0 {
            args.push(format!("{}ms", fault.jitter_ms));
        }
    }
    if fault.loss_percent > 0.0 {
        args.push("loss".into());
        args.push(format!("{}%", fault.loss_percent));
    }
    Ok(args)
}

/// Reads why tc refused, in the words a user needs.
fn classify(interface: &str, out: &Output) -> FaultError {
    let text = stderr(out);
    let lower = text.to_ascii_lowercase();
    if lower.contains("qdisc kind is unknown") {
        FaultError::Unsupported(format!("the kernel has no sch_netem (tc: {text})"))
    } else if lower.contains("operation not permitted") {
        FaultError::Unsupported(format!(
            "not permitted: netem needs CAP_NET_ADMIN in the network namespace (tc: {text})"
        ))
    } else if lower.contains("cannot find device") {
        FaultError::NotFound(format!("no interface {interface} (tc: {text})"))
    } else if lower.contains("exclusivity flag") || lower.contains("file exists") {
        FaultError::Failed(format!(
            "{interface} already has a root qdisc; the agent never replaces one (tc: {text})"
        ))
    } else {
        FaultError::Failed(format!("tc qdisc add on {interface}: {text}"))
    }
}

/// The undo written to the ledger before the fault is applied.
pub fn undo_for(fault: &NetemFault) -> Undo {
    Undo::RemoveQdisc {
        interface: interface(fault).to_string(),
    }
}

/// Adds the fault's netem qdisc as the root of its interface.
pub fn apply(tc: &Tc, fault: &NetemFault) -> Result<String, FaultError> {
    let args = add_args(fault)?;
    let out = tc.run(&args)?;
    if !out.status.success() {
        return Err(classify(interface(fault), &out));
    }
    tracing::info!(interface = interface(fault), ?args, "netem applied");
    Ok(format!("tc {}", args.join(" ")))
}

/// Undoes [`Undo::RemoveQdisc`]: deletes the interface's root qdisc if it is the agent's
/// netem, and leaves any other alone.
pub fn remove(tc: &Tc, interface: &str) -> Result<UndoReport, FaultError> {
    let root = match tc.root_qdisc(interface) {
        Ok(root) => root,
        // Without tc the fault could never have been applied.
        Err(FaultError::Unsupported(why)) => {
            return Ok(UndoReport::nothing_left(format!(
                "no netem to remove on {interface}: {why}"
            )));
        }
        Err(e) => return Err(e),
    };
    if !is_ours(&root) {
        return Ok(UndoReport::nothing_left(format!(
            "no netem qdisc of the agent's on {interface} (root: {root:?})"
        )));
    }
    let out = tc.run(&words(&[
        "qdisc", "del", "dev", interface, "root", "handle", HANDLE,
    ]))?;
    if !out.status.success() {
        return Err(FaultError::Failed(format!(
            "tc qdisc del on {interface}: {}",
            stderr(&out)
        )));
    }
    tracing::info!(interface, "netem removed");
    Ok(UndoReport::undone(format!(
        "netem removed from {interface}"
    )))
}

/// `qdisc netem 504d: root refcnt 2 limit 1000 delay 100ms` is the agent's.
fn is_ours(root_line: &str) -> bool {
    let mut w = root_line.split_whitespace();
    w.next() == Some("qdisc") && w.next() == Some("netem") && w.next() == Some(HANDLE)
}

/// Whether this host can apply netem, tried in a throwaway network namespace so that
/// nothing of the agent's own is touched: Ok, or [`FaultError::Unsupported`] with why.
pub fn support() -> Result<(), FaultError> {
    if find_in_path("tc").is_none() {
        return Err(FaultError::Unsupported("no tc binary in PATH".into()));
    }
    if find_in_path("unshare").is_none() {
        return Err(FaultError::Unsupported(
            "no unshare binary in PATH to probe netem in a private network namespace".into(),
        ));
    }
    let probe = NetemFault {
        delay_ms: 1,
        jitter_ms: 0,
        loss_percent: 0.0,
        interface: None,
    };
    let args = add_args(&probe)?;
    // As root a plain new network namespace; otherwise one inside a new user namespace.
    let mut last = String::new();
    for unshare in [&["--net"][..], &["--user", "--map-root-user", "--net"][..]] {
        let out = Command::new("unshare")
            .args(unshare)
            .arg("--")
            .arg("tc")
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| FaultError::Failed(format!("running unshare: {e}")))?;
        if out.status.success() {
            return Ok(());
        }
        last = stderr(&out);
        if !last.starts_with("unshare:") {
            // tc itself answered: that is the kernel's word.
            return Err(classify(DEFAULT_INTERFACE, &out));
        }
    }
    Err(FaultError::Unsupported(format!(
        "cannot create a network namespace to probe netem: {last}"
    )))
}

fn find_in_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| is_executable(p))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_qdisc_is_added_with_the_agents_handle_and_never_replaced() {
        let fault = NetemFault {
            delay_ms: 100,
            jitter_ms: 10,
            loss_percent: 2.5,
            interface: Some("eth0".into()),
        };
        assert_eq!(
            add_args(&fault).unwrap().join(" "),
            "qdisc add dev eth0 root handle 504d: netem delay 100ms 10ms loss 2.5%"
        );
        let bad = NetemFault {
            interface: Some("lo; reboot".into()),
            ..fault
        };
        assert!(matches!(add_args(&bad), Err(FaultError::NotFound(_))));
    }

    #[test]
    fn only_the_agents_netem_is_removed() {
        assert!(is_ours(
            "qdisc netem 504d: root refcnt 2 limit 1000 delay 100ms"
        ));
        assert!(!is_ours("qdisc noqueue 0: root refcnt 2"));
        assert!(!is_ours("qdisc netem 1: root refcnt 2 limit 1000"));
    }
}
