//! The controller's and agents' own spans (issue 35), so an operator sees the service
//! itself in the OpenTelemetry backend the targets' owners already use: a run's life as
//! spans. Off unless the operator sets the standard OpenTelemetry variables ([`config`]);
//! off, nothing is made, and no span is started on any path.
//!
//! One trace per run, without passing context over the agent link: its trace id is
//! derived from the run id ([`run_trace_id`]: its first half is the run's prefix every
//! request trace of the run starts with, `iohr_domain::trace::run_prefix`), and so is the
//! id of its root `run` span ([`run_span_id`]), which the controller records when the run
//! ends ([`run::record`]). The agent's spans (`tracing` spans through
//! `tracing-opentelemetry`, [`layer`]) take that root as their remote parent
//! ([`run_context`]); so both services' spans of a run form one tree.
//!
//! Export is bounded and never waits ([`export`]): what is lost is counted
//! ([`dropped`]).

pub mod config;
pub mod export;
pub mod run;

use std::sync::OnceLock;

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use sha2::{Digest, Sha256};
use tracing::Subscriber;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::registry::LookupSpan;

pub use config::{Config, ConfigError};
pub use export::{dropped, enabled, exported, flush};

/// The `tracing` target of the spans that are exported; no other span or event is.
pub const TARGET: &str = "iohr_span";

/// Kept for the life of the process: the tracer the `tracing` layer uses lives in it.
static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();
/// The scope recorded spans ([`run::record`]) are named under.
static SCOPE: OnceLock<InstrumentationScope> = OnceLock::new();

/// Starts the export `config` names on the current tokio runtime and returns the
/// `tracing` layer that turns this process's [`TARGET`] spans into exported spans.
pub fn layer<S>(config: &Config) -> Result<impl Layer<S>, export::StartError>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let resource = Resource::builder_empty()
        .with_attributes([
            KeyValue::new("service.name", config.service_name.clone()),
            KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
        ])
        .build();
    export::start(config, &resource)?;
    let provider = SdkTracerProvider::builder()
        .with_span_processor(export::Bounded)
        .with_resource(resource)
        .build();
    let tracer = opentelemetry::trace::TracerProvider::tracer(&provider, "iohr");
    let _ = PROVIDER.set(provider);
    let _ = SCOPE.set(InstrumentationScope::builder("iohr").build());
    Ok(tracing_opentelemetry::layer()
        .with_tracer(tracer)
        // A span's attributes are the run's, not the runtime's.
        .with_tracked_inactivity(false)
        .with_threads(false)
        .with_filter(Targets::new().with_target(TARGET, tracing::Level::TRACE)))
}

/// This process's logs (stderr, as `filter` says, without the exported spans) and, with
/// `config`, its exported spans: the one subscriber both binaries install.
pub fn init(filter: EnvFilter, config: Option<&Config>) -> Result<(), export::StartError> {
    use std::io::IsTerminal;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = match format!("{TARGET}=off").parse() {
        Ok(directive) => filter.add_directive(directive),
        Err(_) => filter,
    };
    let logs = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .with_filter(filter);
    let spans = config.map(layer).transpose()?;
    tracing_subscriber::registry().with(logs).with(spans).init();
    Ok(())
}

fn digest(run_id: &str) -> [u8; 32] {
    Sha256::digest(run_id.as_bytes()).into()
}

/// A run's one trace: the first 16 bytes of sha256(run id), so its first 16 hex digits
/// are the run's prefix (`iohr_domain::trace::run_prefix_hex`).
pub fn run_trace_id(run_id: &str) -> TraceId {
    let mut id = [0u8; 16];
    id.copy_from_slice(&digest(run_id)[..16]);
    TraceId::from_bytes(id)
}

/// The id of a run's root `run` span: the next 8 bytes (never zero, which is invalid).
pub fn run_span_id(run_id: &str) -> SpanId {
    let mut id = [0u8; 8];
    id.copy_from_slice(&digest(run_id)[16..24]);
    if id == [0; 8] {
        id[7] = 1;
    }
    SpanId::from_bytes(id)
}

/// The run's root span as a remote parent, sampled.
pub fn run_span_context(run_id: &str) -> SpanContext {
    SpanContext::new(
        run_trace_id(run_id),
        run_span_id(run_id),
        TraceFlags::SAMPLED,
        true,
        TraceState::NONE,
    )
}

/// The context a service's span of `run_id` is started in, to join the run's trace.
pub fn run_context(run_id: &str) -> opentelemetry::Context {
    opentelemetry::Context::new().with_remote_span_context(run_span_context(run_id))
}

/// Makes `span` (a [`TARGET`] span not yet entered) a child of the run's root span.
pub fn join_run(span: &tracing::Span, run_id: &str) {
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    if let Err(error) = span.set_parent(run_context(run_id)) {
        tracing::debug!(%error, "a span could not join its run's trace");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runs_trace_id_starts_with_its_request_prefix() {
        let id = "01JAB7Q4Y3Z8K2M5N6P7R8S9T0";
        let trace = run_trace_id(id).to_string();
        assert!(
            trace.starts_with(&iohr_domain::trace::run_prefix_hex(id)),
            "{trace}"
        );
        assert_eq!(run_trace_id(id), run_trace_id(id), "derived, not drawn");
        assert_ne!(run_trace_id(id), run_trace_id("another"));
        assert_ne!(run_span_id(id), SpanId::INVALID);
        let context = run_span_context(id);
        assert!(context.is_valid() && context.is_remote() && context.is_sampled());
    }
}
