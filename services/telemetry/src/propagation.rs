//! W3C Trace Context (`traceparent`) across process boundaries.
//!
//! The API stores the `traceparent` of its `POST /v1/jobs` span with the job;
//! the scheduler continues the trace from it when it plans, and puts the
//! planning span's `traceparent` on every slice it publishes (a NATS message
//! header); a worker makes each slice's span a child of the span that published
//! it. Outgoing HTTP requests carry the current span's `traceparent`.
//!
//! Without the OpenTelemetry layer (no OTLP endpoint) spans have no trace
//! context: every function here then reads `None` and writes nothing.

use opentelemetry::Context;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator as _};
use opentelemetry::trace::TraceContextExt as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// The header (HTTP) and NATS header name.
pub const TRACEPARENT: &str = "traceparent";

/// One `traceparent` value, as a carrier.
struct One<'a>(Option<&'a str>);

impl Extractor for One<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        (key == TRACEPARENT).then_some(self.0).flatten()
    }
    fn keys(&self) -> Vec<&str> {
        vec![TRACEPARENT]
    }
}

#[derive(Default)]
struct Out(Option<String>);

impl Injector for Out {
    fn set(&mut self, key: &str, value: String) {
        if key == TRACEPARENT {
            self.0 = Some(value);
        }
    }
}

struct Headers<'a>(&'a http::HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }
    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

/// The `traceparent` of `span`, when it belongs to a trace.
pub fn traceparent_of(span: &Span) -> Option<String> {
    let cx = span.context();
    if !cx.span().span_context().is_valid() {
        return None;
    }
    let mut out = Out::default();
    TraceContextPropagator::new().inject_context(&cx, &mut out);
    out.0
}

/// The `traceparent` of the current span.
pub fn current_traceparent() -> Option<String> {
    traceparent_of(&Span::current())
}

/// The trace id and span id (lower-case hex) of the current span, when it
/// belongs to a trace.
pub fn current_ids() -> Option<(String, String)> {
    let cx = Span::current().context();
    let sc = cx.span().span_context().clone();
    sc.is_valid()
        .then(|| (sc.trace_id().to_string(), sc.span_id().to_string()))
}

/// Whether a `traceparent` value names a sampled trace (its `sampled` flag is
/// set). A slice is traced only when its message says so: a job the sampler
/// left out, or one whose planner exported nothing, costs its workers no span.
pub fn is_sampled(traceparent: Option<&str>) -> bool {
    traceparent
        .and_then(|tp| tp.rsplit('-').next())
        .and_then(|flags| u8::from_str_radix(flags, 16).ok())
        .is_some_and(|flags| flags & 1 == 1)
}

/// The trace id in a `traceparent` value (`00-<trace id>-<span id>-<flags>`).
pub fn trace_id_in(traceparent: &str) -> Option<&str> {
    let id = traceparent.split('-').nth(1)?;
    (id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())).then_some(id)
}

/// Makes `span` a child of the span `traceparent` names; an absent or
/// malformed value leaves it a root.
pub fn set_parent(span: &Span, traceparent: Option<&str>) {
    if traceparent.is_none() {
        return;
    }
    link(
        span,
        TraceContextPropagator::new().extract(&One(traceparent)),
    );
}

/// Makes `span` a child of the span named by the request's `traceparent`
/// header, if it has one.
pub fn set_parent_from_headers(span: &Span, headers: &http::HeaderMap) {
    if !headers.contains_key(TRACEPARENT) {
        return;
    }
    link(
        span,
        TraceContextPropagator::new().extract(&Headers(headers)),
    );
}

fn link(span: &Span, cx: Context) {
    if cx.span().span_context().is_valid() {
        // Fails only when the span is already closed or not recorded.
        let _ = span.set_parent(cx);
    }
}

/// Puts the current span's `traceparent` on outgoing request headers.
pub fn inject_headers(headers: &mut http::HeaderMap) {
    if let Some(tp) = current_traceparent()
        && let Ok(v) = http::HeaderValue::from_str(&tp)
    {
        headers.insert(TRACEPARENT, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sampled_flag_is_read_from_a_traceparent() {
        let id = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7";
        assert!(is_sampled(Some(&format!("{id}-01"))));
        assert!(is_sampled(Some(&format!("{id}-03"))));
        assert!(!is_sampled(Some(&format!("{id}-00"))));
        assert!(!is_sampled(Some(&format!("{id}-zz"))));
        assert!(!is_sampled(None));
    }

    #[test]
    fn trace_id_is_read_from_a_traceparent() {
        assert_eq!(
            trace_id_in("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            Some("4bf92f3577b34da6a3ce929d0e0e4736")
        );
        assert_eq!(trace_id_in("00-xyz-00f067aa0ba902b7-01"), None);
        assert_eq!(trace_id_in("garbage"), None);
    }
}
