//! Where comparisons are computed: on blocking threads (a comparison of two long load
//! runs takes 50-130 ms of CPU, too long for the async runtime), at most `concurrency`
//! at once, with at most `queue` more waiting. A caller past that is refused at once
//! rather than left waiting behind work it cannot see the end of; the wait of one that
//! is let in is bounded by the queue's length times one comparison.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

#[derive(Debug, Clone)]
pub struct ComparePool {
    /// Permits for those computing.
    running: Arc<Semaphore>,
    /// Permits for those computing or waiting to.
    admitted: Arc<Semaphore>,
    places: usize,
}

/// Every place is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{0} comparisons are being computed or waiting, the limit")]
pub struct Full(pub usize);

#[derive(Debug, thiserror::Error)]
pub enum Failed {
    #[error("a comparison's thread failed: {0}")]
    Thread(#[from] tokio::task::JoinError),
    #[error("the comparison pool is closed")]
    Closed,
}

/// A place taken in the pool; the comparison runs on [`Admitted::run`].
#[derive(Debug)]
pub struct Admitted {
    running: Arc<Semaphore>,
    place: OwnedSemaphorePermit,
}

impl ComparePool {
    pub fn new(concurrency: usize, queue: usize) -> ComparePool {
        let concurrency = concurrency.max(1);
        let places = concurrency.saturating_add(queue);
        ComparePool {
            running: Arc::new(Semaphore::new(concurrency)),
            admitted: Arc::new(Semaphore::new(places)),
            places,
        }
    }

    /// A place, or `Full` at once. Taken before the inputs are read, so what waiting
    /// callers hold in memory is bounded too.
    pub fn admit(&self) -> Result<Admitted, Full> {
        match self.admitted.clone().try_acquire_owned() {
            Ok(place) => Ok(Admitted {
                running: self.running.clone(),
                place,
            }),
            Err(_) => Err(Full(self.places)),
        }
    }
}

impl Admitted {
    /// Runs `work` on a blocking thread once one of the `concurrency` slots is free. The
    /// permits go with the thread: a caller who hangs up does not free a slot its
    /// comparison still occupies.
    pub async fn run<T: Send + 'static>(
        self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, Failed> {
        let Admitted { running, place } = self;
        let slot = running.acquire_owned().await.map_err(|_| Failed::Closed)?;
        Ok(tokio::task::spawn_blocking(move || {
            let _held = (place, slot);
            work()
        })
        .await?)
    }
}

#[cfg(test)]
mod tests;
