//! The controller's clock settings. The controller is the only clock: agents are sent
//! relative durations and never compare wall clocks with it.

use std::time::Duration;

/// Long enough for the offers of one round to reach their agents, short enough not to be
/// noticed at a run's start.
const SPLIT_START: Duration = Duration::from_millis(500);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// How often each side sends a heartbeat on the agent link.
    pub heartbeat: Duration,
    /// An agent silent this long is lost: its stream is closed, offers go back to the queue.
    pub suspect_after: Duration,
    /// An agent that has not heard from the controller this long stops its exclusive runs.
    /// After a restart, connected agents get this long to report before anything expires.
    pub lease_ttl: Duration,
    /// A started run of a lost agent ends `error` ("agent lost") this long after the agent
    /// went silent plus `lease_ttl`: longer than the agent's own fence, so a run is never
    /// handed on while the lost agent may still be loading the target.
    pub lease_grace: Duration,
    /// The longest an agent waits between reconnects (it is told in the welcome).
    pub reconnect_max: Duration,
    /// An offer not accepted within this long returns to the queue.
    pub offer_timeout: Duration,
    /// The shares of a split run placed in one round start this long after the round:
    /// each offer says how long its agent waits from receiving it, so the shares start
    /// together although the offers go out one after another.
    pub split_start: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            heartbeat: Duration::from_secs(5),
            suspect_after: Duration::from_secs(15),
            lease_ttl: Duration::from_secs(15),
            lease_grace: Duration::from_secs(15),
            reconnect_max: Duration::from_secs(15),
            offer_timeout: Duration::from_secs(5),
            split_start: SPLIT_START,
        }
    }
}

impl Timing {
    /// Scales every duration from one heartbeat interval, keeping the default ratios.
    pub fn from_heartbeat(heartbeat: Duration) -> Timing {
        Timing {
            heartbeat,
            suspect_after: heartbeat * 3,
            lease_ttl: heartbeat * 3,
            lease_grace: heartbeat * 3,
            reconnect_max: heartbeat * 3,
            offer_timeout: Duration::from_secs(5),
            split_start: SPLIT_START,
        }
    }

    /// After a controller restart, how long the leases found in the store wait for their
    /// agents to come back and report them: one lease period, plus the longest reconnect
    /// wait the agents were told, so a backed-off agent is not declared lost.
    pub fn restart_window(&self) -> Duration {
        self.lease_ttl + self.reconnect_max
    }

    /// How often the dispatcher looks at deadlines.
    pub fn tick(&self) -> Duration {
        (self.heartbeat / 4).clamp(Duration::from_millis(20), Duration::from_millis(500))
    }
}
