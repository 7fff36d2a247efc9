//! Everything that touches QuickJS: one runtime and context per run, driven on the
//! engine thread until the script's promise settles.
//!
//! The driver loop: run the engine's job queue until it is empty; if the script's
//! promise settled, convert the result; otherwise wait (until the deadline) for a
//! tool result from the tokio side, settle that call's promise, and go round again.
//! `tools.x(args)` converts the arguments to JSON, creates the
//! [`Invoke`](crate::Invoke) future and polls it once here (inside the tokio
//! context); if it is not ready, it is spawned on the tokio runtime and reports
//! back over the channel. Either way the call's promise is settled by the loop,
//! never inside `tools.x` itself.

use std::cell::RefCell;
use std::panic::AssertUnwindSafe;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::task::Poll;
use std::time::Instant;

use futures_util::FutureExt;
use futures_util::task::noop_waker_ref;
use rquickjs::context::intrinsic;
use rquickjs::function::{Opt, Rest};
use rquickjs::promise::PromiseState;
use rquickjs::{
    Array, Coerced, Context, Ctx, Exception, FromJs, Function, IntoJs, Object, Promise, Runtime,
    Value,
};

use crate::output::{self, Console};
use crate::{Invoke, Limits, RunOutput, SandboxError};

/// Stack the engine thread gets on top of QuickJS's own limit: the Rust frames
/// around the engine and C code that runs without the engine's stack check.
pub(crate) const STACK_HEADROOM: usize = 1024 * 1024;

/// The intrinsics the script gets besides the base objects (see the crate doc).
/// `Eval` is the compiler itself (needed to compile the script); the global `eval`
/// function it also adds is removed after setup.
type Intrinsics = (
    intrinsic::Date,
    intrinsic::Eval,
    intrinsic::RegExpCompiler,
    intrinsic::RegExp,
    intrinsic::Json,
    intrinsic::MapSet,
    intrinsic::TypedArrays,
    intrinsic::Promise,
);

/// Builds the `tools` object around the native `call`, the `settle` function the
/// driver uses to resolve or reject a call's promise, and `compile`, which turns
/// the code into an async function, so `await` and `return` work at top level.
/// QuickJS builds that function from source text, so a body can close the function
/// early and put code outside it; that code runs in the same context under the
/// same limits (it reaches nothing more), and if what is left does not return a
/// promise when called, the run ends with a syntax error.
const PRELUDE: &str = r#"(function (call, names) {
  "use strict";
  const pending = new Map();
  const tools = {};
  for (const name of names) {
    const tool = function (args) {
      return new Promise((resolve, reject) => {
        pending.set(call(name, args), [resolve, reject]);
      });
    };
    Object.defineProperty(tool, "name", { value: name });
    tools[name] = tool;
  }
  Object.freeze(tools);
  const settle = (id, ok, value) => {
    const entry = pending.get(id);
    if (entry === undefined) return;
    pending.delete(id);
    if (ok) entry[0](value); else entry[1](new Error(value));
  };
  const AsyncFunction = Object.getPrototypeOf(async function () {}).constructor;
  const compile = (code) => new AsyncFunction(code);
  return [tools, settle, compile];
})"#;

type ToolResult = Result<serde_json::Value, String>;

const TOOL_PANICKED: &str = "the tool failed unexpectedly";

/// One run, as handed to the engine thread.
pub(crate) struct Job {
    pub(crate) code: String,
    pub(crate) tools: Vec<String>,
    pub(crate) invoke: Invoke,
    pub(crate) limits: Limits,
    pub(crate) handle: tokio::runtime::Handle,
    pub(crate) cancelled: Arc<AtomicBool>,
    pub(crate) events: Sender<Event>,
    pub(crate) inbox: Receiver<Event>,
}

/// What wakes the engine thread while the script waits.
pub(crate) enum Event {
    /// A tool call finished.
    Done { id: u32, result: ToolResult },
    /// The caller dropped the run.
    Cancelled,
}

/// Why the script stopped, from the host's side; checked before looking at what
/// the engine reports, since an interrupt surfaces as a plain "interrupted" error.
struct Stop {
    deadline: Instant,
    over_limit: Arc<AtomicBool>,
    cancelled: Arc<AtomicBool>,
    limits: Limits,
}

impl Stop {
    fn requested(&self) -> bool {
        self.over_limit.load(Ordering::Relaxed)
            || self.cancelled.load(Ordering::Relaxed)
            || Instant::now() >= self.deadline
    }

    /// The host-side reason, if any, deadline included.
    fn reason(&self) -> Option<SandboxError> {
        self.forced().or_else(|| {
            (Instant::now() >= self.deadline).then_some(SandboxError::Timeout {
                after: self.limits.deadline,
            })
        })
    }

    /// The reasons that win over a settled promise: the call budget and the caller.
    fn forced(&self) -> Option<SandboxError> {
        if self.over_limit.load(Ordering::Relaxed) {
            Some(SandboxError::TooManyToolCalls {
                limit: self.limits.max_tool_calls,
            })
        } else if self.cancelled.load(Ordering::Relaxed) {
            Some(cancelled())
        } else {
            None
        }
    }
}

fn cancelled() -> SandboxError {
    SandboxError::Internal {
        message: "the run was cancelled by its caller".to_owned(),
    }
}

/// Tool call bookkeeping shared by the native `call` function and the driver.
struct Calls {
    made: u32,
    /// Calls made and not yet settled (spawned or in `ready`).
    in_flight: usize,
    /// Results of calls that completed on their first poll, to settle next.
    ready: Vec<(u32, ToolResult)>,
    tasks: Vec<tokio::task::AbortHandle>,
}

/// Runs one job to completion on the current thread.
pub(crate) fn execute(job: Job) -> Result<RunOutput, SandboxError> {
    let stop = Stop {
        deadline: Instant::now() + job.limits.deadline,
        over_limit: Arc::new(AtomicBool::new(false)),
        cancelled: Arc::clone(&job.cancelled),
        limits: job.limits.clone(),
    };
    let runtime = Runtime::new().map_err(|e| engine_error(e, &job.limits))?;
    runtime.set_memory_limit(job.limits.memory_bytes);
    runtime.set_max_stack_size(job.limits.max_stack_bytes);
    let over_limit = Arc::clone(&stop.over_limit);
    let cancelled = Arc::clone(&stop.cancelled);
    let deadline = stop.deadline;
    // Called by the engine every few thousand operations; `true` raises an
    // uncatchable "interrupted" error. It stays `true` once tripped.
    runtime.set_interrupt_handler(Some(Box::new(move || {
        over_limit.load(Ordering::Relaxed)
            || cancelled.load(Ordering::Relaxed)
            || Instant::now() >= deadline
    })));
    let context =
        Context::custom::<Intrinsics>(&runtime).map_err(|e| engine_error(e, &job.limits))?;
    let calls = Rc::new(RefCell::new(Calls {
        made: 0,
        in_flight: 0,
        ready: Vec::new(),
        tasks: Vec::new(),
    }));
    let outcome = context.with(|ctx| drive(&ctx, &job, &stop, &calls));
    for task in calls.borrow_mut().tasks.drain(..) {
        task.abort();
    }
    outcome
}

fn drive<'js>(
    ctx: &Ctx<'js>,
    job: &Job,
    stop: &Stop,
    calls: &Rc<RefCell<Calls>>,
) -> Result<RunOutput, SandboxError> {
    let fail = |e: rquickjs::Error, stage: Stage| failure(ctx, e, stage, stop);
    let console = Rc::new(RefCell::new(Console::new(job.limits.max_output_bytes)));
    let settle = install(ctx, job, stop, calls, &console).map_err(|e| fail(e, Stage::Setup))?;
    let compile: Function = settle.1;
    let settle: Function = settle.0;

    let func: Function = compile
        .call((job.code.as_str(),))
        .map_err(|e| fail(e, Stage::Compile))?;
    let started: Value = func.call(()).map_err(|e| fail(e, Stage::Run))?;
    if !started.is_promise() {
        return Err(SandboxError::Syntax {
            message: "the code must be the body of an async function; it closes the function early"
                .to_owned(),
        });
    }
    let promise = Promise::from_js(ctx, started).map_err(|e| fail(e, Stage::Run))?;

    loop {
        while !stop.requested() && ctx.execute_pending_job() {}
        if let Some(error) = stop.forced() {
            return Err(error);
        }
        match promise.state() {
            PromiseState::Resolved => {
                let made = calls.borrow().made;
                return finish(ctx, &promise, &console, made, stop);
            }
            PromiseState::Rejected => {
                let error = match promise.result::<Value>() {
                    Some(Err(e)) => e,
                    _ => rquickjs::Error::Exception,
                };
                return Err(fail(error, Stage::Run));
            }
            PromiseState::Pending => {}
        }
        if let Some(error) = stop.reason() {
            return Err(error);
        }
        let ready = std::mem::take(&mut calls.borrow_mut().ready);
        if !ready.is_empty() {
            for (id, result) in ready {
                deliver(ctx, &settle, calls, id, result).map_err(|e| fail(e, Stage::Run))?;
            }
            continue;
        }
        if calls.borrow().in_flight == 0 {
            return Err(SandboxError::Stuck);
        }
        let wait = stop.deadline.saturating_duration_since(Instant::now());
        let (id, result) = match job.inbox.recv_timeout(wait) {
            Ok(Event::Done { id, result }) => (id, result),
            // The caller is gone; the flag is checked at the top of the loop.
            Ok(Event::Cancelled) => continue,
            Err(RecvTimeoutError::Timeout) => {
                return Err(SandboxError::Timeout {
                    after: job.limits.deadline,
                });
            }
            Err(RecvTimeoutError::Disconnected) => {
                return Err(SandboxError::Internal {
                    message: "the tool result channel closed".to_owned(),
                });
            }
        };
        deliver(ctx, &settle, calls, id, result).map_err(|e| fail(e, Stage::Run))?;
        while let Ok(Event::Done { id, result }) = job.inbox.try_recv() {
            deliver(ctx, &settle, calls, id, result).map_err(|e| fail(e, Stage::Run))?;
        }
    }
}

/// Installs `console` and `tools`, removes `eval`; returns `settle` and `compile`.
fn install<'js>(
    ctx: &Ctx<'js>,
    job: &Job,
    stop: &Stop,
    calls: &Rc<RefCell<Calls>>,
    console: &Rc<RefCell<Console>>,
) -> rquickjs::Result<(Function<'js>, Function<'js>)> {
    let globals = ctx.globals();
    let console_object = Object::new(ctx.clone())?;
    for (method, prefix) in [
        ("log", ""),
        ("info", ""),
        ("debug", ""),
        ("warn", "[warn] "),
        ("error", "[error] "),
    ] {
        let console = Rc::clone(console);
        let log = Function::new(
            ctx.clone(),
            move |ctx: Ctx<'js>, args: Rest<Value<'js>>| -> rquickjs::Result<()> {
                let mut line = prefix.to_owned();
                for (i, arg) in args.0.into_iter().enumerate() {
                    if i > 0 {
                        line.push(' ');
                    }
                    line.push_str(&show(&ctx, arg));
                }
                console.borrow_mut().push_line(&line);
                Ok(())
            },
        )?;
        console_object.set(method, log)?;
    }
    globals.set("console", console_object)?;

    let call = {
        let calls = Rc::clone(calls);
        let invoke = Arc::clone(&job.invoke);
        let handle = job.handle.clone();
        let events = job.events.clone();
        let over_limit = Arc::clone(&stop.over_limit);
        let limit = job.limits.max_tool_calls;
        Function::new(
            ctx.clone(),
            move |ctx: Ctx<'js>, name: String, args: Opt<Value<'js>>| -> rquickjs::Result<u32> {
                let id = {
                    let mut calls = calls.borrow_mut();
                    if calls.made >= limit {
                        // Ends the whole run: the interrupt handler and the driver
                        // both see the flag, whatever the script does with this error.
                        over_limit.store(true, Ordering::Relaxed);
                        return Err(Exception::throw_internal(
                            &ctx,
                            &format!("tools.{name}: more than {limit} tool calls"),
                        ));
                    }
                    calls.made += 1;
                    calls.made
                };
                let args = to_json_argument(&ctx, &name, args.0)?;
                let mut future = invoke(name, args);
                // Fast path: one poll here, inside the tokio context, with a waker
                // that does nothing. A tool that answers at once (a cache hit) is
                // settled by the driver without a round trip through the runtime; any
                // other is spawned, and the task polls it again with a real waker.
                let first = {
                    let _runtime = handle.enter();
                    let mut cx = std::task::Context::from_waker(noop_waker_ref());
                    std::panic::catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(&mut cx)))
                };
                let mut calls = calls.borrow_mut();
                calls.in_flight += 1;
                match first {
                    Ok(Poll::Ready(result)) => calls.ready.push((id, result)),
                    Err(_) => calls.ready.push((id, Err(TOOL_PANICKED.to_owned()))),
                    Ok(Poll::Pending) => {
                        let events = events.clone();
                        let task = handle.spawn(async move {
                            let result = AssertUnwindSafe(future)
                                .catch_unwind()
                                .await
                                .unwrap_or_else(|_| Err(TOOL_PANICKED.to_owned()));
                            let _ = events.send(Event::Done { id, result });
                        });
                        calls.tasks.push(task.abort_handle());
                    }
                }
                Ok(id)
            },
        )?
    };

    let prelude: Function = ctx.eval(PRELUDE)?;
    let parts: Array = prelude.call((call, job.tools.clone()))?;
    let tools: Value = parts.get(0)?;
    let settle: Function = parts.get(1)?;
    let compile: Function = parts.get(2)?;
    globals.set("tools", tools)?;
    globals.remove("eval")?;
    Ok((settle, compile))
}

/// Converts a tool call's argument to JSON; `undefined` (no argument) is `{}`.
fn to_json_argument<'js>(
    ctx: &Ctx<'js>,
    name: &str,
    args: Option<Value<'js>>,
) -> rquickjs::Result<serde_json::Value> {
    let Some(args) = args.filter(|a| !a.is_undefined()) else {
        return Ok(serde_json::Value::Object(serde_json::Map::new()));
    };
    let text = match ctx.json_stringify(args) {
        Ok(Some(text)) => text.to_string()?,
        Ok(None) => {
            return Err(Exception::throw_type(
                ctx,
                &format!(
                    "tools.{name}: the argument cannot be converted to JSON (a function or symbol)"
                ),
            ));
        }
        Err(rquickjs::Error::Exception) => {
            let error = describe(ctx, ctx.catch());
            return Err(Exception::throw_type(
                ctx,
                &format!(
                    "tools.{name}: the argument cannot be converted to JSON: {}",
                    error.headline()
                ),
            ));
        }
        Err(e) => return Err(e),
    };
    serde_json::from_str(&text).map_err(|e| {
        Exception::throw_type(
            ctx,
            &format!("tools.{name}: the argument cannot be converted to JSON: {e}"),
        )
    })
}

/// Settles one tool call's promise.
fn deliver<'js>(
    ctx: &Ctx<'js>,
    settle: &Function<'js>,
    calls: &Rc<RefCell<Calls>>,
    id: u32,
    result: ToolResult,
) -> rquickjs::Result<()> {
    {
        let mut calls = calls.borrow_mut();
        calls.in_flight = calls.in_flight.saturating_sub(1);
    }
    let (ok, value) = match result {
        Ok(json) => {
            let text = serde_json::to_string(&json).map_err(|e| rquickjs::Error::Io(e.into()))?;
            (true, ctx.json_parse(text)?)
        }
        Err(message) => (false, message.into_js(ctx)?),
    };
    settle.call::<_, ()>((id, ok, value))
}

/// Converts the resolved value to JSON and fits the output into the cap.
fn finish<'js>(
    ctx: &Ctx<'js>,
    promise: &Promise<'js>,
    console: &Rc<RefCell<Console>>,
    made: u32,
    stop: &Stop,
) -> Result<RunOutput, SandboxError> {
    let value: Value = match promise.result() {
        Some(Ok(value)) => value,
        Some(Err(e)) => return Err(failure(ctx, e, Stage::Run, stop)),
        None => {
            return Err(SandboxError::Internal {
                message: "the result promise is still pending".to_owned(),
            });
        }
    };
    let json = match ctx.json_stringify(value) {
        Ok(Some(text)) => text
            .to_string()
            .map_err(|e| failure(ctx, e, Stage::Convert, stop))?,
        Ok(None) => "null".to_owned(),
        Err(e) => return Err(failure(ctx, e, Stage::Convert, stop)),
    };
    let console = console.replace(Console::new(0));
    Ok(output::assemble(
        &json,
        console,
        made,
        stop.limits.max_output_bytes,
    ))
}

/// Where an error came from, which decides how a plain exception is reported.
#[derive(Clone, Copy, PartialEq)]
enum Stage {
    Setup,
    Compile,
    Run,
    Convert,
}

/// Maps an engine error to what the caller is told.
fn failure<'js>(ctx: &Ctx<'js>, error: rquickjs::Error, stage: Stage, stop: &Stop) -> SandboxError {
    let thrown = match error {
        rquickjs::Error::Exception => Some(describe(ctx, ctx.catch())),
        _ => None,
    };
    if let Some(reason) = stop.reason() {
        return reason;
    }
    let Some(thrown) = thrown else {
        return engine_error(error, &stop.limits);
    };
    if thrown.name == "InternalError" && thrown.message == "out of memory" {
        return SandboxError::OutOfMemory {
            limit: stop.limits.memory_bytes,
        };
    }
    if (thrown.name == "RangeError" && thrown.message == "Maximum call stack size exceeded")
        || (thrown.name == "InternalError" && thrown.message.contains("stack overflow"))
    {
        return SandboxError::StackOverflow;
    }
    if thrown.name == "InternalError" && thrown.message == "interrupted" {
        // The interrupt trips only for a host-side reason, checked above; if the
        // deadline raced past, report it as what it most likely was.
        return SandboxError::Timeout {
            after: stop.limits.deadline,
        };
    }
    match stage {
        Stage::Compile if thrown.name == "SyntaxError" => SandboxError::Syntax {
            message: thrown.full(),
        },
        Stage::Convert => SandboxError::NotSerializable {
            message: thrown.headline(),
        },
        Stage::Setup => SandboxError::Internal {
            message: format!("setting up the script failed: {}", thrown.full()),
        },
        Stage::Compile | Stage::Run => SandboxError::Thrown {
            message: thrown.full(),
        },
    }
}

/// Errors that are not a JavaScript exception.
fn engine_error(error: rquickjs::Error, limits: &Limits) -> SandboxError {
    match error {
        rquickjs::Error::Allocation => SandboxError::OutOfMemory {
            limit: limits.memory_bytes,
        },
        other => SandboxError::Internal {
            message: other.to_string(),
        },
    }
}

/// A thrown value, described.
struct Thrown {
    name: String,
    message: String,
    stack: String,
}

impl Thrown {
    /// `TypeError: x is not a function`.
    fn headline(&self) -> String {
        if self.name.is_empty() {
            self.message.clone()
        } else {
            format!("{}: {}", self.name, self.message)
        }
    }

    /// The headline and the stack, if any.
    fn full(&self) -> String {
        let stack = self.stack.trim_end();
        if stack.is_empty() {
            self.headline()
        } else {
            format!("{}\n{stack}", self.headline())
        }
    }
}

fn describe<'js>(ctx: &Ctx<'js>, value: Value<'js>) -> Thrown {
    if let Some(exception) = value.as_object().cloned().and_then(Exception::from_object) {
        let name = exception
            .get::<_, Coerced<String>>("name")
            .map(|n| n.0)
            .unwrap_or_else(|_| {
                let _ = ctx.catch();
                "Error".to_owned()
            });
        return Thrown {
            name,
            message: exception.message().unwrap_or_default(),
            stack: exception.stack().unwrap_or_default(),
        };
    }
    Thrown {
        name: String::new(),
        message: format!("uncaught value {}", show(ctx, value)),
        stack: String::new(),
    }
}

/// A value as console.log shows it: strings as they are, errors as
/// `Name: message`, other values as JSON where possible, else `String(value)`.
fn show<'js>(ctx: &Ctx<'js>, value: Value<'js>) -> String {
    if let Some(text) = value.as_string() {
        return text.to_string().unwrap_or_default();
    }
    if value.is_undefined() {
        return "undefined".to_owned();
    }
    if let Some(exception) = value.as_object().cloned().and_then(Exception::from_object) {
        let name = exception
            .get::<_, Coerced<String>>("name")
            .map(|n| n.0)
            .unwrap_or_else(|_| {
                let _ = ctx.catch();
                "Error".to_owned()
            });
        return format!("{name}: {}", exception.message().unwrap_or_default());
    }
    match ctx.json_stringify(value.clone()) {
        Ok(Some(text)) => {
            if let Ok(text) = text.to_string() {
                return text;
            }
        }
        Ok(None) => {}
        Err(_) => {
            let _ = ctx.catch();
        }
    }
    match Coerced::<String>::from_js(ctx, value.clone()) {
        Ok(text) => text.0,
        Err(_) => {
            let _ = ctx.catch();
            format!("[{}]", value.type_name())
        }
    }
}
