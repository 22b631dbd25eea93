//! The agent's state directory (its fault ledger, the wardens' records) is as private as
//! what it holds: made 0700 whatever the umask, and an existing one wider than that is
//! named in a warning at start-up (left as its operator set it).

use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;

/// The mode the agent makes its state directories with.
pub const PRIVATE: u32 = 0o700;

/// Makes `dir` (and its missing parents) mode 0700 if it does not exist. Returns the mode
/// of an existing `dir` that others may read or enter (wider than 0700), to warn about.
pub fn ensure_private(dir: &Path) -> io::Result<Option<u32>> {
    match std::fs::metadata(dir) {
        Ok(meta) => {
            let mode = meta.permissions().mode() & 0o777;
            Ok((mode & 0o077 != 0).then_some(mode))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(PRIVATE)
                .create(dir)?;
            // The umask can only take bits away from the mode asked: set it exactly.
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(PRIVATE))?;
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).expect("meta").permissions().mode() & 0o777
    }

    #[test]
    fn a_new_state_dir_is_0700_and_a_wider_existing_one_is_reported() {
        let root = tempfile::tempdir().expect("tempdir");
        let made = root.path().join("state/iohr-agent");
        assert_eq!(ensure_private(&made).expect("made"), None);
        assert_eq!(mode(&made), 0o700);
        assert_eq!(ensure_private(&made).expect("again"), None);
        let wide = root.path().join("wide");
        std::fs::create_dir(&wide).expect("dir");
        std::fs::set_permissions(&wide, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        assert_eq!(ensure_private(&wide).expect("existing"), Some(0o755));
        // Left as the operator set it: only named.
        assert_eq!(mode(&wide), 0o755);
    }
}
