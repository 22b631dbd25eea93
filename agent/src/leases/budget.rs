//! The bound on the bytes of frames the agent holds unacknowledged (per agent, over every
//! lease). An executor's frame send waits for room; room comes back as the controller
//! acknowledges frames (or a lease is dropped), when the frame's [`Charge`] drops.

use std::sync::{Arc, Mutex};

use tokio::sync::Semaphore;

/// The default bound: 64 MiB, far more than any kind sends in one lease TTL (so a short
/// absence of the controller slows nothing), and a small part of a load machine's memory.
pub const DEFAULT_FRAME_BUFFER_BYTES: u32 = 64 * 1024 * 1024;

/// What is left of the bound, in bytes (as semaphore permits: FIFO, so a large frame is
/// not overtaken for ever by small ones), and what was taken beyond it.
#[derive(Debug)]
pub struct FrameBudget {
    limit: u32,
    room: Semaphore,
    /// Bytes charged without waiting beyond the room there was; repaid first as charges
    /// drop, before any room comes back.
    owed: Mutex<u64>,
}

/// A frame's share of the bound, given back when it drops.
#[derive(Debug)]
pub struct Charge {
    bytes: u32,
    budget: Arc<FrameBudget>,
}

impl FrameBudget {
    pub fn new(limit: u32) -> Arc<FrameBudget> {
        let limit = limit.max(1);
        Arc::new(FrameBudget {
            limit,
            room: Semaphore::new(limit as usize),
            owed: Mutex::new(0),
        })
    }

    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// Bytes held now (can exceed the limit by what was charged without waiting).
    pub fn used(&self) -> u64 {
        u64::from(self.limit) - self.room.available_permits() as u64 + *self.owed()
    }

    fn owed(&self) -> std::sync::MutexGuard<'_, u64> {
        self.owed
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A frame larger than the whole bound is charged the whole bound: it waits until
    /// nothing else is held, then goes alone.
    fn clamp(&self, bytes: usize) -> u32 {
        u32::try_from(bytes).unwrap_or(u32::MAX).min(self.limit)
    }

    /// Waits until `bytes` fit, in the order senders asked.
    pub async fn charge(self: &Arc<Self>, bytes: usize) -> Charge {
        let bytes = self.clamp(bytes);
        match self.room.acquire_many(bytes).await {
            // The charge gives the room back itself, after paying what is owed.
            Ok(permit) => permit.forget(),
            // Never closed; if it were, nothing would be bounded rather than all stuck.
            Err(_) => return Charge::nothing(self),
        }
        Charge {
            bytes,
            budget: self.clone(),
        }
    }

    /// Charges `bytes` without waiting: what does not fit now is owed. For the few frames
    /// that must not wait (a fault's rollback steps).
    pub fn charge_now(self: &Arc<Self>, bytes: usize) -> Charge {
        let bytes = self.clamp(bytes);
        match self.room.try_acquire_many(bytes) {
            Ok(permit) => permit.forget(),
            Err(_) => *self.owed() += u64::from(bytes),
        }
        Charge {
            bytes,
            budget: self.clone(),
        }
    }
}

impl Charge {
    fn nothing(budget: &Arc<FrameBudget>) -> Charge {
        Charge {
            bytes: 0,
            budget: budget.clone(),
        }
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        let back = {
            let mut owed = self.budget.owed();
            let repaid = owed.min(u64::from(self.bytes));
            *owed -= repaid;
            u64::from(self.bytes) - repaid
        };
        if back > 0 {
            self.budget.room.add_permits(back as usize);
        }
    }
}

#[cfg(test)]
mod tests;
