//! The `/proc` text `sysinfo` does not read: the host's TCP sockets (`/proc/net/tcp` and
//! `tcp6`, which list the sockets of this network namespace) and the agent's own
//! (`/proc/self/fd` entries that are sockets). Reads are bounded: a table is read up to
//! [`MAX_TABLE_BYTES`] and the descriptors up to [`MAX_FDS`], the count then a floor.

use std::io::Read;
use std::path::Path;

/// About 100,000 sockets' lines in a table (150 bytes each).
pub const MAX_TABLE_BYTES: u64 = 16 << 20;
/// Descriptors looked at.
pub const MAX_FDS: usize = 1 << 20;

/// Entries of a `/proc/net/tcp`-style table: after its header, every line whose first
/// field is a slot number and a colon (`  12: 0100007F:1F90 ...`).
pub fn count_table_entries(text: &str) -> u64 {
    text.lines()
        .skip(1)
        .filter(|line| {
            line.split_whitespace().next().is_some_and(|slot| {
                slot.strip_suffix(':')
                    .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            })
        })
        .count() as u64
}

/// Whether a descriptor's link names a socket (`socket:[12345]`).
pub fn is_socket(link: &str) -> bool {
    link.strip_prefix("socket:[")
        .and_then(|rest| rest.strip_suffix(']'))
        .is_some_and(|inode| !inode.is_empty() && inode.bytes().all(|b| b.is_ascii_digit()))
}

/// TCP sockets of this network namespace, IPv4 and IPv6; a table that cannot be read
/// counts none.
pub fn host_tcp_sockets() -> u64 {
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|path| read_bounded(Path::new(path)))
        .map(|text| count_table_entries(&text))
        .sum()
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
