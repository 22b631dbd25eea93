//! The CPU time this process's cgroups grant it, as a share of one CPU: cgroup v2's
//! `cpu.max`, v1's `cpu.cfs_quota_us` over `cpu.cfs_period_us`, the smallest along the
//! cgroup's path up to the top the process can see (a parent's limit binds its children;
//! inside a container, limits set above the container's own cgroup are not visible).
//!
//! Why the agent asks: the load engine's poller (`load::poller`) spins on one CPU instead
//! of sleeping between answers. With a whole CPU that spin costs nothing the engine could
//! use; under a quota below one CPU (a container's CPU limit) every spin is taken from the
//! requests' budget (docs/benchmarks.md measured it at half a CPU).
//! `std::thread::available_parallelism` reads the same files but rounds a quota up to one
//! whole CPU, so it cannot tell.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// This process's CPU quota in CPUs (0.5 = half of one CPU), or `None` without a limit
/// (or where cgroups cannot be read). Read once: a process does not move between
/// cgroups in the middle of a run often enough to matter.
pub fn cpu_quota() -> Option<f64> {
    static QUOTA: OnceLock<Option<f64>> = OnceLock::new();
    *QUOTA.get_or_init(|| {
        let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        quota_from(&cgroups, &mountinfo, &|path| {
            std::fs::read_to_string(path).ok()
        })
    })
}

/// Whether this process may use at least one whole CPU.
pub fn has_whole_cpu() -> bool {
    cpu_quota().is_none_or(|cpus| cpus >= 1.0)
}

/// The smallest quota over every CPU cgroup `cgroups` (the text of `/proc/self/cgroup`)
/// names, found through `mountinfo` (`/proc/self/mountinfo`); `read` reads a file.
fn quota_from(
    cgroups: &str,
    mountinfo: &str,
    read: &dyn Fn(&Path) -> Option<String>,
) -> Option<f64> {
    let mounts: Vec<Mount> = mountinfo.lines().filter_map(Mount::parse).collect();
    let mut smallest: Option<f64> = None;
    for line in cgroups.lines() {
        // hierarchy-id:controllers:path; v2's line is 0::path.
        let mut fields = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        // A cgroup removed while the process is in it, or one outside the process's
        // cgroup namespace ("/../.."), names no directory to read.
        let path = path.strip_suffix(" (deleted)").unwrap_or(path);
        if path.split('/').any(|part| part == "..") {
            continue;
        }
        let version = if id == "0" && controllers.is_empty() {
            Version::V2
        } else if controllers.split(',').any(|c| c == "cpu") {
            Version::V1
        } else {
            continue;
        };
        for mount in mounts.iter().filter(|m| m.version == version) {
            let Some(dir) = mount.dir_of(path) else {
                continue;
            };
            // The cgroup and each parent up to the mount point.
            let limits = dir
                .ancestors()
                .take_while(|at| at.starts_with(&mount.point))
                .filter_map(|at| limit_at(at, version, read));
            smallest = limits.chain(smallest).reduce(f64::min);
        }
    }
    smallest
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Version {
    V1,
    V2,
}

/// A cgroup filesystem mounted with the CPU controller.
#[derive(Debug)]
struct Mount {
    version: Version,
    /// The cgroup the mount shows at its top ("/" on a host, the container's own cgroup
    /// inside many containers).
    root: String,
    point: PathBuf,
}

impl Mount {
    /// One line of mountinfo: `ID PARENT MAJ:MIN ROOT POINT OPTIONS [TAGS...] - TYPE SOURCE
    /// SUPER_OPTIONS`.
    fn parse(line: &str) -> Option<Mount> {
        let (before, after) = line.split_once(" - ")?;
        let mut before = before.split(' ');
        let root = before.nth(3)?;
        let point = before.next()?;
        let mut after = after.split(' ');
        let fs_type = after.next()?;
        let super_options = after.nth(1).unwrap_or("");
        let version = match fs_type {
            "cgroup2" => Version::V2,
            "cgroup" if super_options.split(',').any(|o| o == "cpu") => Version::V1,
            _ => return None,
        };
        Some(Mount {
            version,
            root: unescape(root),
            point: PathBuf::from(unescape(point)),
        })
    }

    /// Where the cgroup at `path` is under this mount, if the mount shows it.
    fn dir_of(&self, path: &str) -> Option<PathBuf> {
        let relative = if self.root == "/" {
            path
        } else {
            let rest = path.strip_prefix(self.root.as_str())?;
            if !(rest.is_empty() || rest.starts_with('/')) {
                return None;
            }
            rest
        };
        let relative = relative.trim_start_matches('/');
        Some(if relative.is_empty() {
            self.point.clone()
        } else {
            self.point.join(relative)
        })
    }
}

/// mountinfo writes a space, tab, newline or backslash in a path as a 3-digit octal escape.
fn unescape(text: &str) -> String {
    if !text.contains('\\') {
        return text.to_string();
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escape = bytes
            .get(i + 1..i + 4)
            .filter(|digits| bytes[i] == b'\\' && digits.iter().all(|d| (b'0'..=b'7').contains(d)));
        match escape {
            Some(digits) => {
                let value = digits.iter().fold(0u32, |v, d| v * 8 + u32::from(d - b'0'));
                out.push(u8::try_from(value).unwrap_or(b'?'));
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The limit set on the cgroup directory `dir`, in CPUs.
fn limit_at(dir: &Path, version: Version, read: &dyn Fn(&Path) -> Option<String>) -> Option<f64> {
    let (quota, period) = match version {
        Version::V2 => {
            // "max 100000" (no limit) or "50000 100000".
            let text = read(&dir.join("cpu.max"))?;
            let mut fields = text.split_whitespace();
            (fields.next()?.to_string(), fields.next()?.to_string())
        }
        Version::V1 => (
            // -1: no limit.
            read(&dir.join("cpu.cfs_quota_us"))?.trim().to_string(),
            read(&dir.join("cpu.cfs_period_us"))?.trim().to_string(),
        ),
    };
    let quota: f64 = quota.parse().ok().filter(|q: &f64| *q > 0.0)?;
    let period: f64 = period.parse().ok().filter(|p: &f64| *p > 0.0)?;
    Some(quota / period)
}

#[cfg(test)]
mod tests;
