//! The command line of `iohr-agent`: its commands and their flags.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "iohr-agent", version, about = "The iohr reliability agent")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Hold a stream to the controller and execute the runs it leases.
    Run(RunArgs),
    /// Execute a spec against a target on this machine, without a controller.
    Exec(ExecArgs),
    /// Get this agent's certificate with a one-time enrollment token: the key pair is
    /// made here and never leaves this host; the controller is trusted only if its CA has
    /// the token's (or --ca-fingerprint's) fingerprint.
    Enroll(EnrollArgs),
    /// A fault's hog child (CPU, memory or disk), started by the agent itself.
    #[command(hide = true, subcommand)]
    Hog(iohr_agent::faults::hog::HogCommand),
    /// A fault's warden, started by the agent itself.
    #[command(hide = true)]
    Warden(iohr_agent::faults::warden::watch::WardenArgs),
    /// The fault ledger of a state directory: its open entries and armed wardens, or
    /// undo them all by hand.
    #[command(subcommand)]
    Faults(iohr_agent::faults::warden::admin::FaultsCommand),
}

/// Where faults are allowed and recorded.
#[derive(clap::Args)]
pub struct FaultArgs {
    /// The fault policy (JSON): the ports, processes, directories and hog sizes faults
    /// may touch. Without it an agent applies no fault; `exec` allows the run's own target
    /// port (through the fault proxy) and what the file adds.
    #[arg(long, env = "IOHR_AGENT_POLICY")]
    pub policy: Option<PathBuf>,
    /// Where the agent keeps its fault ledger (default: $XDG_STATE_HOME/iohr-agent, or
    /// ~/.local/state/iohr-agent).
    #[arg(long, env = "IOHR_AGENT_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
}

fn parse_label(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("{text:?} is not KEY=VALUE")),
    }
}

// No doc comment on the argument structs: the variant's is the command's help.
#[derive(clap::Args)]
pub struct RunArgs {
    /// The controller's agent link, e.g. https://127.0.0.1:8443. Repeat it (or separate
    /// with commas) for several controllers of one store: after a failed or ended link the
    /// agent dials the next, and returns to the first once it answers again (see
    /// --return-after-secs). Give agents the replicas in different orders to spread them.
    #[arg(long, env = "IOHR_CONTROLLER", value_delimiter = ',', required = true)]
    pub controller: Vec<String>,
    /// Linked to another controller than its first, the agent tries the first this often
    /// (such as 30s) and, holding no run, moves back to it; 0s: it stays where it is.
    #[arg(long, value_name = "DURATION", default_value = "30s",
          value_parser = iohr_domain::duration::parse)]
    pub return_after: Duration,
    /// The older form of --return-after, in seconds.
    #[arg(long, hide = true, conflicts_with = "return_after")]
    pub return_after_secs: Option<u64>,
    /// The dir `iohr-controller agent-cert --out` wrote (agent.key, agent.pem, ca.pem).
    #[arg(long, env = "IOHR_AGENT_IDENTITY")]
    pub identity: PathBuf,
    /// An environment this agent serves (repeatable).
    #[arg(long = "environment", required = true)]
    pub environments: Vec<String>,
    /// A label KEY=VALUE (repeatable).
    #[arg(long = "label", value_parser = parse_label)]
    pub labels: Vec<(String, String)>,
    #[arg(long, default_value_t = 4)]
    pub max_concurrent_jobs: u32,
    /// The first reconnect wait window, such as 500ms; it doubles up to --reconnect-max.
    #[arg(long, value_name = "DURATION", default_value = "500ms",
          value_parser = iohr_domain::duration::parse)]
    pub reconnect_min: Duration,
    /// The older form of --reconnect-min, in milliseconds.
    #[arg(long, hide = true, conflicts_with = "reconnect_min")]
    pub reconnect_min_ms: Option<u64>,
    /// The longest reconnect wait window, such as 30s.
    #[arg(long, value_name = "DURATION", default_value = "30s",
          value_parser = iohr_domain::duration::parse)]
    pub reconnect_max: Duration,
    /// The older form of --reconnect-max, in milliseconds.
    #[arg(long, hide = true, conflicts_with = "reconnect_max")]
    pub reconnect_max_ms: Option<u64>,
    /// The most MiB of frames held unacknowledged by the controller, over every run;
    /// when full, executors wait (their frames are kept, never dropped).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4095))]
    pub frame_buffer_mib: u32,
    /// PEM roots trusted for https targets besides the system's.
    #[arg(long, env = "IOHR_TARGET_CA")]
    pub target_ca: Option<PathBuf>,
    /// Serve Prometheus metrics at http://ADDR/metrics (no token), e.g. 127.0.0.1:9465.
    /// Off by default: the agent listens on nothing else.
    #[arg(long, value_name = "ADDR", env = "IOHR_AGENT_METRICS_ADDR")]
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Let runs read this environment variable through `${env:NAME}` in their headers and
    /// faults configuration (repeatable): a NAME, or PREFIX_* for every name starting with
    /// PREFIX_. None by default: a run naming any other is refused, and says so. A
    /// platform agent reads none, whatever this says.
    #[arg(long = "secret-env", value_name = "NAME|PREFIX_*")]
    pub secret_env: Vec<iohr_agent::secrets::SecretPattern>,
    /// Hold targets to the deny-list: loopback, link-local, metadata, private (RFC 1918),
    /// shared (RFC 6598), unique-local IPv6 and unspecified addresses, metadata and local
    /// host names, and the controller's addresses, checked on the address a name resolves
    /// to as each connection is made. Always on for a platform agent; off otherwise, so an
    /// agent next to its private targets reaches them.
    #[arg(long)]
    pub deny_private: bool,
    /// Let runs reach this network, address or host name, on one port or any, where the
    /// deny-list would refuse it (repeatable), e.g. 127.0.0.1, 10.0.0.0/8:8080,
    /// [fd00::1]:443, api.internal. A host name is trusted with whatever it resolves to.
    #[arg(long = "allow-target", value_name = "CIDR|HOST[:PORT]")]
    pub allow_targets: Vec<iohr_agent::egress::AllowRule>,
    #[command(flatten)]
    pub faults: FaultArgs,
}

#[derive(clap::Args)]
pub struct ExecArgs {
    #[arg(long)]
    pub kind: String,
    #[arg(long)]
    pub target: String,
    /// The spec file (JSON), or the spec inline with --spec-json.
    #[arg(required_unless_present = "spec_json", conflicts_with = "spec_json")]
    pub spec: Option<PathBuf>,
    /// The spec inline (JSON), instead of the file.
    #[arg(long)]
    pub spec_json: Option<String>,
    /// Scenario: the ops, one per line (blank lines and `#` comments skipped).
    #[arg(long)]
    pub ops_file: Option<PathBuf>,
    /// Validate the spec, print the plan and send nothing (scenario: with the replay
    /// command; faults: what would be applied and how it would be undone).
    #[arg(long)]
    pub dry_run: bool,
    /// Print the outcome as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// No progress display, and only warnings and errors on stderr (RUST_LOG, when
    /// set, still decides the log).
    #[arg(long, short)]
    pub quiet: bool,
    /// Also write the JSON object `--json` prints to FILE (whole: FILE.PID.tmp, then
    /// renamed; a device or pipe such as /dev/stdout is written as it is), whatever
    /// stdout shows.
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// PEM roots trusted for https targets besides the system's.
    #[arg(long, env = "IOHR_TARGET_CA")]
    pub target_ca: Option<PathBuf>,
    /// Load, replay and capacity: run share INDEX (from 0) of COUNT, as one of COUNT
    /// agents splitting the run would (every COUNT-th arrival, the connections split).
    #[arg(long, value_name = "INDEX/COUNT")]
    pub share: Option<iohr_domain::load::Share>,
    #[command(flatten)]
    pub faults: FaultArgs,
}

#[derive(clap::Args)]
pub struct EnrollArgs {
    /// The controller's agent link, e.g. https://controller.example:8443.
    #[arg(long, env = "IOHR_CONTROLLER")]
    pub controller: String,
    /// The enrollment token `iohr-controller agent-token create` printed (one use).
    #[arg(long, env = "IOHR_ENROLL_TOKEN", hide_env_values = true)]
    pub token: String,
    /// Where to write agent.key (made here, mode 0600), agent.pem, ca.pem and agent.name:
    /// the dir `iohr-agent run --identity` reads.
    #[arg(long, env = "IOHR_AGENT_IDENTITY")]
    pub identity: PathBuf,
    /// The SHA-256 of the controller's CA certificate (64 hex digits, optionally after
    /// sha256:), instead of the one in the token.
    #[arg(long)]
    pub ca_fingerprint: Option<String>,
}
