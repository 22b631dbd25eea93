//! The verdicts on a split sweep's steps ([`StepVerdicts`]). A share of a split capacity
//! run measures only its part of each step, so it does not judge the step itself: it
//! asks the controller, which merges every share's part and judges the whole, and waits
//! for the answer. Every share then takes the sweep's same next step (the next rate, a
//! bisection, the end), at one instant. Step 0 is the start of a share of any split run:
//! answered once every share holds its lease (`execute.rs`).
//!
//! A leaf of the crate (tokio and std only), like [`crate::run_context`]: the run waits
//! here, and the link (whichever stream is up) asks and delivers.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// The controller's verdict on one step, the same for every share.
#[derive(Debug, Clone, PartialEq)]
pub struct StepVerdict {
    pub step: u32,
    pub meets_slo: bool,
    /// How the merged step broke the SLO, when it did.
    pub reason: String,
    /// How long to wait before the next step, so that the shares start it together.
    pub start_after: Duration,
}

/// The step a run waits for a verdict on, and the verdict when it comes. Cheap to clone:
/// the run and the lease table hold the same one.
#[derive(Debug, Clone)]
pub struct StepVerdicts {
    asking: Arc<watch::Sender<Option<u32>>>,
    answer: Arc<watch::Sender<Option<StepVerdict>>>,
}

impl Default for StepVerdicts {
    fn default() -> StepVerdicts {
        StepVerdicts {
            asking: Arc::new(watch::Sender::new(None)),
            answer: Arc::new(watch::Sender::new(None)),
        }
    }
}

impl StepVerdicts {
    /// The step whose verdict the run waits for: what the link asks the controller.
    pub fn asking(&self) -> Option<u32> {
        *self.asking.borrow()
    }

    /// A verdict from the controller: kept when it is on the step asked, else dropped (a
    /// late answer to an earlier ask). Returns whether it was kept.
    pub fn answer(&self, verdict: StepVerdict) -> bool {
        if self.asking() != Some(verdict.step) {
            return false;
        }
        self.answer.send_replace(Some(verdict));
        true
    }

    /// Asks for the verdict on `step` and waits for it: `None` after `within` without
    /// one, or when `cancel` fires.
    pub async fn ask(
        &self,
        step: u32,
        within: Duration,
        cancel: &CancellationToken,
    ) -> Option<StepVerdict> {
        let mut answers = self.answer.subscribe();
        self.asking.send_replace(Some(step));
        let verdict = tokio::select! {
            got = answers.wait_for(|a| a.as_ref().is_some_and(|v| v.step == step)) => {
                got.ok().and_then(|v| v.clone())
            }
            () = tokio::time::sleep(within) => None,
            () = cancel.cancelled() => None,
        };
        self.asking.send_replace(None);
        verdict
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn verdict(step: u32) -> StepVerdict {
        StepVerdict {
            step,
            meets_slo: step % 2 == 1,
            reason: String::new(),
            start_after: Duration::from_millis(250),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_ask_waits_for_the_verdict_on_its_step_only() {
        let verdicts = StepVerdicts::default();
        assert_eq!(verdicts.asking(), None);
        assert!(!verdicts.answer(verdict(1)), "nothing asked: dropped");
        let asker = verdicts.clone();
        let cancel = CancellationToken::new();
        let waiting =
            tokio::spawn(async move { asker.ask(2, Duration::from_secs(60), &cancel).await });
        while verdicts.asking().is_none() {
            tokio::task::yield_now().await;
        }
        assert_eq!(verdicts.asking(), Some(2));
        assert!(
            !verdicts.answer(verdict(1)),
            "a late answer to step 1 is dropped"
        );
        assert!(verdicts.answer(verdict(2)));
        assert_eq!(waiting.await.unwrap(), Some(verdict(2)));
        assert_eq!(verdicts.asking(), None, "answered: no longer asked");
    }

    #[tokio::test(start_paused = true)]
    async fn an_ask_ends_without_a_verdict_after_its_bound_or_a_cancel() {
        let verdicts = StepVerdicts::default();
        let cancel = CancellationToken::new();
        let started = tokio::time::Instant::now();
        assert_eq!(
            verdicts.ask(1, Duration::from_secs(60), &cancel).await,
            None
        );
        assert_eq!(started.elapsed(), Duration::from_secs(60));
        cancel.cancel();
        assert_eq!(
            verdicts.ask(2, Duration::from_secs(60), &cancel).await,
            None
        );
        assert_eq!(
            started.elapsed(),
            Duration::from_secs(60),
            "a cancel ends it at once"
        );
        assert_eq!(verdicts.asking(), None);
    }
}
