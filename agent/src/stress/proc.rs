//! The `/proc` text `sysinfo` does not read: the host's TCP sockets (the counters of
//! `/proc/net/sockstat` and `sockstat6`, for this network namespace) and the agent's own
//! (`/proc/self/fd` entries that are sockets). Reads are bounded: a file is read up to
//! [`MAX_TABLE_BYTES`] and the descriptors up to [`MAX_FDS`], the count then a floor.
//!
//! The counters, not the tables `/proc/net/tcp` and `tcp6`: printing a table walks the
//! kernel's whole connection hash, which cost about 2% of the load engine's CPU once a
//! second under a 50% quota (perf, docs/benchmarks.md); the counters are kept as it goes.

use std::io::Read;
use std::path::Path;

/// More than a counters file ever holds.
pub const MAX_TABLE_BYTES: u64 = 64 << 10;
/// Descriptors looked at.
pub const MAX_FDS: usize = 1 << 20;

/// The value after `key` on the line of `/proc/net/sockstat*` that starts with
/// `protocol:` (`TCP: inuse 11 orphan 0 tw 769 alloc 14 mem 0`).
pub fn sockstat_field(text: &str, protocol: &str, key: &str) -> Option<u64> {
    let line = text.lines().find_map(|line| {
        line.strip_prefix(protocol)
            .and_then(|rest| rest.strip_prefix(':'))
    })?;
    let mut words = line.split_whitespace();
    while let Some(word) = words.next() {
        let value = words.next()?;
        if word == key {
            return value.parse().ok();
        }
    }
    None
}

/// TCP sockets in any state from the two files' text: IPv4's in use, IPv6's in use, and
/// those in TIME_WAIT (one count for both); a missing field counts none.
pub fn tcp_sockets(sockstat: &str, sockstat6: &str) -> u64 {
    let field = |text, protocol, key| sockstat_field(text, protocol, key).unwrap_or(0);
    field(sockstat, "TCP", "inuse")
        .saturating_add(field(sockstat, "TCP", "tw"))
        .saturating_add(field(sockstat6, "TCP6", "inuse"))
}

/// Whether a descriptor's link names a socket (`socket:[12345]`).
pub fn is_socket(link: &str) -> bool {
    link.strip_prefix("socket:[")
        .and_then(|rest| rest.strip_suffix(']'))
        .is_some_and(|inode| !inode.is_empty() && inode.bytes().all(|b| b.is_ascii_digit()))
}

/// TCP sockets of this network namespace, IPv4 and IPv6; a file that cannot be read
/// counts none.
pub fn host_tcp_sockets() -> u64 {
    let read = |path| read_bounded(Path::new(path)).unwrap_or_default();
    tcp_sockets(&read("/proc/net/sockstat"), &read("/proc/net/sockstat6"))
}

/// Sockets this process holds open.
pub fn own_sockets() -> u64 {
    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else {
        return 0;
    };
    entries
        .take(MAX_FDS)
        .filter_map(Result::ok)
        .filter_map(|entry| std::fs::read_link(entry.path()).ok())
        .filter(|link| link.to_str().is_some_and(is_socket))
        .count() as u64
}

fn read_bounded(path: &Path) -> Option<String> {
    let file = std::fs::File::open(path).ok()?;
    let mut text = String::new();
    file.take(MAX_TABLE_BYTES).read_to_string(&mut text).ok()?;
    Some(text)
}
