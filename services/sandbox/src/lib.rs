//! Programmatic tool calling: run model-written JavaScript that calls tools.
//!
//! A model writes the body of an async function, for example
//!
//! ```js
//! const [a, b] = await Promise.all([
//!   tools.web_search({ query: "x1 carbon", geo: "de" }),
//!   tools.web_search({ query: "x1 carbon", geo: "fr" }),
//! ]);
//! console.log(a.results.length, b.results.length);
//! return { de: a.results[0], fr: b.results[0] };
//! ```
//!
//! and [`run`] executes it in an embedded QuickJS engine (through `rquickjs`). Only
//! the script's return value (as JSON) and its console output, both size-capped,
//! go back to the caller; the tool results the script looked at in between never
//! reach the model unless the script returns or logs them.
//!
//! # Layout
//!
//! - `lib.rs` (this file): the public API — [`Limits`], [`Invoke`], [`RunOutput`],
//!   [`SandboxError`] and [`run`], which starts one engine thread per run and waits
//!   for it with a wall-clock timeout.
//! - `engine.rs`: everything that touches QuickJS. It builds a fresh runtime and
//!   context for the run, installs `tools` and `console`, compiles the code as an
//!   async function body, and drives the job queue until the result promise
//!   settles, dispatching tool calls to the tokio runtime and settling their
//!   promises when the results come back.
//! - `output.rs`: the console buffer and the output cap (console plus return
//!   value JSON within [`Limits::max_output_bytes`]).
//!
//! # Threads
//!
//! The JavaScript runs on a dedicated OS thread per run (`std::thread`, not a tokio
//! worker), so a busy loop in a script never stalls the tokio runtime, and the
//! thread gets an explicit stack size (QuickJS's stack limit plus headroom), so the
//! engine's stack check always trips before the real stack ends, whatever stack
//! size the caller's runtime gives its own threads. Each tool call's future is
//! polled once on the engine thread (inside the caller's tokio context, with a
//! no-op waker), so a tool that answers at once costs no thread hop; one that is
//! not ready is spawned as a task on the caller's tokio runtime (a
//! [`tokio::runtime::Handle`]), and the task sends its result back over a channel
//! that the engine thread waits on while the script has nothing else to do. Several calls started before the script awaits them
//! (`Promise.all`) therefore run concurrently. When the run ends, for whatever
//! reason, the tool tasks still in flight are aborted; when the caller drops the
//! [`run`] future, the engine thread is told to stop at its next interrupt check.
//!
//! # Security model
//!
//! Each run gets a new QuickJS runtime, so nothing survives from one script to the
//! next. The context is built from an explicit list of intrinsics: the base objects,
//! `Date`, `RegExp`, `JSON`, `Map`/`Set`, typed arrays and `Promise`, plus the
//! internal compiler needed to compile the script (the global `eval` is removed;
//! the `Function` constructor remains and reaches nothing the script could not
//! already reach). There is no module loader, so `import()` rejects and static
//! `import` does not parse in a function body; there is no `std`/`os` module, no
//! `require`, `fetch`, `XMLHttpRequest`, `process`, timers, `performance`,
//! `WeakRef` or `Proxy`. The only ways out are the `tools` functions (each one a
//! call of the caller's [`Invoke`] with the name and JSON arguments) and `console`,
//! which appends to a capped buffer. Resources are bounded by [`Limits`]: the
//! runtime's memory limit, its stack limit, an interrupt handler that stops the
//! script at the wall-clock deadline or as soon as it exceeds the tool call
//! budget, the same deadline while waiting for tool results, and the output cap.
//! Every failure becomes a [`SandboxError`]; none of them takes the process down.

mod engine;
mod output;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::future::BoxFuture;

/// What a script may use; every limit ends the run with a [`SandboxError`].
#[non_exhaustive]
#[derive(Clone, Debug)]
pub struct Limits {
    /// The QuickJS runtime's memory limit (default 32 MiB).
    pub memory_bytes: usize,
    /// Wall-clock time for the whole run, tool waits included (default 10 s).
    pub deadline: Duration,
    /// Tool calls allowed per run (default 50); one more ends the script.
    pub max_tool_calls: u32,
    /// Cap on the return value JSON plus the console output (default 16 KiB).
    pub max_output_bytes: usize,
    /// QuickJS's stack limit (default 512 KiB).
    pub max_stack_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory_bytes: 32 * 1024 * 1024,
            deadline: Duration::from_secs(10),
            max_tool_calls: 50,
            max_output_bytes: 16 * 1024,
            max_stack_bytes: 512 * 1024,
        }
    }
}

impl Limits {
    pub fn with_memory_bytes(mut self, memory_bytes: usize) -> Self {
        self.memory_bytes = memory_bytes;
        self
    }

    pub fn with_deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    pub fn with_max_tool_calls(mut self, max_tool_calls: u32) -> Self {
        self.max_tool_calls = max_tool_calls;
        self
    }

    pub fn with_max_output_bytes(mut self, max_output_bytes: usize) -> Self {
        self.max_output_bytes = max_output_bytes;
        self
    }

    pub fn with_max_stack_bytes(mut self, max_stack_bytes: usize) -> Self {
        self.max_stack_bytes = max_stack_bytes;
        self
    }
}

/// Calls one tool for the script: name as the script used it (`web_search`), JSON
/// arguments; Ok(JSON result) or Err(message) which becomes a rejected promise (an
/// `Error` the script can catch).
pub type Invoke = Arc<
    dyn Fn(String, serde_json::Value) -> BoxFuture<'static, Result<serde_json::Value, String>>
        + Send
        + Sync,
>;

/// What a script produced.
#[derive(Clone, Debug, PartialEq)]
pub struct RunOutput {
    /// The script's return value as JSON; `undefined` becomes `null`. If its JSON
    /// alone exceeds the output cap, a string with the cut JSON and a note.
    pub value: serde_json::Value,
    /// `console.log/info/warn/error` lines (`warn` and `error` prefixed), newline
    /// terminated, cut with a note when over the cap.
    pub console: String,
    /// Tool calls the script made.
    pub tool_calls: u32,
    /// Whether the value or the console was cut to fit the output cap.
    pub truncated: bool,
}

/// Why a script did not produce a result; the Display text is meant for the model.
#[derive(thiserror::Error, Debug, Clone, PartialEq)]
pub enum SandboxError {
    #[error("the script ran past its {} deadline and was stopped", fmt_duration(*after))]
    Timeout { after: Duration },
    #[error(
        "the script ran out of memory (limit {} MiB) and was stopped; work on less data at once",
        limit / (1024 * 1024)
    )]
    OutOfMemory { limit: usize },
    #[error("the script overflowed the call stack (recursion too deep) and was stopped")]
    StackOverflow,
    #[error(
        "the script called tools more than {limit} times and was stopped; make fewer, broader calls"
    )]
    TooManyToolCalls { limit: u32 },
    #[error("the script threw an uncaught exception: {message}")]
    Thrown { message: String },
    #[error("the script does not parse: {message}")]
    Syntax { message: String },
    #[error("the script's return value cannot be converted to JSON: {message}")]
    NotSerializable { message: String },
    #[error(
        "the script awaited a promise that can never settle (no tool call was in flight) and was stopped"
    )]
    Stuck,
    #[error("the sandbox failed: {message}")]
    Internal { message: String },
}

fn fmt_duration(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else if d < Duration::from_secs(1) {
        format!("{}ms", d.as_millis())
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

/// Extra time the async side waits past the deadline for the engine thread to
/// report; the engine stops itself at the deadline, this only bounds a stuck thread.
const REPORT_GRACE: Duration = Duration::from_millis(500);

/// Runs `code` as the body of an async function with a `tools` object holding one
/// async function per name in `tools`, each calling `invoke`.
///
/// Must be called within a tokio runtime (tool calls are spawned on it).
#[tracing::instrument(skip_all, fields(code_bytes = code.len(), tools = tools.len()))]
pub async fn run(
    code: &str,
    tools: &[String],
    invoke: Invoke,
    limits: &Limits,
) -> Result<RunOutput, SandboxError> {
    let handle = tokio::runtime::Handle::try_current().map_err(|_| SandboxError::Internal {
        message: "sandbox::run called outside a tokio runtime".to_owned(),
    })?;
    let cancelled = Arc::new(AtomicBool::new(false));
    let (events, inbox) = std::sync::mpsc::channel();
    let stop = StopOnDrop {
        cancelled: Arc::clone(&cancelled),
        events: events.clone(),
    };
    let job = engine::Job {
        code: code.to_owned(),
        tools: tools.to_vec(),
        invoke,
        limits: limits.clone(),
        handle,
        cancelled,
        events,
        inbox,
    };
    let (report, result) = tokio::sync::oneshot::channel();
    let stack = limits
        .max_stack_bytes
        .saturating_add(engine::STACK_HEADROOM);
    std::thread::Builder::new()
        .name("trawl-sandbox".to_owned())
        .stack_size(stack)
        .spawn(move || {
            let _ = report.send(engine::execute(job));
        })
        .map_err(|e| SandboxError::Internal {
            message: format!("cannot start the engine thread: {e}"),
        })?;
    // Stops the engine thread if this future is dropped or gives up waiting.
    let _stop = stop;
    let outcome = match tokio::time::timeout(limits.deadline + REPORT_GRACE, result).await {
        Ok(Ok(outcome)) => outcome,
        Ok(Err(_)) => Err(SandboxError::Internal {
            message: "the engine thread ended without a result".to_owned(),
        }),
        Err(_) => Err(SandboxError::Timeout {
            after: limits.deadline,
        }),
    };
    match &outcome {
        Ok(out) => tracing::debug!(
            tool_calls = out.tool_calls,
            truncated = out.truncated,
            "script ran"
        ),
        Err(e) => tracing::debug!(error = %e, "script failed"),
    }
    outcome
}

/// Tells the engine thread to stop: the flag for its interrupt handler, the event
/// to wake it if it is waiting for tool results. Harmless once the run has ended.
struct StopOnDrop {
    cancelled: Arc<AtomicBool>,
    events: std::sync::mpsc::Sender<engine::Event>,
}

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.cancelled.store(true, Ordering::Relaxed);
        let _ = self.events.send(engine::Event::Cancelled);
    }
}
