//! A minimal OTLP gRPC trace receiver for `loadtest/deployed_bench.py --otlp`:
//! it stands in for a local collector, accepting every export and keeping only
//! counts, so the benchmark can tell that spans were in fact exported.
//!
//! Listens on 127.0.0.1 (`--bind ADDR` for another address, `--port P`, 0 for
//! any free port) and prints `listening on http://<addr>:<port>` as its first
//! line on stdout. Answers every `TraceService/Export` with success, counting
//! requests, spans and the bytes read from its connections (HTTP/2 and gRPC
//! framing included). On SIGTERM, SIGINT, or when its stdin closes (unless
//! `--no-stdin`), it prints one JSON line `{"spans": N, "requests": M, "bytes":
//! B}` and exits; on SIGUSR1 it prints the same line (the counts so far) and
//! goes on.
//!
//! With `--traces`, the line also has `"traces"`: per trace id (hex), its span
//! count, the services that sent them (`service.name` of the resource) and the
//! `job_id` attributes its spans carry. The deployed-shape check
//! (`deploy/check --live`) runs it as a container in place of Jaeger that way
//! (`--bind 0.0.0.0 --port 4317 --no-stdin --traces`) and reads the line from
//! the container's log after a SIGUSR1.
//!
//! It runs on one thread (a current-thread runtime) and does nothing with what
//! it receives but count, so its CPU is about the least a receiver on the same
//! machine costs: decoding the protobuf and answering.
//!
//!     cargo build --release -p trawl-tests --example otlp_sink
//!     target/release/examples/otlp_sink --port 0

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read as _, Write as _};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use futures_util::StreamExt as _;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{KeyValue, any_value};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tonic::transport::server::{Connected, TcpConnectInfo, TcpIncoming};

#[derive(Default)]
struct Counts {
    spans: AtomicU64,
    requests: AtomicU64,
    bytes: AtomicU64,
    /// Per trace id, with `--traces`; `None` without.
    traces: Option<Mutex<BTreeMap<String, Trace>>>,
}

/// What one trace was sent: spans, the services they came from, the jobs they name.
#[derive(Default, serde::Serialize)]
struct Trace {
    spans: u64,
    services: BTreeSet<String>,
    jobs: BTreeSet<String>,
}

/// The string value of attribute `key`, if it has one.
fn attribute<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a str> {
    attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| match &v.value {
            Some(any_value::Value::StringValue(s)) => Some(s.as_str()),
            _ => None,
        })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

struct Sink(Arc<Counts>);

#[tonic::async_trait]
impl TraceService for Sink {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let spans: usize = request
            .get_ref()
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .map(|s| s.spans.len())
            .sum();
        self.0.spans.fetch_add(spans as u64, Ordering::Relaxed);
        self.0.requests.fetch_add(1, Ordering::Relaxed);
        if let Some(traces) = &self.0.traces {
            let mut traces = traces.lock().unwrap();
            for resource in &request.get_ref().resource_spans {
                let service = resource
                    .resource
                    .as_ref()
                    .and_then(|r| attribute(&r.attributes, "service.name"))
                    .unwrap_or("");
                for span in resource.scope_spans.iter().flat_map(|s| &s.spans) {
                    let trace = traces.entry(hex(&span.trace_id)).or_default();
                    trace.spans += 1;
                    trace.services.insert(service.to_owned());
                    if let Some(job) = attribute(&span.attributes, "job_id") {
                        trace.jobs.insert(job.to_owned());
                    }
                }
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

/// A connection that adds the bytes read from it to a counter.
struct Counted {
    inner: TcpStream,
    counts: Arc<Counts>,
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        let read = buf.filled().len() - before;
        if read > 0 {
            self.counts.bytes.fetch_add(read as u64, Ordering::Relaxed);
        }
        polled
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl Connected for Counted {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

/// The value after `name` on the command line.
fn option(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

fn flag(name: &str) -> bool {
    std::env::args().any(|a| a == name)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let bind: std::net::IpAddr = option("--bind").map_or([127, 0, 0, 1].into(), |v| {
        v.parse().expect("--bind takes an IP address")
    });
    let port: u16 = option("--port").map_or(0, |v| v.parse().expect("--port takes a number"));
    let listener = tokio::net::TcpListener::bind((bind, port))
        .await
        .expect("bind the listening address");
    let addr = listener.local_addr().unwrap();
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "listening on http://{addr}").unwrap();
        out.flush().unwrap();
    }

    let counts = Arc::new(Counts {
        traces: flag("--traces").then(Mutex::default),
        ..Counts::default()
    });
    let incoming = {
        let counts = counts.clone();
        TcpIncoming::from(listener).map(move |conn| {
            conn.map(|inner| Counted {
                inner,
                counts: counts.clone(),
            })
        })
    };
    let service = TraceServiceServer::new(Sink(counts.clone())).max_decoding_message_size(64 << 20);
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(incoming),
    );

    // stdin closing (the parent gone, or done with us) ends the run, as a
    // signal does; read it on a thread of its own, outside the runtime. Not
    // with --no-stdin (a container's stdin is closed from the start).
    let (closed_tx, closed_rx) = tokio::sync::oneshot::channel::<()>();
    let watch_stdin = !flag("--no-stdin");
    std::thread::spawn(move || {
        if !watch_stdin {
            // Keeps the sender, so the run ends on a signal only.
            let _keep = closed_tx;
            loop {
                std::thread::park();
            }
        }
        let mut sink = [0u8; 256];
        let mut stdin = std::io::stdin().lock();
        while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
        let _ = closed_tx.send(());
    });
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .expect("SIGINT handler");
    let mut usr1 = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1())
        .expect("SIGUSR1 handler");
    let mut closed = std::pin::pin!(closed_rx);
    let mut server = std::pin::pin!(server);
    loop {
        tokio::select! {
            _ = usr1.recv() => {
                report(&counts);
                continue;
            }
            _ = term.recv() => {}
            _ = int.recv() => {}
            _ = &mut closed => {}
            r = &mut server => {
                eprintln!("server stopped: {r:?}");
            }
        }
        break;
    }
    report(&counts);
    std::process::exit(0);
}

/// Prints the counts so far as one JSON line on stdout.
fn report(counts: &Counts) {
    let mut line = serde_json::json!({
        "spans": counts.spans.load(Ordering::Relaxed),
        "requests": counts.requests.load(Ordering::Relaxed),
        "bytes": counts.bytes.load(Ordering::Relaxed),
    });
    if let Some(traces) = &counts.traces {
        line["traces"] = serde_json::to_value(&*traces.lock().unwrap()).unwrap();
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").unwrap();
    out.flush().unwrap();
}
