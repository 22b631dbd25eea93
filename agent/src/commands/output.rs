//! `exec --output FILE`: the outcome's JSON object written whole or not at all.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, bail};

/// `--output FILE`: the object `--json` prints, written to FILE.tmp in FILE's directory and
/// renamed over FILE, so that a reader never sees half of it (k6's `--summary-export`).
pub struct OutputFile {
    /// FILE as given, for messages.
    path: PathBuf,
    /// Where the object ends up: FILE, or the file a symlink FILE points to (the link
    /// stays a link).
    dest: PathBuf,
    /// The temporary file renamed over `dest`; none when FILE is a device or a pipe, or
    /// once it has been renamed.
    tmp: Option<PathBuf>,
    file: std::fs::File,
}

impl OutputFile {
    /// Opens the temporary file (or the device) now: a path that cannot be written is
    /// found before any request is sent.
    pub fn create(path: PathBuf) -> anyhow::Result<OutputFile> {
        if path.is_dir() {
            bail!("--output {}: is a directory", path.display());
        }
        // /dev/stdout, a FIFO: nothing to rename over, written as they are.
        if std::fs::metadata(&path).is_ok_and(|meta| !meta.is_file()) {
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .with_context(|| format!("--output {}: cannot write it", path.display()))?;
            return Ok(OutputFile {
                dest: path.clone(),
                path,
                tmp: None,
                file,
            });
        }
        // An existing FILE may be a symlink: the result replaces the file it points to.
        let dest = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
        let Some(name) = dest.file_name() else {
            bail!("--output {}: names no file", path.display());
        };
        // The pid keeps two runs writing the same FILE out of each other's temporary file.
        let mut tmp_name = name.to_os_string();
        tmp_name.push(format!(".{}.tmp", std::process::id()));
        let tmp = dest.with_file_name(tmp_name);
        let file = std::fs::File::create(&tmp).with_context(|| {
            format!(
                "--output {}: cannot write {} in its directory",
                path.display(),
                tmp.display()
            )
        })?;
        Ok(OutputFile {
            path,
            dest,
            tmp: Some(tmp),
            file,
        })
    }

    pub fn write(mut self, object: &str) -> anyhow::Result<()> {
        self.write_and_rename(object)
            .with_context(|| format!("writing --output {}", self.path.display()))
    }

    fn write_and_rename(&mut self, object: &str) -> std::io::Result<()> {
        self.file.write_all(object.as_bytes())?;
        self.file.write_all(b"\n")?;
        self.file.flush()?;
        if let Some(tmp) = &self.tmp {
            self.file.sync_all()?;
            std::fs::rename(tmp, &self.dest)?;
            self.tmp = None;
        }
        Ok(())
    }
}

impl Drop for OutputFile {
    fn drop(&mut self) {
        // Given up before the end: no temporary file is left behind.
        if let Some(tmp) = &self.tmp {
            let _ = std::fs::remove_file(tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_output_file_appears_whole_or_not_at_all() {
        use std::os::unix::fs::FileTypeExt;

        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("summary.json");
        let tmp = dir
            .path()
            .join(format!("summary.json.{}.tmp", std::process::id()));
        let output = OutputFile::create(path.clone()).expect("a writable directory");
        assert!(
            tmp.exists() && !path.exists(),
            "only FILE.PID.tmp while it runs"
        );
        output.write(r#"{"status":"passed"}"#).expect("written");
        assert!(!tmp.exists());
        assert_eq!(
            std::fs::read_to_string(&path).expect("FILE"),
            "{\"status\":\"passed\"}\n"
        );

        // Given up (an error before the end): nothing is left behind.
        drop(OutputFile::create(dir.path().join("other.json")).expect("created"));
        assert!(
            !dir.path()
                .join(format!("other.json.{}.tmp", std::process::id()))
                .exists()
        );

        // A symlink stays a link: the file it points to gets the object.
        let real = dir.path().join("real.json");
        std::fs::write(&real, "old").expect("real");
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&real, &link).expect("symlink");
        let output = OutputFile::create(link.clone()).expect("through the link");
        output.write("{}").expect("written");
        assert!(
            std::fs::symlink_metadata(&link)
                .expect("link")
                .file_type()
                .is_symlink()
        );
        assert_eq!(std::fs::read_to_string(&real).expect("real"), "{}\n");

        // A device is written as it is, never replaced.
        OutputFile::create(PathBuf::from("/dev/null"))
            .expect("a device")
            .write("{}")
            .expect("written");
        assert!(
            std::fs::metadata("/dev/null")
                .expect("/dev/null")
                .file_type()
                .is_char_device()
        );

        // A directory gone by the end: the error names FILE.
        let gone = dir.path().join("gone");
        std::fs::create_dir(&gone).expect("dir");
        let output = OutputFile::create(gone.join("x.json")).expect("created");
        std::fs::remove_dir_all(&gone).expect("removed");
        let error = output.write("{}").expect_err("nowhere to rename to");
        assert!(
            format!("{error:#}").contains(&gone.join("x.json").display().to_string()),
            "{error:#}"
        );
        for bad in [dir.path().to_path_buf(), gone.join("x.json")] {
            let error = OutputFile::create(bad.clone()).err().expect("refused");
            assert!(
                format!("{error:#}").contains(&bad.display().to_string()),
                "{error:#}"
            );
        }
    }
}
