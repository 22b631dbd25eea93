//! The store's files as private as what they hold (tokens' hashes, sealed secrets, every
//! run): the data dir 0700 and the SQLite files (the database, `-wal`, `-shm`) 0600,
//! whatever the umask. A file or dir made before, or by hand, with wider modes is
//! narrowed at start-up, with a warning naming what it was.

use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Makes the data dir (0700) or narrows an existing one.
pub fn secure_data_dir(dir: &Path) -> std::io::Result<()> {
    match std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        Ok(()) => {
            tighten(dir, 0o700);
            Ok(())
        }
        Err(error) => Err(error),
    }
}

/// The SQLite file of a `sqlite://` URL, when it names one (not `:memory:`).
fn sqlite_path(url: &str) -> Option<PathBuf> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))?;
    let path = rest.split('?').next().unwrap_or(rest);
    (!path.is_empty() && !path.starts_with(":memory:")).then(|| PathBuf::from(path))
}

/// Before SQLite opens the file: makes it 0600 when it does not exist yet (SQLite then
/// gives its `-wal` and `-shm` the database's mode) and narrows the three when wider.
pub fn secure_sqlite(url: &str) -> std::io::Result<()> {
    let Some(db) = sqlite_path(url) else {
        return Ok(());
    };
    if let Some(parent) = db.parent().filter(|p| !p.as_os_str().is_empty())
        && !parent.exists()
    {
        secure_data_dir(parent)?;
    }
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&db)
    {
        Ok(_) => {}
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(error) => return Err(error),
    }
    for suffix in ["", "-wal", "-shm"] {
        let mut name = db.clone().into_os_string();
        name.push(suffix);
        tighten(Path::new(&name), 0o600);
    }
    Ok(())
}

/// Narrows `path` to `mode` when its mode allows more, with a warning; a missing path is
/// left alone, and a failure to narrow is a warning too (the controller still serves).
pub fn tighten(path: &Path, mode: u32) {
    let Ok(meta) = std::fs::metadata(path) else {
        return;
    };
    let was = meta.permissions().mode() & 0o777;
    if was & !mode == 0 {
        return;
    }
    match std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)) {
        Ok(()) => tracing::warn!(
            path = %path.display(),
            was = format!("{was:o}"),
            now = format!("{mode:o}"),
            "a store file was readable by others: narrowed"
        ),
        Err(error) => tracing::warn!(
            path = %path.display(),
            was = format!("{was:o}"),
            %error,
            "a store file is readable by others and could not be narrowed"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_paths() {
        assert_eq!(
            sqlite_path("sqlite:///d/iohr.db?mode=rwc"),
            Some(PathBuf::from("/d/iohr.db"))
        );
        assert_eq!(sqlite_path("sqlite:rel.db"), Some(PathBuf::from("rel.db")));
        assert_eq!(sqlite_path("sqlite::memory:"), None);
        assert_eq!(sqlite_path("postgres://x/y"), None);
    }
}
