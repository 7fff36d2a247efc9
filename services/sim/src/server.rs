//! Running the simulator: on a listener you bound ([`serve`]) or on a port of its own
//! for tests and demos ([`spawn`]).

use std::future::Future;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::api::{self, App};
use crate::config::SimConfig;
use crate::stats::{Counters, SimStats};

/// Serves the simulator on `listener` until `shutdown` completes, then drains.
///
/// Shutdown, step by step:
/// 1. `shutdown` completes and fires the simulator's own cancellation token;
/// 2. the token is axum's graceful-shutdown signal: it stops accepting connections
///    and closes idle keep-alive connections;
/// 3. the same token ends requests held by a simulated timeout and latency waits, so
///    in-flight requests answer at once instead of holding the drain for `hang`;
/// 4. `serve` returns once every connection is closed.
pub async fn serve(
    listener: TcpListener,
    config: SimConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    let signal = async move {
        tokio::select! {
            () = shutdown => trigger.cancel(),
            () = trigger.cancelled() => {}
        }
    };
    run(
        listener,
        config,
        Arc::new(Counters::default()),
        cancel,
        signal,
    )
    .await
}

async fn run(
    listener: TcpListener,
    config: SimConfig,
    counters: Arc<Counters>,
    cancel: CancellationToken,
    signal: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, faults = ?config.faults, latency = ?config.latency, "Bright Data simulator listening");
    }
    let app = Arc::new(App::new(config, counters, cancel.clone()));
    let result = axum::serve(listener, api::router(app))
        .with_graceful_shutdown(signal)
        .await;
    // If the server stopped on an error, release held requests too.
    cancel.cancel();
    tracing::info!("Bright Data simulator stopped");
    result
}

/// Binds `127.0.0.1:0` and serves the simulator on a tokio task until the handle is
/// shut down or dropped.
pub async fn spawn(config: SimConfig) -> io::Result<SimHandle> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
    let addr = listener.local_addr()?;
    let counters = Arc::new(Counters::default());
    let cancel = CancellationToken::new();
    let signal = cancel.clone().cancelled_owned();
    let task = tokio::spawn(run(
        listener,
        config,
        counters.clone(),
        cancel.clone(),
        signal,
    ));
    Ok(SimHandle {
        addr,
        counters,
        guard: cancel.drop_guard(),
        task,
    })
}

/// A simulator running on its own task. Dropping the handle stops it (without
/// waiting); [`SimHandle::shutdown`] stops it and waits until it has drained.
#[derive(Debug)]
pub struct SimHandle {
    addr: SocketAddr,
    counters: Arc<Counters>,
    guard: DropGuard,
    task: JoinHandle<io::Result<()>>,
}

impl SimHandle {
    /// The address it listens on (always on 127.0.0.1).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`, the base URL to give a Bright Data client.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The counters as they are now, read straight from memory.
    pub fn stats(&self) -> SimStats {
        self.counters.snapshot()
    }

    /// Stops accepting, answers held requests at once, and waits for the server task.
    pub async fn shutdown(self) -> io::Result<()> {
        self.guard.disarm().cancel();
        match self.task.await {
            Ok(result) => result,
            Err(e) => Err(io::Error::other(e)),
        }
    }
}
