//! trawl-telemetry: logs, traces and metrics, set up the same way for every role.
//!
//! Layout:
//! - [`init`]: the `tracing` subscriber (log lines on stderr, filtered by
//!   `RUST_LOG`), an OpenTelemetry layer exporting spans over OTLP gRPC when
//!   `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is
//!   set, and the Prometheus recorder behind [`metrics_text`]. Without an
//!   endpoint no OpenTelemetry layer is installed at all: nothing is exported and
//!   spans cost what they cost before.
//! - [`propagation`]: W3C `traceparent` in and out of HTTP headers and NATS
//!   message headers, and the trace id of the current span, so one job is one
//!   trace across the API, the scheduler and the workers.
//! - [`metrics`](crate::names): the metric names every role records under.
//! - `testing` (feature `testing`): every logged line captured, for tests.
//!
//! Jobs are sampled whole: the API's span of a submission is sampled with the
//! probability `OTEL_TRACES_SAMPLER_ARG` (by trace id, so by job) unless its
//! caller's trace decides, and every later span of the job follows its parent
//! (`parentbased_traceidratio`, [`DEFAULT_SAMPLE_RATIO`] unless
//! `OTEL_TRACES_SAMPLER` says otherwise). A worker runs the slices of a job left
//! out under [`untraced`]: their spans are never created in the exporting
//! subscriber, so they cost what spans cost without tracing. Trace steps in the
//! store do not depend on sampling.
//!
//! Only trawl's own spans are exported: a per-layer filter keeps the spans of
//! targets starting with `trawl` and drops those of h2, tonic, hyper, sqlx and
//! the other libraries, which would swamp a trace with transport internals.

pub mod http;
pub mod names;
pub mod propagation;
#[cfg(feature = "testing")]
pub mod testing;

use std::sync::OnceLock;
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use tracing::Dispatch;
use tracing::instrument::{WithDispatch, WithSubscriber as _};
use tracing_subscriber::filter::{EnvFilter, LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{Layer as _, fmt};

/// The Prometheus recorder, installed once per process.
static PROMETHEUS: OnceLock<PrometheusHandle> = OnceLock::new();

/// The share of jobs traced when `OTEL_TRACES_SAMPLER` is not set: one in ten,
/// which keeps tracing's cost to a tenth of what full sampling costs
/// (docs/benchmarks.md). `OTEL_TRACES_SAMPLER=parentbased_always_on` traces
/// every job.
pub const DEFAULT_SAMPLE_RATIO: f64 = 0.1;

/// The subscriber of work that is not traced: the log lines, no OpenTelemetry
/// layer. Set by [`init`] when it installs one.
static UNTRACED: OnceLock<Dispatch> = OnceLock::new();

/// `work` set to run without exporting its spans (a slice of a job the sampler
/// left out); its log lines are written as usual. `Err(work)`, as it is, when
/// this process exports no spans: there is nothing to leave out.
pub fn untraced<F: Future>(work: F) -> Result<WithDispatch<F>, F> {
    match UNTRACED.get() {
        Some(d) => Ok(work.with_subscriber(d.clone())),
        None => Err(work),
    }
}

/// The log layer every subscriber of a process writes through.
fn log_layer<S>() -> impl tracing_subscriber::Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    let log_filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    fmt::layer()
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_filter(log_filter)
}

/// What [`init`] set up; [`Telemetry::shutdown`] flushes the spans not yet sent.
#[must_use = "call shutdown() before the process exits, or the last spans are lost"]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Whether spans are exported (an OTLP endpoint is configured).
    pub fn exporting(&self) -> bool {
        self.provider.is_some()
    }

    /// Sends the spans still buffered and stops the exporter. Blocks for at
    /// most the exporter's timeout; call it from outside the async runtime or
    /// from a blocking task.
    pub fn shutdown(self) {
        if let Some(p) = self.provider
            && let Err(e) = p.shutdown()
        {
            eprintln!("warning: the last spans were not exported: {e}");
        }
    }
}

/// The OTLP endpoint for traces, if one is configured (the standard variables).
fn otlp_endpoint() -> Option<String> {
    [
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ]
    .iter()
    .find_map(|k| std::env::var(k).ok().filter(|v| !v.trim().is_empty()))
}

/// The detail of exported traces by default: trawl's spans at info, which per
/// slice are the slice and each tool call. [`tracing::Level::DEBUG`]
/// (`TRAWL_TRACE_LEVEL=debug`) adds a span per upstream HTTP request and per
/// store call: four spans per slice instead of two, and with every job traced
/// about 9 % of throughput instead of 7 % (docs/benchmarks.md).
pub const DEFAULT_TRACE_LEVEL: tracing::Level = tracing::Level::INFO;

/// Sets up logging, tracing and metrics for a process whose role is `service`
/// (`OTEL_SERVICE_NAME` overrides it), exporting trawl's spans at `detail` and
/// above. Must run inside the Tokio runtime: the gRPC exporter and the metrics
/// upkeep live on it. A second call in the same process (tests) keeps the first
/// subscriber and recorder.
pub fn init(service: &str, detail: tracing::Level) -> Telemetry {
    install_metrics();
    let log = log_layer();
    let provider = otlp_endpoint().and_then(|endpoint| match tracer_provider(service) {
        Ok(p) => Some(p),
        Err(e) => {
            eprintln!("warning: no trace export to {endpoint}: {e}");
            None
        }
    });
    let otel = provider.as_ref().map(|p| {
        // Per span, only what a trace reader uses. Busy/idle times would take
        // two clock readings on every poll of an instrumented future; thread,
        // source location and target attributes add bytes to every span; and
        // trawl reads a span's context through the span itself, so it is not
        // activated on every enter.
        tracing_opentelemetry::layer()
            .with_tracer(p.tracer("trawl"))
            .with_tracked_inactivity(false)
            .with_threads(false)
            .with_location(false)
            .with_target(false)
            .with_context_activation(false)
            .with_filter(Targets::new().with_target("trawl", LevelFilter::from_level(detail)))
    });
    let installed = tracing_subscriber::registry()
        .with(log)
        .with(otel)
        .try_init()
        .is_ok();
    if !installed {
        // Someone else's subscriber is in place (a test harness): no span of
        // ours would reach this provider.
        if let Some(p) = provider {
            let _ = p.shutdown();
        }
        return Telemetry { provider: None };
    }
    if provider.is_some() {
        let _ = UNTRACED.set(Dispatch::new(
            tracing_subscriber::registry().with(log_layer()),
        ));
    }
    Telemetry { provider }
}

fn tracer_provider(service: &str) -> Result<SdkTracerProvider, String> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .build()
        .map_err(|e| e.to_string())?;
    let name = std::env::var("OTEL_SERVICE_NAME")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| service.to_owned());
    let builder = SdkTracerProvider::builder();
    // The SDK reads OTEL_TRACES_SAMPLER (and its argument) itself; unset, jobs
    // are sampled at the default ratio, whole.
    let builder = if std::env::var_os("OTEL_TRACES_SAMPLER").is_none() {
        builder.with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            DEFAULT_SAMPLE_RATIO,
        ))))
    } else {
        builder
    };
    Ok(builder
        .with_batch_exporter(exporter)
        .with_resource(Resource::builder().with_service_name(name).build())
        .build())
}

/// Seconds buckets of the latency histograms: 1 ms to 60 s.
const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// Installs the Prometheus recorder as the process's `metrics` recorder, once.
/// Histograms are rendered as Prometheus histograms (buckets), not summaries.
pub fn install_metrics() {
    PROMETHEUS.get_or_init(|| {
        let recorder = match PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_seconds".to_owned()), LATENCY_BUCKETS)
        {
            Ok(b) => b.build_recorder(),
            Err(e) => {
                tracing::warn!(error = %e, "latency buckets refused; histograms become summaries");
                PrometheusBuilder::new().build_recorder()
            }
        };
        let handle = recorder.handle();
        if metrics::set_global_recorder(recorder).is_err() {
            tracing::warn!("a metrics recorder was already installed; /metrics stays empty");
        }
        // Histogram samples are kept until upkeep folds them in.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let h = handle.clone();
            rt.spawn(async move {
                let mut every = tokio::time::interval(Duration::from_secs(5));
                loop {
                    every.tick().await;
                    h.run_upkeep();
                }
            });
        }
        names::describe();
        handle
    });
}

/// The metrics of this process in the Prometheus text format (0.0.4).
pub fn metrics_text() -> String {
    install_metrics();
    PROMETHEUS.get().map(|h| h.render()).unwrap_or_default()
}

/// The content type of [`metrics_text`].
pub const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
