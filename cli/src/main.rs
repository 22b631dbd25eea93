//! `iohr`: the command line for reliability runs, a client of the controller's REST API.
//!
//! Exit statuses: 0 done (or the awaited run passed), 1 the awaited run failed,
//! 2 usage, API or transport error, 3 the awaited run ended without a verdict
//! (error, cancelled, refused) or the wait timed out.

mod agents;
mod audit;
mod client;
mod compare;
mod connect;
mod error;
mod feed;
mod findings;
mod follow;
mod forges;
mod gate;
mod mcp;
mod otlp;
mod output;
mod page;
mod report;
mod run;
mod runs;
mod scenarios;
mod schedules;
mod secrets;
mod triggers;
mod webhooks;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

use crate::client::Api;
use crate::error::{Failure, Result};

#[derive(Parser, Debug)]
#[command(
    name = "iohr",
    version,
    about = "Reliability runs from the command line"
)]
pub struct Cli {
    /// The controller's URL, http:// or https://, e.g. http://127.0.0.1:8080.
    #[arg(
        long,
        env = "IOHR_SERVER",
        value_name = "URL",
        global = true,
        help_heading = "Global options"
    )]
    server: Option<String>,
    /// The API token, sent as `Authorization: Bearer`.
    #[arg(
        long,
        env = "IOHR_TOKEN",
        value_name = "T",
        global = true,
        hide_env_values = true,
        help_heading = "Global options"
    )]
    token: Option<String>,
    /// The CA (PEM) an https:// server's certificate must chain to, such as the
    /// controller's DATA_DIR/pki/ca.pem; without it, the system's roots.
    #[arg(
        long,
        env = "IOHR_CA_CERT",
        value_name = "FILE",
        global = true,
        help_heading = "Global options"
    )]
    ca_cert: Option<std::path::PathBuf>,
    /// Machine output: exactly one JSON value on stdout (`runs events`: one per line).
    #[arg(long, global = true, help_heading = "Global options")]
    json: bool,
    #[command(subcommand)]
    command: Top,
}

// One value, parsed once per process: its size does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
enum Top {
    /// Runs, agents and scenarios of the reliability service.
    #[command(subcommand)]
    Reliability(Reliability),
    /// The MCP tools over stdio, for MCP clients that launch a local process (see
    /// docs/mcp.md); stdout carries the protocol. Exits when the client closes stdin.
    Mcp,
    /// Print a shell completion script: `iohr completions bash > /etc/bash_completion.d/iohr`,
    /// `iohr completions zsh > "${fpath[1]}/_iohr"`, `iohr completions fish >
    /// ~/.config/fish/completions/iohr.fish`.
    Completions {
        /// The shell to complete for.
        shell: clap_complete::Shell,
    },
}

#[derive(Subcommand, Debug)]
enum Reliability {
    /// Start a run; with --wait, follow it and exit with its verdict.
    Run(run::RunArgs),
    /// Read, list, cancel and follow runs.
    #[command(subcommand)]
    Runs(runs::RunsCommand),
    /// The account's agents: online, environments, running jobs.
    Agents,
    /// Store scenarios.
    #[command(subcommand)]
    Scenarios(scenarios::ScenariosCommand),
    /// What is different now: two runs of one scenario version, before and after a change
    /// (BEFORE may be `baseline`: the after run's found baseline). Exit status 0 unchanged
    /// or improved, 1 regressed, 2 refused, no baseline, or an error.
    Compare(compare::CompareArgs),
    /// The comparison a CI job fails on: waits for both runs to end, compares them, and
    /// writes markdown (--markdown), a JUnit report (--junit) and, in GitHub Actions, the
    /// job summary and annotations. `--before baseline` takes the after run's found
    /// baseline. Exit status 0 unchanged or improved, 1 regressed, 2 a usage error, 3 no
    /// verdict (a run errored, compare refused, a timeout, no baseline unless
    /// --allow-no-baseline).
    Gate(gate::GateArgs),
    /// Problems runs found (failing checks, broken invariants, error rates, capacity below
    /// its floor), seen again by later runs instead of duplicated: list them (by default),
    /// show one, close one.
    Findings(findings::FindingsArgs),
    /// Who did what: every start, cancel, confirmation, lapse, finding close and halt, newest
    /// first (needs a token with reliability:audit).
    Audit(audit::AuditArgs),
    /// Runs started by a cron expression in UTC: make, list, show, pause, resume, delete.
    #[command(subcommand)]
    Schedules(schedules::SchedulesCommand),
    /// Runs started by a forge's deliveries (a pull request opened or pushed to): make,
    /// list, show, pause, resume, delete, and each trigger's delivery log.
    #[command(subcommand)]
    Triggers(triggers::TriggersCommand),
    /// Stop every queued or running faults run of the account now; each agent undoes its
    /// faults as it stops. Safe to repeat.
    Halt {
        /// Why, for the runs' reason and the audit line.
        #[arg(long)]
        reason: Option<String>,
    },
    /// Webhook subscriptions to the account's events, and their delivery logs.
    #[command(subcommand)]
    Webhooks(webhooks::WebhooksCommand),
    /// Follow the account's events (run finished, finding created), from the first or
    /// after --after SEQ, reconnecting where it left off.
    Events(feed::EventsArgs),
    /// The account's secrets, used in specs as ${secret:NAME}: list them (names and times,
    /// never a value), set one (an admin's token; the value read from standard input or
    /// an environment variable, never from the command line), delete one.
    #[command(subcommand)]
    Secrets(secrets::SecretsCommand),
    /// The account's OpenTelemetry export (OTLP/HTTP): show it with its counts of
    /// exported and dropped frames, set it (headers' values read from environment
    /// variables, never from the command line), delete it.
    #[command(subcommand)]
    Otlp(otlp::OtlpCommand),
    /// Forge credentials (GitHub, GitLab) the controller writes pull request comments and
    /// commit statuses with: set one (an admin's token; read from an environment
    /// variable), list them (never a token), delete one, read the reporter's log.
    #[command(subcommand)]
    Forges(forges::ForgesCommand),
}

/// What every command needs.
pub struct Ctx {
    pub api: Api,
    pub json: bool,
}

fn main() -> ExitCode {
    // Clap prints its own usage errors and exits 2 (0 for --help and --version).
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => return fail(&Failure::usage(format!("cannot start the runtime: {e}"))),
    };
    match runtime.block_on(execute(cli)) {
        Ok(status) => ExitCode::from(status),
        Err(failure) => fail(&failure),
    }
}

fn fail(failure: &Failure) -> ExitCode {
    output::note(&format!("error: {failure}"));
    ExitCode::from(2)
}

async fn execute(cli: Cli) -> Result<u8> {
    // Completions need no server, token or network.
    if let Top::Completions { shell } = cli.command {
        let mut out = Vec::new();
        clap_complete::generate(shell, &mut Cli::command(), "iohr", &mut out);
        output::emit(&String::from_utf8_lossy(&out))?;
        return Ok(0);
    }
    let ctx = Ctx {
        api: Api::new(
            cli.server.as_deref(),
            cli.token.as_deref(),
            cli.ca_cert.as_deref(),
        )?,
        json: cli.json,
    };
    let command = match cli.command {
        Top::Reliability(command) => command,
        Top::Mcp => return mcp::execute(ctx.api).await,
        Top::Completions { .. } => return Ok(0),
    };
    match command {
        Reliability::Run(args) => run::execute(&ctx, args).await,
        Reliability::Runs(command) => runs::execute(&ctx, command).await,
        Reliability::Agents => agents::execute(&ctx).await,
        Reliability::Scenarios(command) => scenarios::execute(&ctx, command).await,
        Reliability::Compare(args) => compare::execute(&ctx, args).await,
        Reliability::Gate(args) => gate::execute(&ctx, args).await,
        Reliability::Findings(args) => findings::execute(&ctx, args).await,
        Reliability::Audit(args) => audit::execute(&ctx, args).await,
        Reliability::Halt { reason } => runs::halt(&ctx, reason).await,
        Reliability::Webhooks(command) => webhooks::execute(&ctx, command).await,
        Reliability::Events(args) => feed::execute(&ctx, args).await,
        Reliability::Schedules(command) => schedules::execute(&ctx, command).await,
        Reliability::Triggers(command) => triggers::execute(&ctx, command).await,
        Reliability::Secrets(command) => secrets::execute(&ctx, command).await,
        Reliability::Otlp(command) => otlp::execute(&ctx, command).await,
        Reliability::Forges(command) => forges::execute(&ctx, command).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::error::ErrorKind;
    use iohr_domain::{Executor, RunKind, RunStatus};
    use serde_json::json;

    fn parse(line: &str) -> std::result::Result<Cli, clap::Error> {
        Cli::try_parse_from(line.split_whitespace())
    }

    #[test]
    fn the_command_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn run_with_a_spec_and_every_option() {
        let cli = parse(
            "iohr reliability run --kind checks --environment staging --target http://127.0.0.1:9 \
             --spec spec.json --executor agent:edge-1 --change core#212 --scenario-name smoke \
             --confirm-within 30m --agents 3 --wait --timeout 30 --json --server http://127.0.0.1:8080 --token t",
        )
        .expect("valid");
        assert!(cli.json);
        assert_eq!(cli.server.as_deref(), Some("http://127.0.0.1:8080"));
        let Top::Reliability(Reliability::Run(args)) = cli.command else {
            panic!("not run: {:?}", cli.command);
        };
        assert_eq!(args.kind, RunKind::Checks);
        assert_eq!(args.executor, Some(Executor::Agent("edge-1".into())));
        assert!(args.wait);
        assert_eq!(args.timeout, std::time::Duration::from_secs(30));
        assert_eq!(args.scenario_name.as_deref(), Some("smoke"));
        assert_eq!(args.confirm_within.as_deref(), Some("30m"));
        assert_eq!(args.agents, Some(3));
    }

    #[test]
    fn run_by_scenario_sends_its_id_and_version() {
        let cli = parse(
            "iohr reliability run --kind checks --environment staging --target http://t \
             --scenario s1 --version sha256:ab",
        )
        .expect("valid");
        let Top::Reliability(Reliability::Run(args)) = cli.command else {
            panic!("not run");
        };
        assert_eq!(
            args.timeout,
            std::time::Duration::from_secs(600),
            "default timeout"
        );
        assert_eq!(
            run::request_body(&args).expect("body"),
            json!({"kind": "checks", "environment": "staging", "target": "http://t",
                   "scenario": {"id": "s1", "version": "sha256:ab"}})
        );
    }

    #[test]
    fn run_refuses_bad_combinations() {
        let base = "iohr reliability run --kind checks --environment staging --target http://t";
        let cases = [
            (String::from(base), ErrorKind::MissingRequiredArgument),
            (
                format!("{base} --spec f --scenario s1 --version v"),
                ErrorKind::ArgumentConflict,
            ),
            (
                format!("{base} --scenario s1"),
                ErrorKind::MissingRequiredArgument,
            ),
            (
                format!("{base} --spec f --timeout 5"),
                ErrorKind::MissingRequiredArgument,
            ),
            (
                format!("{base} --spec f --wait --timeout 0"),
                ErrorKind::ValueValidation,
            ),
            (
                format!("{base} --spec f --executor somewhere"),
                ErrorKind::ValueValidation,
            ),
            (
                format!("{base} --scenario s1 --version v --scenario-name x"),
                ErrorKind::ArgumentConflict,
            ),
            (
                base.replace("checks", "soak") + " --spec f",
                ErrorKind::ValueValidation,
            ),
        ];
        for (line, kind) in cases {
            let err = parse(&line).expect_err(&line);
            assert_eq!(err.kind(), kind, "{line}: {err}");
        }
    }

    #[test]
    fn runs_subcommands_parse() {
        let cli = parse(
            "iohr reliability runs list --status failed --kind checks --environment staging \
             --agent edge-1 --limit 20 --cursor c1",
        )
        .expect("valid");
        let Top::Reliability(Reliability::Runs(runs::RunsCommand::List(args))) = cli.command else {
            panic!("not list");
        };
        assert_eq!(args.status, Some(RunStatus::Failed));
        assert_eq!(args.limit, Some(20));
        assert_eq!(args.cursor.as_deref(), Some("c1"));
        assert!(parse("iohr reliability runs list --limit 0").is_err());
        assert!(parse("iohr reliability runs list --status done").is_err());

        let cli = parse("iohr --json reliability runs events r1 --after 7").expect("valid");
        assert!(cli.json);
        assert!(matches!(
            cli.command,
            Top::Reliability(Reliability::Runs(runs::RunsCommand::Events { ref id, after: Some(7), raw: false }))
                if id == "r1"
        ));
        let cli = parse("iohr reliability runs events r1 --raw").expect("valid");
        assert!(matches!(
            cli.command,
            Top::Reliability(Reliability::Runs(runs::RunsCommand::Events {
                raw: true,
                ..
            }))
        ));
        for line in [
            "iohr reliability runs show r1 --json",
            "iohr reliability runs cancel r1",
            "iohr reliability agents --json",
            "iohr reliability scenarios create --name smoke --kind checks --spec s.json",
        ] {
            parse(line).unwrap_or_else(|e| panic!("{line}: {e}"));
        }
        assert!(parse("iohr reliability runs show").is_err());
    }

    #[test]
    fn findings_list_by_default_and_close_by_id() {
        let cli = parse(
            "iohr reliability findings --status open --scenario smoke --environment staging \
             --limit 5 --cursor c1",
        )
        .expect("valid");
        let Top::Reliability(Reliability::Findings(args)) = cli.command else {
            panic!("not findings");
        };
        assert!(args.command.is_none());
        assert_eq!(
            args.list.status,
            Some(iohr_domain::finding::FindingStatus::Open)
        );
        assert_eq!(args.list.scenario.as_deref(), Some("smoke"));
        let cli = parse("iohr reliability findings close f1 --json").expect("valid");
        assert!(matches!(
            cli.command,
            Top::Reliability(Reliability::Findings(findings::FindingsArgs {
                command: Some(findings::FindingsCommand::Close { ref id }),
                ..
            })) if id == "f1"
        ));
        parse("iohr reliability findings show f1").expect("show");
        parse("iohr reliability findings").expect("list");
        assert!(parse("iohr reliability findings --status resolved").is_err());
        assert!(parse("iohr reliability findings close").is_err());
        assert!(parse("iohr reliability findings --status open close f1").is_err());
    }

    /// Every option and argument of every command says what it is for in `--help`.
    #[test]
    fn every_option_is_described() {
        fn walk(command: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in command.get_arguments() {
                let builtin = matches!(arg.get_id().as_str(), "help" | "version");
                if !builtin && arg.get_help().is_none() && arg.get_long_help().is_none() {
                    missing.push(format!("{path} {}", arg.get_id()));
                }
            }
            for sub in command.get_subcommands() {
                if sub.get_about().is_none() && sub.get_long_about().is_none() {
                    missing.push(format!("{path} {}", sub.get_name()));
                }
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "iohr", &mut missing);
        assert!(missing.is_empty(), "undescribed: {missing:?}");
    }

    #[test]
    fn completions_are_generated_for_each_shell() {
        for shell in ["bash", "zsh", "fish"] {
            let cli = parse(&format!("iohr completions {shell}")).expect("valid");
            let Top::Completions { shell } = cli.command else {
                panic!("not completions");
            };
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "iohr", &mut out);
            let text = String::from_utf8(out).expect("utf-8");
            assert!(text.contains("reliability"), "{shell}: {text}");
        }
        assert!(parse("iohr completions tcsh").is_err());
    }

    #[test]
    fn webhooks_and_events_parse() {
        let cli = parse(
            "iohr reliability webhooks create --url http://127.0.0.1:9/h \
             --event reliability.run.finished --event reliability.finding.created --format slack",
        )
        .expect("valid");
        let Top::Reliability(Reliability::Webhooks(webhooks::WebhooksCommand::Create {
            events,
            format,
            ..
        })) = cli.command
        else {
            panic!("not create");
        };
        assert_eq!(events.len(), 2);
        assert_eq!(format.as_deref(), Some("slack"));
        for line in [
            "iohr reliability webhooks list",
            "iohr reliability webhooks deliveries wh_1 --limit 5 --cursor 9",
            "iohr reliability webhooks redeliver wh_1 evt_1",
            "iohr reliability webhooks delete wh_1",
            "iohr reliability events",
            "iohr --json reliability events --after 3 --count 2",
        ] {
            parse(line).unwrap_or_else(|e| panic!("{line}: {e}"));
        }
        assert!(parse("iohr reliability webhooks create --url http://x").is_err());
        assert!(parse("iohr reliability events --count 0").is_err());
        assert!(parse("iohr reliability webhooks redeliver wh_1").is_err());
    }
}
