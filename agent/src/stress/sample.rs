//! One second's figures: the host's CPU, memory and load average and the agent process's
//! CPU and resident memory from `sysinfo`, its sockets and the host's from [`super::proc`].
//! The process is read by its id only: never its arguments or environment.

use std::time::Instant;

use iohr_domain::stress::StressSecond;
use sysinfo::{MemoryRefreshKind, Pid, ProcessRefreshKind, ProcessesToUpdate, System};

/// What a sampler keeps between seconds: `sysinfo`'s state (CPU usage is a difference of
/// two reads) and the agent's CPU time at the last read (microseconds).
pub struct Probe {
    system: System,
    pid: Option<Pid>,
    cpus_allowed: f64,
    last: Option<(Instant, u64)>,
}

impl Default for Probe {
    fn default() -> Probe {
        Probe::new()
    }
}

impl Probe {
    pub fn new() -> Probe {
        let mut probe = Probe {
            system: System::new(),
            pid: sysinfo::get_current_pid().ok(),
            cpus_allowed: cpus_allowed(),
            last: None,
        };
        // The first read sets the base the next second's usage is measured from.
        probe.system.refresh_cpu_usage();
        probe.last = cpu_time_us().map(|us| (Instant::now(), us));
        probe
    }

    /// This second's figures; `second` and `lag_ms` are the sampler's to fill.
    pub fn read(&mut self) -> StressSecond {
        self.system.refresh_cpu_usage();
        self.system
            .refresh_memory_specifics(MemoryRefreshKind::nothing().with_ram());
        let now = Instant::now();
        let cpu_us = cpu_time_us();
        let cpu_agent_percent = match (self.last, cpu_us) {
            (Some((then, before)), Some(after)) => {
                let wall = now.saturating_duration_since(then).as_secs_f64();
                if wall > 0.0 {
                    after.saturating_sub(before) as f64 / 1e6 / wall * 100.0
                } else {
                    0.0
                }
            }
            _ => 0.0,
        };
        self.last = cpu_us.map(|us| (now, us));
        let agent_memory_bytes = self.resident_memory();
        let load = System::load_average();
        StressSecond {
            second: 0,
            measure_second: None,
            cpu_host_percent: f64::from(self.system.global_cpu_usage()),
            cpu_agent_percent,
            cpus_allowed: self.cpus_allowed,
            memory_used_bytes: self.system.used_memory(),
            memory_total_bytes: self.system.total_memory(),
            agent_memory_bytes,
            load_average: [load.one, load.five, load.fifteen],
            agent_sockets: super::proc::own_sockets(),
            host_tcp_sockets: super::proc::host_tcp_sockets(),
            lag_ms: 0.0,
        }
    }

    /// The agent process's resident memory, read afresh.
    fn resident_memory(&mut self) -> u64 {
        let Some(pid) = self.pid else {
            return 0;
        };
        self.system.refresh_processes_specifics(
            ProcessesToUpdate::Some(&[pid]),
            false,
            ProcessRefreshKind::nothing().with_memory(),
        );
        self.system.process(pid).map_or(0, sysinfo::Process::memory)
    }
}

/// The agent process's CPU time so far, all its threads, user and system (microseconds).
///
/// Why not `sysinfo`'s: it reads `/proc/PID/stat`, counted in clock ticks of 10 ms, so
/// an agent under a quota of a hundredth of a CPU read 0% in one second and 200% in the
/// next. The process CPU clock is the scheduler's own sum, to the nanosecond.
fn cpu_time_us() -> Option<u64> {
    let spent = nix::time::clock_gettime(nix::time::ClockId::CLOCK_PROCESS_CPUTIME_ID).ok()?;
    let us = i128::from(spent.tv_sec()) * 1_000_000 + i128::from(spent.tv_nsec()) / 1_000;
    u64::try_from(us).ok()
}

/// CPUs this process may use: its affinity (`available_parallelism` counts it, and a
/// cgroup quota rounded up), or the quota itself when smaller (0.5 = half a CPU).
pub fn cpus_allowed() -> f64 {
    let threads = std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64);
    crate::cpu_quota::cpu_quota().map_or(threads, |quota| quota.min(threads))
}
