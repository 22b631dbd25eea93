//! Who wrote a journal, in the keys `chaos run` fills (`chaoslib-version`, `platform`,
//! `node`), and the masking of a resolved experiment's secrets in what the run writes.

use iohr_domain::faults::Journal;
use iohr_domain::faults::experiment::Mask;
use iohr_domain::faults::journal::ActivityRun;

/// Where `chaos run` names chaoslib's version: ours.
pub fn version() -> String {
    format!("iohr-agent {}", env!("CARGO_PKG_VERSION"))
}

fn kernel(file: &str) -> Option<String> {
    std::fs::read_to_string(format!("/proc/sys/kernel/{file}"))
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// `Linux-6.1.0-18-amd64-x86_64`, as Python's `platform.platform()` begins.
pub fn platform() -> String {
    let os = match std::env::consts::OS {
        "linux" => "Linux".to_string(),
        "macos" => "Darwin".to_string(),
        other => other.to_string(),
    };
    match kernel("osrelease") {
        Some(release) => format!("{os}-{release}-{}", std::env::consts::ARCH),
        None => format!("{os}-{}", std::env::consts::ARCH),
    }
}

/// The host's name (Python's `platform.node()`); empty where it cannot be read.
pub fn node() -> String {
    kernel("hostname")
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_default()
}

/// Fills the header `chaos run` writes: who ran it, where, and the experiment as given.
pub fn stamp(journal: &mut Journal, experiment: serde_json::Value) {
    journal.chaoslib_version = version();
    journal.platform = platform();
    journal.node = node();
    journal.experiment = experiment;
}

/// Replaces every secret's value in what the journal says (activities, outputs,
/// exceptions, the reason); its times and numbers never hold one.
pub fn mask(journal: &mut Journal, mask: &Mask) {
    let runs = journal
        .steady_states
        .before
        .iter_mut()
        .chain(journal.steady_states.after.iter_mut())
        .chain(journal.steady_states.during.iter_mut())
        .flat_map(|s| s.probes.iter_mut())
        .chain(journal.run.iter_mut())
        .chain(journal.rollbacks.iter_mut());
    for run in runs {
        mask_run(run, mask);
    }
    mask.mask(&mut journal.experiment);
    for record in &mut journal.ledger {
        mask.mask(&mut record.fault);
        mask.mask(&mut record.undo);
    }
    if let Some(reason) = &mut journal.reason {
        *reason = mask.mask_str(reason);
    }
}

fn mask_run(run: &mut ActivityRun, mask: &Mask) {
    mask.mask(&mut run.activity);
    if let Some(output) = &mut run.output {
        mask.mask(output);
    }
    if let Some(e) = &mut run.exception {
        *e = mask.mask_str(e);
    }
}
