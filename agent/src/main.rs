//! `iohr-agent`: run next to targets, take leased runs from the controller, or execute a
//! spec locally without a controller. The flags are in [`cli`], each command in
//! [`commands`].

mod cli;
mod commands;

use clap::Parser;

use cli::{Cli, Command};
use commands::EXIT_USAGE;

fn main() {
    let cli = Cli::parse();
    let one_cpu = std::thread::available_parallelism().is_ok_and(|n| n.get() == 1);
    let runtime = match runtime_for(&cli.command, one_cpu) {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            std::process::exit(EXIT_USAGE);
        }
    };
    if let Err(e) = runtime.block_on(agent_main(cli)) {
        eprintln!("error: {e:#}");
        std::process::exit(EXIT_USAGE);
    }
}

/// Which scheduler a command runs on. `exec` allowed one CPU (`taskset`, a one-CPU
/// cgroup) runs everything on the thread that starts it: the multi-thread scheduler would
/// put one worker beside `block_on`'s thread on that CPU and pay its cross-thread
/// bookkeeping on every wake-up for nothing. The hog child runs no task at all. The `run`
/// daemon keeps the multi-thread scheduler: it serves several leases at once.
fn runtime_for(command: &Command, one_cpu: bool) -> std::io::Result<tokio::runtime::Runtime> {
    let current_thread = match command {
        Command::Exec(_) => one_cpu,
        Command::Hog(_) | Command::Warden(_) | Command::Faults(_) | Command::Enroll(_) => true,
        Command::Run(_) => false,
    };
    if current_thread {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Runtime::new()
    }
}

async fn agent_main(cli: Cli) -> anyhow::Result<()> {
    let level = match &cli.command {
        Command::Exec(args) if args.quiet => "warn",
        _ => "info",
    };
    // Spans are exported by the `run` daemon alone, when the operator sets
    // OTEL_EXPORTER_OTLP_*: `exec` and the helpers have no lease to trace.
    let spans = match &cli.command {
        Command::Run(_) => iohr_telemetry::Config::from_env("iohr-agent")?,
        _ => None,
    };
    iohr_telemetry::init(
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| level.into()),
        spans.as_ref(),
    )?;
    if let Some(spans) = &spans {
        tracing::info!(endpoint = %spans.endpoint, service = %spans.service_name, "exporting spans over OTLP/HTTP");
    }
    match cli.command {
        Command::Run(args) => {
            let ran = commands::run::run(args).await;
            // The last leases' spans go before the process does (bounded).
            iohr_telemetry::flush(std::time::Duration::from_secs(2)).await;
            ran
        }
        Command::Exec(args) => commands::exec::exec(args).await,
        Command::Enroll(args) => commands::enroll::enroll(args).await,
        Command::Hog(hog) => commands::faults::hog(hog),
        Command::Warden(args) => commands::faults::warden(args),
        Command::Faults(command) => commands::faults::admin(command),
    }
}

#[cfg(test)]
mod tests {
    use tokio::runtime::RuntimeFlavor;

    use super::*;

    fn flavor(args: &[&str], one_cpu: bool) -> RuntimeFlavor {
        let cli = Cli::try_parse_from(args).expect("arguments parse");
        runtime_for(&cli.command, one_cpu)
            .expect("runtime")
            .handle()
            .runtime_flavor()
    }

    #[test]
    fn exec_runs_on_its_own_thread_only_when_allowed_one_cpu() {
        let exec = [
            "iohr-agent",
            "exec",
            "--kind",
            "load",
            "--target",
            "http://127.0.0.1:9",
            "--spec-json",
            "{}",
        ];
        assert_eq!(flavor(&exec, true), RuntimeFlavor::CurrentThread);
        assert_eq!(flavor(&exec, false), RuntimeFlavor::MultiThread);
        let run = [
            "iohr-agent",
            "run",
            "--controller",
            "https://127.0.0.1:9",
            "--identity",
            "/nonexistent",
            "--environment",
            "staging",
        ];
        assert_eq!(flavor(&run, true), RuntimeFlavor::MultiThread);
        let hog = [
            "iohr-agent",
            "hog",
            "cpu",
            "--workers",
            "1",
            "--load-percent",
            "10",
            "--until-unix-ms",
            "1",
        ];
        assert_eq!(flavor(&hog, false), RuntimeFlavor::CurrentThread);
    }
}
