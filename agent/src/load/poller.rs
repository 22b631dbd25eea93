//! Keeps a single-thread engine polling for answers instead of sleeping between them.
//!
//! On a closed run against a fast target, the engine's thread runs out of work many times
//! a millisecond and sleeps in `epoll_wait`; the next answer then has to wake it. On
//! loopback that wake-up is paid by the *target's* CPU (the kernel delivers an answer in
//! its sender's context), so an engine that sleeps between answers makes the target slower
//! than a client that does not: with the setup of `bench/load-tools.sh`, nginx spent 6%
//! more CPU per request on the sleeping engine on a quiet machine, and about 25% more while
//! other work kept the client's core busy (docs/benchmarks.md). The poller is a task that
//! yields at once whenever it runs: while it is ready, tokio's current-thread scheduler
//! polls its I/O driver without blocking instead of parking. It is the kernel's
//! `busy_poll`, and bounded like it: it polls only while requests keep starting; after
//! [`POLL_BUDGET`] without one it waits, without polling, until the next request starts.
//!
//! Only for a current-thread runtime: on the multi-thread one, a yielding task keeps a
//! worker busy that cannot take the I/O driver while another worker sleeps in it. And
//! only with a whole CPU: under a cgroup quota below one CPU (a container's CPU limit)
//! the spin is paid out of the requests' own budget ([`crate::cpu_quota`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// How long the poller goes on without a request starting before it waits.
pub const POLL_BUDGET: Duration = Duration::from_micros(50);

#[derive(Debug, Default)]
pub struct Poller {
    /// Set while the poller waits for the next request.
    idle: AtomicBool,
    resume: Notify,
}

impl Poller {
    /// Whether the engine's runtime and CPU are ones the poller helps.
    pub fn applies() -> bool {
        if !Poller::on_current_thread() {
            return false;
        }
        let whole_cpu = crate::cpu_quota::has_whole_cpu();
        if !whole_cpu {
            tracing::debug!(
                cpus = crate::cpu_quota::cpu_quota(),
                "no busy polling: the CPU quota is below one CPU"
            );
        }
        whole_cpu
    }

    /// Whether the caller runs on a current-thread runtime.
    pub fn on_current_thread() -> bool {
        tokio::runtime::Handle::try_current().is_ok_and(|handle| {
            handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread
        })
    }

    /// A worker calls this as it starts a request: a relaxed load, unless the poller waits.
    pub fn request_started(&self) {
        if self.idle.load(Ordering::Relaxed) && self.idle.swap(false, Ordering::Relaxed) {
            self.resume.notify_one();
        }
    }

    pub fn is_idle(&self) -> bool {
        self.idle.load(Ordering::Relaxed)
    }

    /// Polls until `done`, watching `started` (the count of requests started) for progress.
    pub async fn run(&self, started: &AtomicU64, done: &CancellationToken) {
        let mut seen = started.load(Ordering::Relaxed);
        let mut last_progress = Instant::now();
        while !done.is_cancelled() {
            tokio::task::yield_now().await;
            let now_seen = started.load(Ordering::Relaxed);
            if now_seen != seen {
                seen = now_seen;
                last_progress = Instant::now();
                continue;
            }
            if last_progress.elapsed() < POLL_BUDGET {
                continue;
            }
            self.idle.store(true, Ordering::Relaxed);
            // `notify_one` keeps a permit when nobody waits yet, so a request that starts
            // between the store and this wait is not missed.
            tokio::select! {
                () = self.resume.notified() => {}
                () = done.cancelled() => return,
            }
            seen = started.load(Ordering::Relaxed);
            last_progress = Instant::now();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    /// Bounded: yields (and sleeps a millisecond) until `condition` holds, at most 2 s.
    async fn until(condition: impl Fn() -> bool) -> bool {
        for _ in 0..2000 {
            if condition() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        condition()
    }

    #[tokio::test]
    async fn it_waits_without_progress_resumes_on_a_request_and_ends_when_done() {
        assert!(
            Poller::on_current_thread(),
            "#[tokio::test] is a current-thread runtime"
        );
        // Under a CPU quota below one CPU the engine does not start a poller; run by hand
        // here, it works the same.
        assert_eq!(Poller::applies(), crate::cpu_quota::has_whole_cpu());
        let poller = Arc::new(Poller::default());
        let started = Arc::new(AtomicU64::new(0));
        let done = CancellationToken::new();
        let task = tokio::spawn({
            let (poller, started, done) = (poller.clone(), started.clone(), done.clone());
            async move { poller.run(&started, &done).await }
        });
        assert!(until(|| poller.is_idle()).await, "idle without requests");
        started.fetch_add(1, Ordering::Relaxed);
        poller.request_started();
        assert!(!poller.is_idle());
        // Polling again, it goes idle again once requests stop.
        assert!(until(|| poller.is_idle()).await, "idle again");
        done.cancel();
        tokio::time::timeout(Duration::from_secs(2), task)
            .await
            .expect("the poller ends when done")
            .expect("no panic");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn it_does_not_apply_to_the_multi_thread_runtime() {
        assert!(!Poller::on_current_thread());
        assert!(!Poller::applies());
    }
}
