//! The `serve` flags of the outbox: the MQTT broker, the webhook retry schedule, timeout
//! and concurrency, how often the outbox is read.

use std::time::Duration;

use iohr_domain::duration;

use super::deliveries::DeliveryConfig;
use super::egress::AllowRule;
use super::mqtt::BrokerAddr;

/// The retry schedule Standard Webhooks suggests: attempts at once, then 5 s, 5 min,
/// 30 min, 2 h, 5 h, 10 h, 14 h, 20 h and 24 h after the one before (about 3 days).
pub const DEFAULT_RETRY_SCHEDULE: &str = "0s,5s,5m,30m,2h,5h,10h,14h,20h,24h";

/// The delays before each attempt of a delivery, each after the one before; the first is
/// usually 0. A delivery that failed as many times as there are delays is given up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetrySchedule(pub Vec<Duration>);

impl std::str::FromStr for RetrySchedule {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let delays = text
            .split(',')
            .map(|part| {
                humantime::parse_duration(part.trim())
                    .map_err(|e| format!("{:?} is not a duration: {e}", part.trim()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if delays.is_empty() || delays.len() > 50 {
            return Err("give 1 to 50 delays, separated by commas".to_string());
        }
        if delays
            .iter()
            .any(|d| *d > Duration::from_secs(7 * 24 * 3600))
        {
            return Err("a delay of more than 7 days".to_string());
        }
        Ok(RetrySchedule(delays))
    }
}

impl RetrySchedule {
    /// The delay before the attempt after `made` attempts (counted from the last
    /// redelivery), or `None` when the schedule is used up.
    pub fn next_delay(&self, made: i64) -> Option<Duration> {
        usize::try_from(made)
            .ok()
            .and_then(|i| self.0.get(i))
            .copied()
    }
}

#[derive(Debug, Clone, clap::Args)]
pub struct EventsConfig {
    /// Publish every event to this MQTT broker (mqtt://HOST[:PORT], default port 1883) at
    /// QoS 1 on the topic iohr/ACCOUNT/EVENT_TYPE; what the broker missed while it was
    /// away is published on reconnection.
    #[arg(long, value_name = "URL", value_parser = parse_mqtt_url)]
    pub mqtt_url: Option<BrokerAddr>,
    /// Delays before each attempt of a webhook delivery, each after the one before.
    #[arg(long, default_value = DEFAULT_RETRY_SCHEDULE)]
    pub webhook_retry_schedule: RetrySchedule,
    /// Time one webhook attempt may take, answer included (100ms to 2m).
    #[arg(long, value_name = "DURATION", default_value = "10s",
          value_parser = duration::between(Duration::from_millis(100), Duration::from_secs(120)))]
    pub webhook_timeout: Duration,
    /// The older form of --webhook-timeout, in milliseconds.
    #[arg(long, hide = true, conflicts_with = "webhook_timeout",
          value_parser = clap::value_parser!(u64).range(100..=120_000))]
    pub webhook_timeout_ms: Option<u64>,
    /// Webhook attempts in flight at once.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub webhook_concurrency: u32,
    /// Webhook attempts of one account in flight at once: its share of
    /// --webhook-concurrency, so that one account's slow receivers do not hold the rest.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub webhook_concurrency_per_account: u32,
    /// A webhook target the deny-list would refuse but the operator allows: CIDR, IP or
    /// HOST, each with an optional :PORT (repeatable), such as 127.0.0.0/8 or
    /// hooks.internal:8443. By default loopback, link-local, private, unique-local,
    /// unspecified and metadata addresses and names and the controller's own addresses
    /// are refused (docs/security.md).
    #[arg(long = "allow-webhook-target", value_name = "CIDR|HOST[:PORT]")]
    pub allow_webhook_targets: Vec<AllowRule>,
    /// A run target (`executor: cloud`) the deny-list would refuse but the operator's
    /// platform agents allow (their `--allow-target`): CIDR, IP or HOST with an optional
    /// :PORT (repeatable). Without one, a cloud run whose target is a literal address of
    /// the deny-list is refused when it is created (422 `target_not_allowed`); names are
    /// judged by the platform agent as it connects.
    #[arg(long = "allow-cloud-target", value_name = "CIDR|HOST[:PORT]")]
    pub allow_cloud_targets: Vec<AllowRule>,
    /// How often the outbox is read for new events (deliveries, MQTT, the feed; 10ms to
    /// 1m).
    #[arg(long, value_name = "DURATION", default_value = "250ms",
          value_parser = duration::between(Duration::from_millis(10), Duration::from_secs(60)))]
    pub events_poll: Duration,
    /// The older form of --events-poll, in milliseconds.
    #[arg(long, hide = true, conflicts_with = "events_poll",
          value_parser = clap::value_parser!(u64).range(10..=60_000))]
    pub events_poll_ms: Option<u64>,
    /// The forge reporter's (pull request comments and commit statuses).
    #[command(flatten)]
    pub forge: crate::forge::ForgeConfig,
}

fn parse_mqtt_url(text: &str) -> Result<BrokerAddr, String> {
    text.parse()
}

impl Default for EventsConfig {
    fn default() -> Self {
        EventsConfig {
            mqtt_url: None,
            webhook_retry_schedule: RetrySchedule(
                DEFAULT_RETRY_SCHEDULE
                    .split(',')
                    .filter_map(|d| humantime::parse_duration(d).ok())
                    .collect(),
            ),
            webhook_timeout: Duration::from_secs(10),
            webhook_timeout_ms: None,
            webhook_concurrency: 8,
            webhook_concurrency_per_account: 2,
            allow_webhook_targets: Vec::new(),
            allow_cloud_targets: Vec::new(),
            events_poll: Duration::from_millis(250),
            events_poll_ms: None,
            forge: crate::forge::ForgeConfig::default(),
        }
    }
}

impl EventsConfig {
    pub fn poll(&self) -> Duration {
        // The older flag, when given, in its own unit.
        self.events_poll_ms
            .map_or(self.events_poll, Duration::from_millis)
    }

    /// A webhook's (and a forge call's) timeout: the older flag, when given, in its unit.
    pub fn webhook_timeout(&self) -> Duration {
        self.webhook_timeout_ms
            .map_or(self.webhook_timeout, Duration::from_millis)
    }

    pub fn reporter(&self) -> crate::forge::reporter::ReporterConfig {
        crate::forge::reporter::ReporterConfig {
            forge: self.forge.clone(),
            timeout: self.webhook_timeout(),
            poll: self.poll(),
        }
    }

    pub fn deliveries(&self) -> DeliveryConfig {
        DeliveryConfig {
            schedule: self.webhook_retry_schedule.clone(),
            timeout: self.webhook_timeout(),
            concurrency: self.webhook_concurrency as usize,
            per_account: self
                .webhook_concurrency_per_account
                .min(self.webhook_concurrency) as usize,
            poll: self.poll(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_schedule_is_the_standard_webhooks_one_and_ends() {
        let schedule: RetrySchedule = DEFAULT_RETRY_SCHEDULE.parse().unwrap();
        assert_eq!(schedule, EventsConfig::default().webhook_retry_schedule);
        assert_eq!(schedule.next_delay(0), Some(Duration::ZERO));
        assert_eq!(schedule.next_delay(1), Some(Duration::from_secs(5)));
        assert_eq!(schedule.next_delay(9), Some(Duration::from_secs(24 * 3600)));
        assert_eq!(schedule.next_delay(10), None);
        let total: Duration = schedule.0.iter().sum();
        assert_eq!(
            total.as_secs(),
            5 + 300 + 1800 + (2 + 5 + 10 + 14 + 20 + 24) * 3600
        );
    }

    #[test]
    fn bad_schedules_are_refused() {
        assert!("".parse::<RetrySchedule>().is_err());
        assert!("5s,soon".parse::<RetrySchedule>().is_err());
        assert!("8d".parse::<RetrySchedule>().is_err());
        assert_eq!(
            "0s, 100ms".parse::<RetrySchedule>().unwrap().0,
            vec![Duration::ZERO, Duration::from_millis(100)]
        );
    }
}

#[cfg(test)]
mod flag_tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Serve {
        #[command(flatten)]
        events: EventsConfig,
    }

    fn parse(args: &[&str]) -> Result<EventsConfig, clap::Error> {
        Serve::try_parse_from(std::iter::once("serve").chain(args.iter().copied()))
            .map(|s| s.events)
    }

    /// Durations are humantime flags; the older `-ms` flags are still read in their unit,
    /// not both at once, and a range holds for either.
    #[test]
    fn duration_flags_are_humantime_and_the_older_ms_flags_still_read() {
        let defaults = parse(&[]).unwrap();
        assert_eq!(defaults.poll(), Duration::from_millis(250));
        assert_eq!(defaults.deliveries().timeout, Duration::from_secs(10));
        let new = parse(&["--events-poll", "1s", "--webhook-timeout", "30s"]).unwrap();
        assert_eq!(new.poll(), Duration::from_secs(1));
        assert_eq!(new.deliveries().timeout, Duration::from_secs(30));
        let old = parse(&["--events-poll-ms", "1000", "--webhook-timeout-ms", "30000"]).unwrap();
        assert_eq!(old.poll(), new.poll());
        assert_eq!(old.deliveries().timeout, new.deliveries().timeout);
        assert!(parse(&["--events-poll", "1s", "--events-poll-ms", "1000"]).is_err());
        assert!(parse(&["--webhook-timeout", "5m"]).is_err());
        assert!(parse(&["--events-poll", "1"]).is_err());
    }
}
