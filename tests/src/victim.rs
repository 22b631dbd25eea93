//! A process for a faults run to act on: `sleep` under a name of its own (the name a
//! policy's `processes` entry gives), and its state as the kernel reports it.

use std::path::Path;
use std::time::Duration;

use tokio::process::{Child, Command};

use crate::wait_for;

/// `sleep 1000` started as `dir/name`, returned once `/proc` shows it under that name.
///
/// A symbolic link, not a copy: the name execve is given becomes the process's comm, and
/// no file is left open for writing that a fork in another test's thread could inherit
/// (a copy failed in CI with ETXTBSY, "Text file busy", when such a fork held it).
pub async fn named_sleeper(dir: &Path, name: &str) -> Child {
    let sleep = ["/bin/sleep", "/usr/bin/sleep"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("a sleep binary");
    let link = dir.join(name);
    std::os::unix::fs::symlink(sleep, &link).expect("link sleep under the victim's name");
    let child = Command::new(&link)
        .arg("1000")
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the victim");
    let pid = child.id().expect("victim pid");
    wait_for(
        "the victim runs under its name",
        Duration::from_secs(30),
        || async {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
            (comm.trim() == name).then_some(())
        },
    )
    .await;
    child
}

/// The state letter of a process (`R`, `S`, `T`, ...), or `None` once it is gone.
pub fn process_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = stat.rsplit_once(')')?.1;
    after_name.trim_start().chars().next()
}
