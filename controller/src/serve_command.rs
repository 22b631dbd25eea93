//! `iohr-controller serve`: its flags, the refusal of plain HTTP off loopback, and the
//! process limits the API's connection bound needs.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use iohr_certs::ControllerPki;
use iohr_controller::http::{self, ApiListenerConfig};

/// Descriptors kept for everything but API connections: the store's pool, the agent
/// link's connections, log files.
const RESERVED_FILES: u64 = 512;

#[derive(Args)]
pub struct ApiArgs {
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub api_addr: SocketAddr,
    /// Serve the Prometheus metrics (GET /metrics, no token) on this address alone,
    /// instead of on the API address.
    #[arg(long, value_name = "ADDR")]
    pub metrics_addr: Option<SocketAddr>,
    /// Serve the API over HTTPS with the controller's own server certificate
    /// (DATA_DIR/pki/server.pem, signed by pki/ca.pem, for the loopback names and init's
    /// --server-name). Clients trust pki/ca.pem (`iohr --ca-cert`).
    #[arg(long, conflicts_with_all = ["api_tls_cert", "api_tls_key", "insecure_http"])]
    pub api_tls: bool,
    /// Serve the API over HTTPS with this PEM certificate chain (needs --api-tls-key).
    #[arg(long, value_name = "FILE", requires = "api_tls_key")]
    pub api_tls_cert: Option<PathBuf>,
    /// The PEM private key of --api-tls-cert.
    #[arg(long, value_name = "FILE", requires = "api_tls_cert")]
    pub api_tls_key: Option<PathBuf>,
    /// Serve plain HTTP on an --api-addr that is not loopback: tokens then cross the
    /// network in clear. Without it such an address is refused unless TLS is on.
    #[arg(long, conflicts_with_all = ["api_tls_cert", "api_tls_key"])]
    pub insecure_http: bool,
    /// Time for a connection's TLS handshake and for each request head (HTTP/1.1: also
    /// the wait for the next request on a kept-alive connection).
    /// 1ms to 1h, default 10s.
    #[arg(long, value_name = "DURATION", default_value = "10s",
          value_parser = iohr_domain::duration::between(Duration::from_millis(1), Duration::from_secs(3600)))]
    pub api_header_timeout: Duration,
    /// The older form of --api-header-timeout, in milliseconds.
    #[arg(long, hide = true, conflicts_with = "api_header_timeout",
          value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    pub api_header_timeout_ms: Option<u64>,
    /// Time a connection may stay open with no request in flight (an HTTP/2 connection
    /// above all; a live stream is never idle).
    /// 1ms to 1d, default 1m.
    #[arg(long, value_name = "DURATION", default_value = "1m",
          value_parser = iohr_domain::duration::between(Duration::from_millis(1), Duration::from_secs(86_400)))]
    pub api_idle_timeout: Duration,
    /// The older form of --api-idle-timeout, in milliseconds.
    #[arg(long, hide = true, conflicts_with = "api_idle_timeout",
          value_parser = clap::value_parser!(u64).range(1..=86_400_000))]
    pub api_idle_timeout_ms: Option<u64>,
    /// API connections open at once; more wait in the listen backlog until one closes.
    /// Lowered to fit the process's limit on open files, which serve raises to its hard
    /// limit.
    #[arg(long, default_value_t = http::DEFAULT_MAX_CONNECTIONS as u64,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub api_max_connections: u64,
    /// A browser origin (scheme://host[:port]) whose pages may call /mcp, besides the
    /// API's own (repeatable); a request with another Origin is refused 403.
    #[arg(long = "mcp-allowed-origin", value_name = "ORIGIN")]
    pub mcp_allowed_origins: Vec<String>,
    /// The tracing UI the console links a second's slowest request to, `{trace_id}`
    /// where its trace id goes (`https://grafana.example/explore?traceId={trace_id}`);
    /// without it the console shows trace ids as text.
    #[arg(long, value_name = "URL")]
    pub trace_url_template: Option<iohr_controller::console::traces::TraceUrl>,
}

impl ApiArgs {
    /// Why these flags cannot serve, if they cannot: plain HTTP off loopback needs
    /// --insecure-http. A usage error, checked before anything is opened.
    pub fn refusal(&self) -> Option<String> {
        let tls = self.api_tls || self.api_tls_cert.is_some();
        (!tls && !self.insecure_http && !self.api_addr.ip().is_loopback()).then(|| {
            format!(
                "--api-addr {} is not a loopback address and the API would be plain HTTP, \
                 sending tokens in clear: add --api-tls (the controller's certificate) or \
                 --api-tls-cert FILE --api-tls-key FILE, or --insecure-http to accept that",
                self.api_addr
            )
        })
    }

    pub fn scheme(&self) -> &'static str {
        if self.api_tls || self.api_tls_cert.is_some() {
            "https"
        } else {
            "http"
        }
    }

    /// The API listener's configuration: TLS files read, the connection bound fitted to
    /// the open-file limit.
    pub fn listener(&self, pki: &ControllerPki) -> anyhow::Result<ApiListenerConfig> {
        let files = match (&self.api_tls_cert, &self.api_tls_key) {
            (Some(cert), Some(key)) => Some((cert.clone(), key.clone())),
            _ if self.api_tls => Some((pki.server_cert(), pki.server_key())),
            _ => None,
        };
        let tls = match files {
            Some((cert, key)) => {
                Some(http::tls::server_config(&cert, &key).context("loading the API certificate")?)
            }
            None => None,
        };
        Ok(ApiListenerConfig {
            tls,
            // The older flags, when given, in their own unit.
            header_timeout: self
                .api_header_timeout_ms
                .map_or(self.api_header_timeout, Duration::from_millis),
            idle_timeout: self
                .api_idle_timeout_ms
                .map_or(self.api_idle_timeout, Duration::from_millis),
            max_connections: fit_to_file_limit(self.api_max_connections)?,
        })
    }
}

/// Raises the soft limit on open files to the hard one, and lowers `wanted` connections
/// to what that limit leaves after [`RESERVED_FILES`].
fn fit_to_file_limit(wanted: u64) -> anyhow::Result<usize> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).context("reading RLIMIT_NOFILE")?;
    let soft = if soft < hard {
        match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => hard,
            Err(error) => {
                tracing::warn!(%error, soft, hard, "could not raise the open-file limit");
                soft
            }
        }
    } else {
        soft
    };
    let room = soft.saturating_sub(RESERVED_FILES);
    if room == 0 {
        bail!("the open-file limit ({soft}) leaves no room for API connections");
    }
    if wanted > room {
        tracing::warn!(
            wanted,
            allowed = room,
            open_file_limit = soft,
            "--api-max-connections lowered to fit the open-file limit"
        );
    }
    Ok(usize::try_from(wanted.min(room)).unwrap_or(usize::MAX))
}
