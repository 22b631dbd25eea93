//! `iohr-agent run`: fault start-up, then the link to the controller until a signal.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use iohr_agent::egress::Egress;
use iohr_agent::leases::Leases;
use iohr_agent::link::{self, AgentConfig};
use iohr_agent::load::TargetOptions;
use iohr_agent::metrics;
use iohr_agent::secrets::SecretGrant;
use tokio_util::sync::CancellationToken;

use crate::cli::RunArgs;

pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let RunArgs {
        controller,
        identity,
        environments,
        labels,
        max_concurrent_jobs,
        reconnect_min,
        reconnect_min_ms,
        reconnect_max,
        reconnect_max_ms,
        return_after,
        return_after_secs,
        frame_buffer_mib,
        target_ca,
        metrics_addr,
        secret_env,
        deny_private,
        allow_targets,
        faults,
    } = args;
    // Before any work: what a crashed agent left applied is undone first.
    let faults = faults.config(false).await?;
    if max_concurrent_jobs == 0 {
        bail!("--max-concurrent-jobs must be at least 1");
    }
    let name = std::fs::read_to_string(iohr_certs::AgentIdentityFiles::in_dir(&identity).name())
        .map(|n| n.trim().to_string())
        .unwrap_or_default();
    let config = AgentConfig {
        controllers: controller.clone(),
        identity_dir: identity,
        name,
        environments,
        labels: labels.into_iter().collect::<BTreeMap<_, _>>(),
        max_concurrent_jobs,
        // The older flags, when given, in their own units.
        reconnect_min: reconnect_min_ms.map_or(reconnect_min, Duration::from_millis),
        reconnect_max: reconnect_max_ms.map_or(reconnect_max, Duration::from_millis),
        return_after: Some(return_after_secs.map_or(return_after, Duration::from_secs))
            .filter(|d| !d.is_zero()),
        target_options: TargetOptions {
            extra_ca: target_ca,
            egress: Arc::new(Egress::new(
                deny_private,
                allow_targets,
                controller_addresses(&controller).await,
            )),
        },
        secrets: SecretGrant::Only(secret_env),
        faults: Some(faults),
    };
    let shutdown = CancellationToken::new();
    // At most 4095 MiB (the range above): below u32::MAX bytes.
    let leases = Leases::with_frame_buffer(frame_buffer_mib.saturating_mul(1024 * 1024));
    if let Some(addr) = metrics_addr {
        // Bound before dialling: a taken address fails the start, not a scrape later.
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("binding the metrics address {addr}"))?;
        let bound = listener.local_addr().context("metrics address")?;
        println!("metrics listening on http://{bound}/metrics");
        tokio::spawn(metrics::endpoint::serve(
            listener,
            leases.clone(),
            shutdown.clone(),
        ));
    }
    let agent = tokio::spawn(link::run(config, leases, shutdown.clone()));
    wait_for_signal().await;
    tracing::info!("shutting down");
    shutdown.cancel();
    agent.await.context("agent task")??;
    Ok(())
}

/// The addresses the controllers' host names resolve to now: the deny-list refuses them,
/// so a run cannot reach the controller's other ports from its agent. A name that does not
/// resolve adds nothing (the link reports it when it dials).
async fn controller_addresses(controllers: &[String]) -> Vec<IpAddr> {
    let mut addresses = Vec::new();
    for controller in controllers {
        let Ok((host, port)) = iohr_agent::egress::host_port(controller) else {
            continue;
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        match tokio::net::lookup_host((host, port)).await {
            Ok(resolved) => addresses.extend(resolved.map(|a| a.ip())),
            Err(error) => {
                tracing::warn!(%controller, %error, "resolving the controller for the deny-list")
            }
        }
    }
    addresses
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
