use std::collections::HashMap;

use super::*;

/// A cgroup filesystem of the given files; `..` in a path is followed as the kernel would.
fn files(entries: &[(&str, &str)]) -> impl Fn(&Path) -> Option<String> {
    let map: HashMap<PathBuf, String> = entries
        .iter()
        .map(|(path, text)| (PathBuf::from(path), (*text).to_string()))
        .collect();
    move |path: &Path| {
        let mut resolved = PathBuf::new();
        for part in path.components() {
            match part {
                std::path::Component::ParentDir => {
                    resolved.pop();
                }
                other => resolved.push(other),
            }
        }
        map.get(&resolved).cloned()
    }
}

const V2_MOUNT: &str = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
const V1_MOUNTS: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
";

#[test]
fn a_v2_quota_is_a_share_of_one_cpu() {
    let read = files(&[
        ("/sys/fs/cgroup/cpu.max", "max 100000\n"),
        ("/sys/fs/cgroup/bench/cpu.max", "50000 100000\n"),
    ]);
    assert_eq!(quota_from("0::/bench\n", V2_MOUNT, &read), Some(0.5));
}

#[test]
fn a_parents_limit_binds_its_child() {
    let read = files(&[
        ("/sys/fs/cgroup/jobs/cpu.max", "25000 100000\n"),
        ("/sys/fs/cgroup/jobs/one/cpu.max", "max 100000\n"),
    ]);
    assert_eq!(quota_from("0::/jobs/one\n", V2_MOUNT, &read), Some(0.25));
}

#[test]
fn max_everywhere_is_no_limit() {
    let read = files(&[
        ("/sys/fs/cgroup/cpu.max", "max 100000\n"),
        ("/sys/fs/cgroup/a/cpu.max", "max 100000\n"),
    ]);
    assert_eq!(quota_from("0::/a\n", V2_MOUNT, &read), None);
    // And a cgroup without the files (no cpu controller enabled there).
    assert_eq!(quota_from("0::/a\n", V2_MOUNT, &files(&[])), None);
}

#[test]
fn a_v1_quota_is_read_from_the_mount_with_the_cpu_controller() {
    let cgroups = "9:cpuset:/\n4:cpu,cpuacct:/iohrq\n1:name=systemd:/\n";
    let read = files(&[
        ("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1\n"),
        ("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n"),
        (
            "/sys/fs/cgroup/cpu,cpuacct/iohrq/cpu.cfs_quota_us",
            "5000\n",
        ),
        (
            "/sys/fs/cgroup/cpu,cpuacct/iohrq/cpu.cfs_period_us",
            "10000\n",
        ),
    ]);
    assert_eq!(quota_from(cgroups, V1_MOUNTS, &read), Some(0.5));
}

#[test]
fn a_container_whose_mount_shows_its_own_cgroup_at_the_top() {
    // Inside a container the mount's root is the container's cgroup: the file is at the
    // mount point itself, not under the full path.
    let mountinfo =
        "700 650 0:29 /docker/abc /sys/fs/cgroup/cpu rw,nosuid - cgroup cgroup rw,cpu\n";
    let read = files(&[
        ("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "150000\n"),
        ("/sys/fs/cgroup/cpu/cpu.cfs_period_us", "100000\n"),
    ]);
    assert_eq!(
        quota_from("5:cpu:/docker/abc\n", mountinfo, &read),
        Some(1.5)
    );
    // A cgroup the mount does not show is not guessed at.
    assert_eq!(quota_from("5:cpu:/docker/abcd\n", mountinfo, &read), None);
}

#[test]
fn malformed_files_are_no_limit_rather_than_a_guess() {
    let read = files(&[("/sys/fs/cgroup/x/cpu.max", "lots 0\n")]);
    assert_eq!(quota_from("0::/x\n", V2_MOUNT, &read), None);
    assert_eq!(quota_from("garbage\n", "garbage\n", &read), None);
    assert_eq!(quota_from("", "", &read), None);
}

#[test]
fn escaped_mount_points_are_read_as_paths() {
    assert_eq!(unescape(r"/mnt/with\040space"), "/mnt/with space");
    assert_eq!(unescape(r"/plain"), "/plain");
    assert_eq!(unescape(r"/odd\09"), r"/odd\09");
    assert_eq!(unescape(r"/odd\09x/y"), r"/odd\09x/y");
    // Through a whole mountinfo line, with the optional fields real lines carry.
    let mountinfo = "40 31 0:35 / /mnt/cg\\040v2 rw,nosuid shared:9 master:2 - cgroup2 none rw\n";
    let read = files(&[("/mnt/cg v2/job/cpu.max", "20000 100000\n")]);
    assert_eq!(quota_from("0::/job\n", mountinfo, &read), Some(0.2));
}

#[test]
fn a_v2_container_reads_its_own_cgroup_at_the_mount_point() {
    let mountinfo = "900 800 0:26 /kubepods/pod1/c1 /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n";
    let read = files(&[("/sys/fs/cgroup/cpu.max", "50000 100000\n")]);
    assert_eq!(
        quota_from("0::/kubepods/pod1/c1\n", mountinfo, &read),
        Some(0.5)
    );
}

#[test]
fn a_hybrid_host_takes_the_v1_limit_when_v2_has_no_cpu_files() {
    let mountinfo =
        format!("{V1_MOUNTS}50 31 0:40 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n");
    let cgroups = "4:cpu,cpuacct:/bench\n0::/bench\n";
    let read = files(&[
        (
            "/sys/fs/cgroup/cpu,cpuacct/bench/cpu.cfs_quota_us",
            "75000\n",
        ),
        (
            "/sys/fs/cgroup/cpu,cpuacct/bench/cpu.cfs_period_us",
            "100000\n",
        ),
    ]);
    assert_eq!(quota_from(cgroups, &mountinfo, &read), Some(0.75));
}

#[test]
fn paths_outside_the_namespace_or_deleted_read_nothing_outside_the_mount() {
    // "/../.." would climb above the mount point to /sys/fs/cpu.max.
    let read = files(&[
        ("/sys/fs/cpu.max", "10000 100000\n"),
        ("/sys/fs/cgroup/gone/cpu.max", "30000 100000\n"),
    ]);
    assert_eq!(quota_from("0::/../..\n", V2_MOUNT, &read), None);
    assert_eq!(
        quota_from("0::/gone (deleted)\n", V2_MOUNT, &read),
        Some(0.3)
    );
}
