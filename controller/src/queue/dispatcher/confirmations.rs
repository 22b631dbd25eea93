//! Production faults runs wait for a person's confirmation, not in a queue; one left
//! unconfirmed past its deadline ends `refused` here.

use iohr_domain::RunStatus;

use super::Dispatcher;
use crate::store::AuditLine;

impl Dispatcher {
    /// Production faults runs unconfirmed past their deadline end `refused`.
    pub(super) async fn lapse_confirmations(&mut self) {
        let lapsed = match self
            .store
            .lapsed_confirmations(crate::store::now_ms())
            .await
        {
            Ok(runs) => runs,
            Err(error) => {
                tracing::warn!(%error, "reading lapsed confirmations failed; retrying next tick");
                return;
            }
        };
        for run in lapsed {
            let reason = "confirmation lapsed";
            // Ended by this call only: every replica looks, one writes the audit line.
            if self
                .end_run_here(&run.id, None, RunStatus::Refused, reason)
                .await
                == Some(true)
            {
                let line = AuditLine {
                    at: 0,
                    actor: "controller".to_string(),
                    action: "run.confirmation_lapsed".to_string(),
                    run_id: Some(run.id.clone()),
                    targets: Some(run.target.clone()),
                    outcome: "refused".to_string(),
                    ..Default::default()
                };
                if let Err(error) = self.store.audit(&run.account_id, &line).await {
                    tracing::warn!(run = %run.id, %error, "writing the lapse's audit line failed");
                }
            }
        }
    }
}
