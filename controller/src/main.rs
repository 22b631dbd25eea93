//! `iohr-controller`: initialise, administer and serve the controller.

mod account_allow;
mod account_delete;
mod agent_token;
mod ca_command;
mod serve_command;
mod token_list;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, CommandFactory, Parser, Subcommand};
use iohr_certs::{ControllerPki, Validity};
use iohr_controller::limits::Limits;
use iohr_controller::server::{Outcome, ServeConfig, ServeMode, start};
use iohr_controller::store::{Account, DEFAULT_MAX_RUNNING, PlanChange, Scope, Store, sqlite_url};
use iohr_controller::timing::Timing;
use tokio_util::sync::CancellationToken;

#[derive(Parser)]
#[command(
    name = "iohr-controller",
    version,
    about = "The iohr reliability controller"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Args, Clone)]
pub(crate) struct StoreArgs {
    /// The controller's data dir: certificates in pki/, and the SQLite store unless
    /// --database-url is given.
    #[arg(long, env = "IOHR_DATA_DIR")]
    data_dir: PathBuf,
    /// postgres://... to use PostgreSQL instead of the SQLite file in the data dir.
    #[arg(long, env = "IOHR_DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
}

impl StoreArgs {
    fn url(&self) -> String {
        self.database_url
            .clone()
            .unwrap_or_else(|| sqlite_url(&self.data_dir))
    }
    async fn open(&self) -> anyhow::Result<Store> {
        // 0700 whatever the umask: it holds the store, the CA's key and the secrets key.
        iohr_controller::store::secure_data_dir(&self.data_dir)
            .with_context(|| format!("creating {}", self.data_dir.display()))?;
        Store::open(&self.url()).await.context("opening the store")
    }
}

// `serve`'s flags make its variant large; the command is parsed once, at start.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Create the CA, the server certificate, and the account `default` with a `staging`
    /// and a `production` environment. Safe to run again: what exists is kept.
    Init {
        #[command(flatten)]
        store: StoreArgs,
        /// Another DNS name or address agents dial (loopback names are always included).
        #[arg(long = "server-name")]
        server_names: Vec<String>,
    },
    /// Serve the API and the agent link.
    Serve {
        #[command(flatten)]
        store: StoreArgs,
        #[command(flatten)]
        api: serve_command::ApiArgs,
        #[arg(long, default_value = "127.0.0.1:8443")]
        agent_addr: SocketAddr,
        /// Heartbeat interval on the agent link, such as 5s; suspect time, lease TTL and
        /// grace are three intervals each.
        #[arg(long, value_name = "DURATION", default_value = "5s",
              value_parser = iohr_domain::duration::parse)]
        heartbeat: Duration,
        /// The older form of --heartbeat, in milliseconds.
        #[arg(long, hide = true, conflicts_with = "heartbeat")]
        heartbeat_ms: Option<u64>,
        #[command(flatten)]
        limits: Limits,
        #[command(flatten)]
        events: iohr_controller::outbox::EventsConfig,
        #[command(flatten)]
        retention: iohr_controller::retention::RetentionConfig,
        #[command(flatten)]
        enrollment: iohr_controller::link::enroll::EnrollmentConfig,
        /// On PostgreSQL, wait while another controller serves this store and take over
        /// when it stops (instead of refusing): a standby for failover. Agents list both
        /// controllers (`iohr-agent run --controller A,B`).
        #[arg(long)]
        standby: bool,
        /// On PostgreSQL, serve beside other replicas of this store at once: each serves
        /// the API and its agents' links, runs are placed by whichever replica has a free
        /// agent, and the one holding the store's claim runs the schedules, the outbox
        /// and retention ([docs/deploy.md]).
        #[arg(long, conflicts_with = "standby")]
        replica: bool,
    },
    /// API tokens.
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
    /// Accounts and their environments.
    Account {
        #[command(subcommand)]
        command: AccountCommand,
    },
    /// Issue an agent's client certificate: writes agent.key, agent.pem and ca.pem.
    AgentCert {
        #[command(flatten)]
        store: StoreArgs,
        #[arg(long)]
        account: String,
        #[arg(long)]
        agent: String,
        #[arg(long)]
        out: PathBuf,
        /// The older form of --valid-for, in days (negative makes an expired one, for
        /// tests).
        #[arg(long, hide = true, default_value_t = iohr_certs::AGENT_VALID_DAYS, allow_negative_numbers = true)]
        valid_days: i64,
        /// How long the certificate is valid, such as `90d` or `30s` (default 365d; a short
        /// one shows a renewal, which starts at two thirds of it).
        #[arg(long, value_parser = humantime::parse_duration, conflicts_with = "valid_days")]
        valid_for: Option<std::time::Duration>,
    },
    /// One-time enrollment tokens, with which `iohr-agent enroll` gets its certificate
    /// (its private key never leaves its host).
    AgentToken {
        #[command(subcommand)]
        command: agent_token::AgentTokenCommand,
    },
    /// Agents.
    Agent {
        #[command(subcommand)]
        command: AgentCommand,
    },
    /// The controller's CA: rotate it with an overlap period.
    Ca {
        #[command(subcommand)]
        command: ca_command::CaCommand,
    },
}

#[derive(Subcommand)]
enum TokenCommand {
    /// Create a token; it is printed once, alone on the last line.
    Create {
        #[command(flatten)]
        store: StoreArgs,
        #[arg(long)]
        account: String,
        /// reliability:run, reliability:read, reliability:audit and/or reliability:admin
        /// (a person's only: one of the account's admins, who may use the console before
        /// its owner opens it).
        #[arg(long = "scope", required = true)]
        scopes: Vec<String>,
        /// The person the token belongs to; without it, an API token for automation.
        #[arg(long)]
        person: Option<String>,
    },
    /// List tokens: id, account, scopes, person, created, last used (to the minute) and
    /// whether revoked; never a secret.
    List {
        #[command(flatten)]
        store: StoreArgs,
        /// Only this account's tokens.
        #[arg(long)]
        account: Option<String>,
        /// One JSON array instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a token by its id.
    Revoke {
        #[command(flatten)]
        store: StoreArgs,
        #[arg(long)]
        id: String,
    },
}

#[derive(Subcommand)]
enum AccountCommand {
    /// Create an account with its environments.
    Create {
        #[command(flatten)]
        store: StoreArgs,
        #[arg(long)]
        name: String,
        /// Runs running at once (the plan).
        #[arg(long, default_value_t = DEFAULT_MAX_RUNNING)]
        max_running: i64,
        #[command(flatten)]
        plan: PlanArgs,
        /// The platform account: its agents are "our cloud", shared by all accounts.
        #[arg(long)]
        platform: bool,
        #[arg(long = "environment")]
        environments: Vec<String>,
        /// An environment whose fault runs wait for a person's confirmation.
        #[arg(long = "production-environment")]
        production_environments: Vec<String>,
    },
    /// Change an account's plan: what is given is set, the rest kept.
    SetPlan {
        #[command(flatten)]
        store: StoreArgs,
        #[arg(long)]
        name: String,
        /// Runs running at once.
        #[arg(long)]
        max_running: Option<i64>,
        #[command(flatten)]
        plan: PlanArgs,
    },
    /// Open the account's console to all its people (until then only its admins, people
    /// whose token holds reliability:admin, may sign in).
    OpenConsole {
        #[command(flatten)]
        store: StoreArgs,
        /// The account's name.
        name: String,
    },
    /// Make the account's console admin-only again; other people's pages refuse at once.
    CloseConsole {
        #[command(flatten)]
        store: StoreArgs,
        /// The account's name.
        name: String,
    },
    /// The account's own egress exceptions, beyond serve's: ENTRY... adds (--remove
    /// removes) CIDR|HOST[:PORT] its webhooks and cloud runs may reach; none lists them.
    AllowTarget(account_allow::AllowTargetArgs),
    /// Delete an account and all of it: runs, frames, findings, scenarios, schedules,
    /// webhooks and their logs, events, tokens and enrollment tokens, agents and their
    /// certificates, audit lines.
    /// Asks to confirm by typing the name, unless --yes.
    Delete {
        #[command(flatten)]
        store: StoreArgs,
        /// The account's name.
        name: String,
        /// Do not ask (for scripts).
        #[arg(long)]
        yes: bool,
        /// Who deletes it, for the record that remains (default: $USER).
        #[arg(long)]
        by: Option<String>,
    },
}

/// The plan's limits beyond runs at once (see docs/api.md, "Limits").
#[derive(Args, Clone, Default)]
struct PlanArgs {
    /// Runs queued at once (default 1000); a POST past it is answered 429 too_many_queued.
    #[arg(long, value_parser = clap::value_parser!(i64).range(1..=1_000_000))]
    max_queued: Option<i64>,
    /// The longest a load, replay or capacity run may last, such as 90m (default 1h, at
    /// most 24h).
    #[arg(long, value_parser = parse_max_run_duration)]
    max_run_duration: Option<Duration>,
    /// Units (requests) the account's runs may use per calendar month, UTC (default 0:
    /// unlimited).
    #[arg(long, value_parser = clap::value_parser!(i64).range(0..))]
    units_per_month: Option<i64>,
    // The defaults in the help come from each kind's contract.
    #[arg(
        long = "schedule-floor",
        value_parser = iohr_controller::resources::schedules::floors::parse_override,
        help = format!(
            "How often a schedule of a kind may fire, such as checks=30s (repeatable; default: {})",
            iohr_controller::resources::schedules::floors::defaults_text()
        )
    )]
    schedule_floors: Vec<(iohr_domain::RunKind, Duration)>,
}

impl PlanArgs {
    /// Stores the schedule floors given, beside the account's other plan values.
    async fn set_floors(&self, store: &Store, account: &Account) -> anyhow::Result<()> {
        if self.schedule_floors.is_empty() {
            return Ok(());
        }
        let stored = store.schedule_floors(&account.id).await?;
        let merged = iohr_controller::resources::schedules::floors::merged(
            stored.as_deref(),
            &self.schedule_floors,
        );
        store.set_schedule_floors(&account.id, &merged).await?;
        println!("account {}: schedule floors {merged}", account.name);
        Ok(())
    }
}

impl PlanArgs {
    fn change(&self, max_running: Option<i64>) -> PlanChange {
        PlanChange {
            max_running,
            max_queued: self.max_queued,
            max_run_duration_ms: self
                .max_run_duration
                .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
            units_per_month: self.units_per_month,
        }
    }
}

fn parse_max_run_duration(text: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(text).map_err(|e| format!("{e} (such as 90m)"))?;
    if d < Duration::from_secs(1) || d > Duration::from_secs(24 * 3600) {
        return Err("must be between 1s and 24h (no spec runs longer)".into());
    }
    Ok(d)
}

/// An account's plan in one line.
fn plan_line(account: &Account) -> String {
    let budget = match account.units_per_month {
        0 => "unlimited units".to_string(),
        n => format!("{n} units per month"),
    };
    let longest = Duration::from_millis(u64::try_from(account.max_run_duration_ms).unwrap_or(0));
    format!(
        "{} runs at once, {} queued, load/replay/capacity runs up to {}, {budget}",
        account.max_running,
        account.max_queued,
        humantime::format_duration(longest)
    )
}

#[derive(Subcommand)]
enum AgentCommand {
    /// Remove an agent: its certificates are refused from now on.
    Remove {
        #[command(flatten)]
        store: StoreArgs,
        #[arg(long)]
        account: String,
        #[arg(long)]
        agent: String,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // Spans are exported by the server alone, when the operator sets OTEL_EXPORTER_OTLP_*.
    let spans = match &cli.command {
        Command::Serve { .. } => iohr_telemetry::Config::from_env("iohr-controller")?,
        _ => None,
    };
    iohr_telemetry::init(
        tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| "info,sqlx=warn".into()),
        spans.as_ref(),
    )?;
    if let Some(spans) = &spans {
        tracing::info!(endpoint = %spans.endpoint, service = %spans.service_name, "exporting spans over OTLP/HTTP");
    }
    match cli.command {
        Command::Init {
            store,
            server_names,
        } => init(&store, &server_names).await,
        Command::Serve {
            store,
            api,
            agent_addr,
            heartbeat,
            heartbeat_ms,
            limits,
            events,
            retention,
            enrollment,
            standby,
            replica,
        } => {
            if let Some(refusal) = api.refusal() {
                // A usage error: clap's format and exit status 2.
                Cli::command()
                    .error(clap::error::ErrorKind::ArgumentConflict, refusal)
                    .exit();
            }
            // The last runs' spans go before the process does (bounded: an absent
            // collector does not hold the exit).
            let served = serve(
                store,
                api,
                (
                    agent_addr,
                    heartbeat_ms.map_or(heartbeat, Duration::from_millis),
                    enrollment,
                ),
                limits,
                events,
                retention,
                match (standby, replica) {
                    (true, _) => ServeMode::Standby,
                    (_, true) => ServeMode::Replica,
                    _ => ServeMode::Alone,
                },
            )
            .await;
            iohr_telemetry::flush(Duration::from_secs(2)).await;
            served
        }
        Command::Token {
            command:
                TokenCommand::Create {
                    store,
                    account,
                    scopes,
                    person,
                },
        } => {
            let store = store.open().await?;
            let account = find_account(&store, &account).await?;
            let scopes = scopes
                .iter()
                .map(|s| s.parse::<Scope>().map_err(anyhow::Error::msg))
                .collect::<anyhow::Result<Vec<_>>>()?;
            if person.is_none() && scopes.contains(&Scope::Admin) {
                bail!("reliability:admin is a person's role: give --person");
            }
            let (info, secret) = store
                .create_token(&account, &scopes, person.as_deref())
                .await?;
            let kind = if person.is_some() { "person" } else { "API" };
            println!(
                "{kind} token {} for account {} with {}",
                info.id,
                account.name,
                join(&scopes)
            );
            println!("{secret}");
            Ok(())
        }
        Command::Token {
            command:
                TokenCommand::List {
                    store,
                    account,
                    json,
                },
        } => {
            let store = store.open().await?;
            let account = match account {
                Some(name) => Some(find_account(&store, &name).await?),
                None => None,
            };
            let tokens = store.list_tokens(account.as_ref()).await?;
            print!("{}", token_list::render(&tokens, json));
            Ok(())
        }
        Command::Token {
            command: TokenCommand::Revoke { store, id },
        } => {
            store.open().await?.revoke_token(&id).await?;
            println!("revoked token {id}");
            Ok(())
        }
        Command::Account {
            command:
                AccountCommand::Create {
                    store,
                    name,
                    max_running,
                    plan,
                    platform,
                    environments,
                    production_environments,
                },
        } => {
            let store = store.open().await?;
            let account = store.create_account(&name, max_running, platform).await?;
            let account = store.set_plan(&account.id, &plan.change(None)).await?;
            plan.set_floors(&store, &account).await?;
            for env in &environments {
                store.add_environment(&account.id, env, false).await?;
            }
            for env in &production_environments {
                store.add_environment(&account.id, env, true).await?;
            }
            println!(
                "account {name} created ({}{})",
                plan_line(&account),
                if platform { ", platform" } else { "" }
            );
            Ok(())
        }
        Command::Account {
            command:
                AccountCommand::SetPlan {
                    store,
                    name,
                    max_running,
                    plan,
                },
        } => {
            let change = plan.change(max_running);
            if change == PlanChange::default() && plan.schedule_floors.is_empty() {
                bail!(
                    "give what to change: --max-running, --max-queued, --max-run-duration, --units-per-month or --schedule-floor"
                );
            }
            let store = store.open().await?;
            let account = find_account(&store, &name).await?;
            plan.set_floors(&store, &account).await?;
            let account = store.set_plan(&account.id, &change).await?;
            println!(
                "account {name}: {} (a running controller applies it to new runs)",
                plan_line(&account)
            );
            Ok(())
        }
        Command::Account {
            command: AccountCommand::OpenConsole { store, name },
        } => set_console(store, &name, true).await,
        Command::Account {
            command: AccountCommand::CloseConsole { store, name },
        } => set_console(store, &name, false).await,
        Command::Account {
            command: AccountCommand::AllowTarget(args),
        } => account_allow::run(args).await,
        Command::Account {
            command:
                AccountCommand::Delete {
                    store,
                    name,
                    yes,
                    by,
                },
        } => {
            let store = store.open().await?;
            let account = find_account(&store, &name).await?;
            account_delete::run(&store, &account, yes, by).await
        }
        Command::AgentCert {
            store,
            account,
            agent,
            out,
            valid_days,
            valid_for,
        } => {
            let pki = ControllerPki::in_data_dir(&store.data_dir);
            let store = store.open().await?;
            let account = find_account(&store, &account).await?;
            let validity = valid_for.map_or(Validity::days(valid_days), Validity::lasting);
            let issued = iohr_certs::issue_agent(&pki, &account.name, &agent, &out, validity)
                .context("issuing the agent certificate (has `init` run?)")?;
            store
                .register_agent_cert(&account.id, &agent, &issued.fingerprint)
                .await?;
            println!(
                "agent {agent} of account {}: wrote {}",
                account.name,
                describe(&out)
            );
            println!("certificate sha256 {}", issued.fingerprint);
            Ok(())
        }
        Command::AgentToken { command } => agent_token::run(command).await,
        Command::Ca { command } => ca_command::run(command),
        Command::Agent {
            command:
                AgentCommand::Remove {
                    store,
                    account,
                    agent,
                },
        } => {
            let store = store.open().await?;
            let account = find_account(&store, &account).await?;
            store.remove_agent(&account.id, &agent).await?;
            println!("agent {agent} removed: its certificates are refused from now on");
            Ok(())
        }
    }
}

fn join(scopes: &[Scope]) -> String {
    scopes
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(" ")
}

fn describe(out: &Path) -> String {
    let files = iohr_certs::AgentIdentityFiles::in_dir(out);
    format!(
        "{}, {}, {}",
        files.key().display(),
        files.cert().display(),
        files.ca_cert().display()
    )
}

async fn set_console(store: StoreArgs, name: &str, open: bool) -> anyhow::Result<()> {
    let store = store.open().await?;
    let account = find_account(&store, name).await?;
    store.set_console_open(&account.id, open).await?;
    if open {
        println!("account {name}: the console is open to all its people");
    } else {
        println!("account {name}: the console is admin-only (reliability:admin)");
    }
    Ok(())
}

pub(crate) async fn find_account(
    store: &Store,
    name: &str,
) -> anyhow::Result<iohr_controller::store::Account> {
    match store.account_by_name(name).await? {
        Some(account) => Ok(account),
        None => bail!("no account named {name}"),
    }
}

async fn init(args: &StoreArgs, server_names: &[String]) -> anyhow::Result<()> {
    // Before the CA is written into it: 0700 from the start.
    iohr_controller::store::secure_data_dir(&args.data_dir)
        .with_context(|| format!("creating {}", args.data_dir.display()))?;
    let pki = ControllerPki::in_data_dir(&args.data_dir);
    if pki.exists() {
        println!("CA already in {}: kept", pki.dir.display());
    } else {
        iohr_certs::init(&pki, server_names).context("creating the CA")?;
        println!(
            "created the CA and the server certificate in {}",
            pki.dir.display()
        );
    }
    let store = args.open().await?;
    let (_, made) = iohr_controller::store::sealed::SecretKey::load_or_create(&args.data_dir)
        .context("the key webhook secrets are sealed with")?;
    let key = iohr_controller::store::sealed::key_path(&args.data_dir);
    if made {
        println!(
            "created {} (0600): keep it with the data dir",
            key.display()
        );
    } else {
        println!("{} exists: kept", key.display());
    }
    if store.account_by_name("default").await?.is_none() {
        let account = store
            .create_account("default", DEFAULT_MAX_RUNNING, false)
            .await?;
        store.add_environment(&account.id, "staging", false).await?;
        store
            .add_environment(&account.id, "production", true)
            .await?;
        println!("created account default with environments staging and production");
    } else {
        println!("account default exists: kept");
    }
    println!("store: {}", redact_url(&args.url()));
    Ok(())
}

/// A database URL without its password, for printing.
fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            let user = userinfo.split(':').next().unwrap_or_default();
            format!("{}{user}:***{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_string(),
    }
}

async fn serve(
    args: StoreArgs,
    api: serve_command::ApiArgs,
    // The agent link's: where it listens, its heartbeat, what enrollment signs.
    (agent_addr, heartbeat, enrollment): (
        SocketAddr,
        Duration,
        iohr_controller::link::enroll::EnrollmentConfig,
    ),
    limits: Limits,
    events: iohr_controller::outbox::EventsConfig,
    retention: iohr_controller::retention::RetentionConfig,
    mode: ServeMode,
) -> anyhow::Result<()> {
    let pki = ControllerPki::in_data_dir(&args.data_dir);
    if !pki.exists() {
        bail!(
            "no CA in {}: run `iohr-controller init --data-dir {}` first",
            pki.dir.display(),
            args.data_dir.display()
        );
    }
    let shutdown = CancellationToken::new();
    // A signal stops a standby that is still waiting, too.
    let signalled = shutdown.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutting down");
        signalled.cancel();
    });
    let config = ServeConfig {
        data_dir: args.data_dir.clone(),
        api: api.listener(&pki)?,
        pki,
        database_url: args.url(),
        api_addr: api.api_addr,
        agent_addr,
        metrics_addr: api.metrics_addr,
        timing: Timing::from_heartbeat(heartbeat),
        limits,
        events,
        retention,
        enrollment,
        mode,
        mcp_origins: api.mcp_allowed_origins.clone(),
        trace_url: api.trace_url_template.clone(),
    };
    let Some(running) = start(config, shutdown.clone()).await? else {
        tracing::info!("stopped while standing by");
        return Ok(());
    };
    // Scripts and tests read these two lines for the bound ports.
    println!("api listening on {}://{}", api.scheme(), running.api_addr);
    println!("agent link listening on https://{}", running.agent_addr);
    if let Some(addr) = running.metrics_addr {
        println!("metrics listening on http://{addr}/metrics");
    }
    tracing::info!(api = %running.api_addr, agent_link = %running.agent_addr, "controller serving");
    shutdown.cancelled().await;
    if let Ok(Outcome::ClaimLost) = running.done.await {
        bail!(
            "lost the store's claim (or this replica's seat); stopped so that another controller can take over"
        );
    }
    Ok(())
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
