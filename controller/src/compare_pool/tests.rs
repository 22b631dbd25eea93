use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use super::*;

const WAIT: Duration = Duration::from_secs(10);

type Started = tokio::sync::mpsc::UnboundedSender<()>;

/// Waits for the next job to start (on its blocking thread).
async fn next_start(started: &mut tokio::sync::mpsc::UnboundedReceiver<()>) {
    tokio::time::timeout(WAIT, started.recv())
        .await
        .expect("a job started in time")
        .expect("the job's sender");
}

/// A job that says when it starts and runs until released.
fn held_job(
    started: Started,
    release: mpsc::Receiver<()>,
) -> impl FnOnce() -> u32 + Send + 'static {
    move || {
        let _ = started.send(());
        let _ = release.recv_timeout(WAIT);
        7
    }
}

/// Polls `admit` until a place frees (the blocking thread drops its permits just after
/// its work returns), a bounded number of times.
async fn admit_soon(pool: &ComparePool) -> Admitted {
    for _ in 0..1000 {
        if let Ok(admitted) = pool.admit("a") {
            return admitted;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("no place freed in time");
}

#[tokio::test]
async fn past_the_running_and_the_waiting_places_a_caller_is_refused_at_once() {
    let pool = ComparePool::new(1, 1, 2);
    let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel();
    let (release_a, release_a_rx) = mpsc::channel();
    let a = pool.admit("a").unwrap();
    let a = tokio::spawn(a.run(held_job(started_tx.clone(), release_a_rx)));
    next_start(&mut started).await;
    // B is let in to wait; C finds both places taken.
    let b = pool.admit("b").unwrap();
    assert_eq!(pool.admit("c").unwrap_err(), Full::Total(2));
    let (release_b, release_b_rx) = mpsc::channel();
    let b = tokio::spawn(b.run(held_job(started_tx, release_b_rx)));
    // B waits for A's slot: it has not started.
    assert!(started.try_recv().is_err());
    release_a.send(()).unwrap();
    assert_eq!(a.await.unwrap().unwrap(), 7);
    next_start(&mut started).await;
    release_b.send(()).unwrap();
    assert_eq!(b.await.unwrap().unwrap(), 7);
    let again = admit_soon(&pool).await;
    assert_eq!(again.run(|| 1).await.unwrap(), 1);
}

#[tokio::test]
async fn no_more_than_the_concurrency_compute_at_once() {
    let pool = ComparePool::new(2, 8, 10);
    let active = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel();
    let mut releases = Vec::new();
    let mut jobs = Vec::new();
    for _ in 0..6 {
        let (release, release_rx) = mpsc::channel::<()>();
        releases.push(release);
        let (active, most, started_tx) = (active.clone(), most.clone(), started_tx.clone());
        let admitted = pool.admit("a").unwrap();
        jobs.push(tokio::spawn(admitted.run(move || {
            let now = active.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            let _ = started_tx.send(());
            let _ = release_rx.recv_timeout(WAIT);
            active.fetch_sub(1, Ordering::SeqCst);
        })));
    }
    // Two start and hold their slots; the others wait for one.
    next_start(&mut started).await;
    next_start(&mut started).await;
    assert_eq!(active.load(Ordering::SeqCst), 2);
    for release in &releases {
        release.send(()).unwrap();
    }
    for job in jobs {
        job.await.unwrap().unwrap();
    }
    assert_eq!(most.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_caller_who_hangs_up_does_not_free_the_place_its_comparison_still_holds() {
    let pool = ComparePool::new(1, 0, 1);
    let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel();
    let (release, release_rx) = mpsc::channel();
    let admitted = pool.admit("a").unwrap();
    let caller = tokio::spawn(admitted.run(held_job(started_tx, release_rx)));
    next_start(&mut started).await;
    caller.abort();
    assert!(caller.await.unwrap_err().is_cancelled());
    assert_eq!(pool.admit("b").unwrap_err(), Full::Total(1));
    release.send(()).unwrap();
    let again = admit_soon(&pool).await;
    assert_eq!(again.run(|| 2).await.unwrap(), 2);
}

#[tokio::test]
async fn an_account_at_its_share_leaves_the_other_places_to_others() {
    let pool = ComparePool::new(1, 2, 1);
    let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel();
    let (release, release_rx) = mpsc::channel();
    let a = pool.admit("a").unwrap();
    let a = tokio::spawn(a.run(held_job(started_tx, release_rx)));
    next_start(&mut started).await;
    // A computes: its share is taken, two places are left, and they are B's.
    let refused = pool.admit("a").unwrap_err();
    assert_eq!(refused, Full::Account(1));
    assert_eq!(refused.code(), "too_many_account_compares");
    assert!(
        refused.to_string().contains("already has 1 comparisons"),
        "{refused}"
    );
    let _b = pool.admit("b").unwrap();
    let _c = pool.admit("c").unwrap();
    assert_eq!(pool.admit("d").unwrap_err(), Full::Total(3));
    release.send(()).unwrap();
    assert_eq!(a.await.unwrap().unwrap(), 7);
}

#[test]
fn a_share_is_at_least_one_place_and_one_of_all_is_none() {
    let pool = ComparePool::new(1, 2, 0);
    let _a = pool.admit("a").unwrap();
    assert_eq!(pool.admit("a").unwrap_err(), Full::Account(1));
    let pool = ComparePool::new(1, 1, 10);
    let _a1 = pool.admit("a").unwrap();
    let _a2 = pool.admit("a").unwrap();
    assert_eq!(pool.admit("a").unwrap_err(), Full::Total(2));
}
