//! Probes: the hypothesis's, the method's and the rollbacks' HTTP and load activities,
//! each bounded by its budget, and their tolerances judged.

use std::future::Future;

use iohr_domain::faults::ProbeOutput;
use iohr_domain::faults::experiment::{Activity, Provider};
use iohr_domain::faults::journal::{ActivityRun, ActivityStatus, SteadyState, TimelineStep};
use iohr_domain::faults::tolerance::{Judgement, MAX_PROBE_DEPTH, Tolerance};
use serde_json::Value;

use super::super::probe::probe_budget;
use super::state::{Bounded, State, seconds};
use super::{Clock, Driver, PROBE_SLACK, ProbeError};

impl<'a, D: Driver, E: Clock, T: Fn(TimelineStep) + Send + Sync> State<'a, D, E, T> {
    /// Verifies the hypothesis's probes; `None` if cancelled meanwhile.
    pub(super) async fn verify(&mut self, phase: &str, probes: &[Activity]) -> Option<SteadyState> {
        let mut runs = Vec::with_capacity(probes.len());
        for probe in probes {
            let run = self.probe_activity(probe, phase).await?;
            runs.push(run);
        }
        Some(SteadyState {
            steady_state_met: runs.iter().all(|r| r.tolerance_met == Some(true)),
            probes: runs,
        })
    }

    /// Runs a probe (or an HTTP action) and judges its tolerance; `None` if cancelled.
    pub(super) async fn probe_activity(
        &mut self,
        activity: &Activity,
        phase: &str,
    ) -> Option<ActivityRun> {
        let driver = self.run.driver;
        let start = self.run.clock.now_ms();
        let clock = self.run.clock;
        let outcome = match self
            .bounded(probe_within(driver, clock, &activity.provider))
            .await
        {
            Bounded::Cancelled => return None,
            Bounded::Done(outcome) => outcome,
        };
        let (mut run, output) = self.finish_probe(activity, start, outcome);
        if let Some(tolerance) = &activity.tolerance {
            let verdict = match output {
                Some(output) => self.judge(tolerance, output).await?,
                None => Err("the probe gave no output".to_string()),
            };
            run.tolerance_met = Some(verdict.is_ok());
            if let (Err(why), None) = (verdict, &run.exception) {
                run.exception = Some(format!("not within the tolerance: {why}"));
            }
        }
        let status = match (run.tolerance_met, run.status) {
            (Some(true), _) => "met",
            (Some(false), _) => "missed",
            (None, ActivityStatus::Succeeded) => "succeeded",
            (None, ActivityStatus::Failed) => "failed",
        };
        self.step(phase, Some(&activity.name), status, run.exception.clone());
        Some(run)
    }

    /// Judges `output`; a probe tolerance runs its probe, whose own tolerance decides (at
    /// most [`MAX_PROBE_DEPTH`] deep). `None` if cancelled meanwhile.
    pub(super) async fn judge(
        &mut self,
        tolerance: &Tolerance,
        output: Value,
    ) -> Option<Result<(), String>> {
        let driver = self.run.driver;
        let mut tolerance = tolerance;
        let mut output = output;
        for _ in 0..=MAX_PROBE_DEPTH {
            let probe = match tolerance.judge(&output) {
                Judgement::Met => return Some(Ok(())),
                Judgement::Missed(why) => return Some(Err(why)),
                Judgement::RunProbe(probe) => probe,
            };
            let Some(next) = &probe.tolerance else {
                return Some(Err(format!("probe {:?} has no tolerance", probe.name)));
            };
            let clock = self.run.clock;
            output = match self
                .bounded(probe_within(driver, clock, &probe.provider))
                .await
            {
                Bounded::Cancelled => return None,
                Bounded::Done(Ok(out)) => out.for_tolerance(),
                Bounded::Done(Err(e)) => {
                    return Some(Err(format!("probe {:?} failed: {e}", probe.name)));
                }
            };
            tolerance = next;
        }
        Some(Err("probe tolerances nested too deep".into()))
    }

    /// Rollback actions run to their end: a cancel has already happened.
    pub(super) async fn probe_run(
        &mut self,
        activity: &Activity,
        work: impl Future<Output = Result<ProbeOutput, ProbeError>>,
    ) -> ActivityRun {
        let start = self.run.clock.now_ms();
        let outcome = work.await;
        let (run, _) = self.finish_probe(activity, start, outcome);
        let status = match run.status {
            ActivityStatus::Succeeded => "succeeded",
            ActivityStatus::Failed => "failed",
        };
        self.step(
            "rollback",
            Some(&activity.name),
            status,
            run.exception.clone(),
        );
        run
    }

    /// The journal's record of a probe, and its output as tolerances see it (with the
    /// body, which the journal never keeps).
    pub(super) fn finish_probe(
        &self,
        activity: &Activity,
        start: u64,
        outcome: Result<ProbeOutput, ProbeError>,
    ) -> (ActivityRun, Option<Value>) {
        let end = self.run.clock.now_ms();
        let mut run = ActivityRun {
            activity: activity.to_json(),
            status: ActivityStatus::Succeeded,
            start,
            end,
            duration: seconds(start, end),
            output: None,
            exception: None,
            tolerance_met: None,
            ledger_id: None,
            attempts: None,
        };
        match outcome {
            Ok(output) => {
                if let (Provider::Http(h), ProbeOutput::Http { status, .. }) =
                    (&activity.provider, &output)
                    && let Some(expected) = h.expected_status
                    && expected != *status
                {
                    run.status = ActivityStatus::Failed;
                    run.exception = Some(format!("expected status {expected}, got {status}"));
                }
                run.output = Some(output.for_journal());
                let judged = run_ok(&run).then(|| output.for_tolerance());
                (run, judged)
            }
            Err(e) => {
                run.status = ActivityStatus::Failed;
                run.exception = Some(e.0);
                (run, None)
            }
        }
    }
}

fn run_ok(run: &ActivityRun) -> bool {
    run.status == ActivityStatus::Succeeded
}

/// A probe bounded by its own budget plus [`PROBE_SLACK`], whatever the driver does.
pub(super) async fn probe_within<D: Driver, E: Clock>(
    driver: &D,
    clock: &E,
    provider: &Provider,
) -> Result<ProbeOutput, ProbeError> {
    let budget = probe_budget(provider) + PROBE_SLACK;
    tokio::select! {
        out = driver.probe(provider) => out,
        _ = clock.sleep(budget) => Err(ProbeError(format!("no answer within {} s", budget.as_secs_f64()))),
    }
}
