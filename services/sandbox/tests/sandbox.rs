//! Behaviour of `trawl_sandbox::run`: results, tools, console, and every limit.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use serde_json::{Value, json};
use trawl_sandbox::{Invoke, Limits, RunOutput, SandboxError, run};

fn names(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| (*n).to_owned()).collect()
}

/// Answers every call with `{tool, args}` at once.
fn echo() -> Invoke {
    Arc::new(|name, args| async move { Ok(json!({ "tool": name, "args": args })) }.boxed())
}

async fn run_with(code: &str, limits: &Limits) -> Result<RunOutput, SandboxError> {
    run(code, &names(&["echo", "noop"]), echo(), limits).await
}

async fn run_default(code: &str) -> Result<RunOutput, SandboxError> {
    run_with(code, &Limits::default()).await
}

/// After a failure, the next script in the same process runs normally.
async fn assert_next_script_runs() {
    let out = run_default("return 40 + 2")
        .await
        .expect("next script runs");
    assert_eq!(out.value, json!(42));
}

fn thrown_message(result: Result<RunOutput, SandboxError>) -> String {
    match result {
        Err(SandboxError::Thrown { message }) => message,
        other => panic!("expected Thrown, got {other:?}"),
    }
}

#[tokio::test]
async fn returns_numbers_objects_arrays_and_undefined_as_null() {
    assert_eq!(run_default("return 1 + 2").await.unwrap().value, json!(3));
    assert_eq!(run_default("return 0.5").await.unwrap().value, json!(0.5));
    assert_eq!(
        run_default("return {a: [1, 'x', null, true], b: {c: 2}}")
            .await
            .unwrap()
            .value,
        json!({"a": [1, "x", null, true], "b": {"c": 2}})
    );
    assert_eq!(
        run_default("return [1, 2, 3].map(x => x * 2)")
            .await
            .unwrap()
            .value,
        json!([2, 4, 6])
    );
    let out = run_default("let x = 1;").await.unwrap();
    assert_eq!(out.value, Value::Null);
    assert_eq!(out.console, "");
    assert_eq!(out.tool_calls, 0);
    assert!(!out.truncated);
    // Top-level await works without any tool.
    assert_eq!(
        run_default("return await Promise.resolve(7)")
            .await
            .unwrap()
            .value,
        json!(7)
    );
}

#[tokio::test]
async fn console_output_is_captured() {
    let out = run_default(
        r#"console.log("hello", 1, {a: [1, 2]});
           console.info("info");
           console.warn("careful");
           console.error(new TypeError("bad"));
           console.log(undefined, null);
           return "done";"#,
    )
    .await
    .unwrap();
    assert_eq!(out.value, json!("done"));
    assert_eq!(
        out.console,
        "hello 1 {\"a\":[1,2]}\ninfo\n[warn] careful\n[error] TypeError: bad\nundefined null\n"
    );
    assert!(!out.truncated);
}

#[tokio::test]
async fn tool_calls_pass_arguments_and_return_results() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let invoke: Invoke = {
        let seen = Arc::clone(&seen);
        Arc::new(move |name, args| {
            seen.lock().unwrap().push((name.clone(), args.clone()));
            async move {
                Ok(json!({ "results": [{ "title": format!("{name}:{}", args["query"]) }] }))
            }
            .boxed()
        })
    };
    let out = run(
        r#"const r = await tools.web_search({query: "x1 carbon", geo: "de"});
           const none = await tools.web_search();
           return [r.results[0].title, none.results[0].title];"#,
        &names(&["web_search"]),
        invoke,
        &Limits::default(),
    )
    .await
    .unwrap();
    assert_eq!(
        out.value,
        json!(["web_search:\"x1 carbon\"", "web_search:null"])
    );
    assert_eq!(out.tool_calls, 2);
    assert_eq!(
        *seen.lock().unwrap(),
        vec![
            (
                "web_search".to_owned(),
                json!({"query": "x1 carbon", "geo": "de"})
            ),
            ("web_search".to_owned(), json!({})),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promise_all_runs_calls_concurrently() {
    // Each call waits until all five have started: sequential dispatch would
    // never get past the first one.
    let barrier = Arc::new(tokio::sync::Barrier::new(5));
    let invoke: Invoke = Arc::new(move |_, args| {
        let barrier = Arc::clone(&barrier);
        async move {
            barrier.wait().await;
            Ok(args["i"].clone())
        }
        .boxed()
    });
    let code = "return await Promise.all([0, 1, 2, 3, 4].map(i => tools.wait({i})));";
    let out = tokio::time::timeout(
        Duration::from_secs(5),
        run(code, &names(&["wait"]), invoke, &Limits::default()),
    )
    .await
    .expect("the five calls ran concurrently")
    .unwrap();
    assert_eq!(out.value, json!([0, 1, 2, 3, 4]));
    assert_eq!(out.tool_calls, 5);
}

fn failing() -> Invoke {
    Arc::new(|name, _| async move { Err(format!("{name}: upstream returned 503")) }.boxed())
}

#[tokio::test]
async fn tool_error_can_be_caught_by_the_script() {
    let out = run(
        r#"try { await tools.web_search({query: "q"}); return "no error"; }
           catch (e) { return [e instanceof Error, e.message]; }"#,
        &names(&["web_search"]),
        failing(),
        &Limits::default(),
    )
    .await
    .unwrap();
    assert_eq!(
        out.value,
        json!([true, "web_search: upstream returned 503"])
    );
}

#[tokio::test]
async fn uncaught_tool_error_is_thrown_with_its_message() {
    let result = run(
        "return await tools.web_search({query: 'q'});",
        &names(&["web_search"]),
        failing(),
        &Limits::default(),
    )
    .await;
    let message = thrown_message(result);
    assert!(
        message.starts_with("Error: web_search: upstream returned 503"),
        "{message}"
    );
}

#[tokio::test]
async fn thrown_exception_is_reported_with_name_message_and_stack() {
    let message = thrown_message(
        run_default("function inner() { null.x; }\nfunction outer() { inner(); }\nouter();").await,
    );
    assert!(message.starts_with("TypeError: "), "{message}");
    assert!(
        message.contains("inner"),
        "stack names the function: {message}"
    );
    let message = thrown_message(run_default("throw new Error('boom')").await);
    assert!(message.starts_with("Error: boom"), "{message}");
    let message = thrown_message(run_default("throw 'plain'").await);
    assert_eq!(message, "uncaught value plain");
    let err = run_default("throw new Error('boom')").await.unwrap_err();
    assert!(
        err.to_string()
            .starts_with("the script threw an uncaught exception: Error: boom"),
        "{err}"
    );
    assert_next_script_runs().await;
}

#[tokio::test]
async fn syntax_error_is_reported_as_syntax() {
    match run_default("return (1 + ;").await {
        Err(SandboxError::Syntax { message }) => {
            assert!(message.starts_with("SyntaxError: "), "{message}")
        }
        other => panic!("expected Syntax, got {other:?}"),
    }
    // A body that closes the function early to leave a plain function behind is
    // refused as not a function body.
    match run_default("}); (function () {").await {
        Err(SandboxError::Syntax { message }) => {
            assert!(message.contains("body of an async function"), "{message}")
        }
        other => panic!("expected Syntax, got {other:?}"),
    }
    assert_next_script_runs().await;
}

#[tokio::test]
async fn infinite_loop_ends_at_the_deadline() {
    let limits = Limits::default().with_deadline(Duration::from_millis(200));
    let started = Instant::now();
    let err = run_with("while (true) {}", &limits).await.unwrap_err();
    assert_eq!(
        err,
        SandboxError::Timeout {
            after: Duration::from_millis(200)
        }
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(
        err.to_string(),
        "the script ran past its 200ms deadline and was stopped"
    );
    // A loop that catches everything cannot swallow the interrupt.
    let err = run_with(
        "while (true) { try { while (true) {} } catch (e) {} }",
        &limits,
    )
    .await
    .unwrap_err();
    assert!(matches!(err, SandboxError::Timeout { .. }), "{err:?}");
    assert_next_script_runs().await;
}

#[tokio::test]
async fn tool_call_that_never_resolves_ends_at_the_deadline() {
    let never: Invoke = Arc::new(|_, _| futures_util::future::pending().boxed());
    let limits = Limits::default().with_deadline(Duration::from_millis(200));
    let started = Instant::now();
    let err = run(
        "return await tools.slow({});",
        &names(&["slow"]),
        never,
        &limits,
    )
    .await
    .unwrap_err();
    assert!(matches!(err, SandboxError::Timeout { .. }), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_next_script_runs().await;
}

#[tokio::test]
async fn memory_bomb_runs_out_of_memory() {
    let limits = Limits::default().with_memory_bytes(16 * 1024 * 1024);
    let err = run_with(
        r#"let a = []; while (true) a.push("x".repeat(1e6));"#,
        &limits,
    )
    .await
    .unwrap_err();
    assert_eq!(
        err,
        SandboxError::OutOfMemory {
            limit: 16 * 1024 * 1024
        }
    );
    assert!(
        err.to_string().contains("out of memory (limit 16 MiB)"),
        "{err}"
    );
    assert_next_script_runs().await;
}

#[tokio::test]
async fn deep_recursion_overflows_the_stack() {
    let err = run_default("function f(n) { return f(n + 1) + 1; } return f(0);")
        .await
        .unwrap_err();
    assert_eq!(err, SandboxError::StackOverflow);
    assert_next_script_runs().await;
}

#[tokio::test]
async fn network_is_unreachable() {
    let message = thrown_message(run_default("return await fetch('https://example.com')").await);
    assert!(message.starts_with("ReferenceError: "), "{message}");
    assert!(message.contains("fetch"), "{message}");
    let message = thrown_message(run_default("return new XMLHttpRequest()").await);
    assert!(message.starts_with("ReferenceError: "), "{message}");
    assert_next_script_runs().await;
}

#[tokio::test]
async fn file_system_is_unreachable() {
    let message = thrown_message(run_default("return require('fs')").await);
    assert!(message.starts_with("ReferenceError: "), "{message}");
    // Dynamic import has no module loader behind it.
    let message = thrown_message(run_default("return await import('fs')").await);
    assert!(message.contains("fs"), "{message}");
    let message = thrown_message(run_default("return std.open('/etc/passwd', 'r')").await);
    assert!(message.starts_with("ReferenceError: "), "{message}");
    let message = thrown_message(run_default("return os.open('/etc/passwd')").await);
    assert!(message.starts_with("ReferenceError: "), "{message}");
    // Static import is not valid in a function body.
    assert!(matches!(
        run_default("import fs from 'fs';").await,
        Err(SandboxError::Syntax { .. })
    ));
    assert_next_script_runs().await;
}

#[tokio::test]
async fn environment_is_unreachable() {
    let message = thrown_message(run_default("return process.env").await);
    assert!(message.starts_with("ReferenceError: "), "{message}");
    let message = thrown_message(run_default("return std.getenv('HOME')").await);
    assert!(message.starts_with("ReferenceError: "), "{message}");
    assert_next_script_runs().await;
}

#[tokio::test]
async fn only_the_safe_globals_exist() {
    let out = run_default(
        r#"const forbidden = ["fetch", "require", "process", "std", "os", "XMLHttpRequest",
             "WebSocket", "setTimeout", "setInterval", "eval", "performance", "WeakRef",
             "Proxy", "navigator", "importScripts", "Deno", "Bun"];
           return forbidden.filter(name => name in globalThis);"#,
    )
    .await
    .unwrap();
    assert_eq!(out.value, json!([]));
    let out = run_default(
        "return [typeof JSON, typeof Math, typeof Date, typeof Map, typeof Set, \
         typeof Promise, typeof RegExp, typeof Uint8Array, typeof tools.echo, \
         Object.isFrozen(tools)]",
    )
    .await
    .unwrap();
    assert_eq!(
        out.value,
        json!([
            "object", "object", "function", "function", "function", "function", "function",
            "function", "function", true
        ])
    );
}

#[tokio::test]
async fn too_many_tool_calls_end_the_script() {
    let limits = Limits::default().with_max_tool_calls(3);
    let err = run_with(
        "for (let i = 0; i < 4; i++) await tools.noop({i}); return 'finished';",
        &limits,
    )
    .await
    .unwrap_err();
    assert_eq!(err, SandboxError::TooManyToolCalls { limit: 3 });
    assert_eq!(
        err.to_string(),
        "the script called tools more than 3 times and was stopped; make fewer, broader calls"
    );
    // Catching every error in a loop does not keep the script going.
    let err = run_with(
        "for (;;) { try { await tools.noop({}); } catch (e) {} }",
        &limits,
    )
    .await
    .unwrap_err();
    assert_eq!(err, SandboxError::TooManyToolCalls { limit: 3 });
    // Nor does swallowing the rejections without awaiting and returning at once.
    let err = run_with(
        "for (let i = 0; i < 10; i++) tools.noop({i}).catch(() => {}); return 'swallowed';",
        &limits,
    )
    .await
    .unwrap_err();
    assert_eq!(err, SandboxError::TooManyToolCalls { limit: 3 });
    // Exactly at the limit is fine.
    let out = run_with(
        "for (let i = 0; i < 3; i++) await tools.noop({i}); return 'ok';",
        &limits,
    )
    .await
    .unwrap();
    assert_eq!(out.tool_calls, 3);
    assert_next_script_runs().await;
}

#[tokio::test]
async fn non_serializable_argument_rejects_the_call() {
    let out = run_default(
        r#"const cyclic = {}; cyclic.self = cyclic;
           const errors = [];
           for (const arg of [cyclic, 10n, () => 1]) {
             try { await tools.echo(arg); } catch (e) { errors.push(e.message); }
           }
           return errors;"#,
    )
    .await
    .unwrap();
    let errors = out.value.as_array().unwrap();
    assert_eq!(errors.len(), 3, "{errors:?}");
    for error in errors {
        let error = error.as_str().unwrap();
        assert!(
            error.starts_with("tools.echo: the argument cannot be converted to JSON"),
            "{error}"
        );
    }
}

#[tokio::test]
async fn non_serializable_return_value_is_reported() {
    let err = run_default("const a = {}; a.a = a; return a;")
        .await
        .unwrap_err();
    assert!(
        matches!(&err, SandboxError::NotSerializable { message } if message.starts_with("TypeError")),
        "{err:?}"
    );
    assert!(matches!(
        run_default("return 10n").await,
        Err(SandboxError::NotSerializable { .. })
    ));
    // Values JSON has no form for follow JSON.stringify.
    assert_eq!(
        run_default("return () => 1").await.unwrap().value,
        Value::Null
    );
}

#[tokio::test]
async fn output_over_the_cap_is_cut_with_a_note() {
    let limits = Limits::default().with_max_output_bytes(1000);
    let out = run_with(
        "for (let i = 0; i < 1000; i++) console.log('line ' + i); return 'ok';",
        &limits,
    )
    .await
    .unwrap();
    assert!(out.truncated);
    assert_eq!(out.value, json!("ok"));
    assert!(out.console.starts_with("line 0\nline 1\n"));
    assert!(
        out.console.contains("console output truncated"),
        "{}",
        out.console
    );
    assert!(out.console.len() < 1000 + 200, "{}", out.console.len());

    let out = run_with("return 'x'.repeat(5000)", &limits).await.unwrap();
    assert!(out.truncated);
    let value = out.value.as_str().unwrap();
    assert!(value.contains("return value truncated"), "{value}");
    assert!(value.len() < 1000 + 200);
}

#[tokio::test]
async fn promise_that_can_never_settle_is_reported_as_stuck() {
    let started = Instant::now();
    let err = run_default("await new Promise(() => {});")
        .await
        .unwrap_err();
    assert_eq!(err, SandboxError::Stuck);
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_next_script_runs().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_run_aborts_tool_calls_in_flight() {
    let (started_tx, started_rx) = tokio::sync::oneshot::channel::<()>();
    let (dropped_tx, dropped_rx) = tokio::sync::oneshot::channel::<()>();
    let slots = Arc::new(Mutex::new(Some((started_tx, dropped_tx))));
    let invoke: Invoke = Arc::new(move |_, _| {
        let slot = slots.lock().unwrap().take();
        async move {
            // Held until this future is dropped, which closes `dropped_rx`.
            let (started, _dropped) = slot.expect("one call");
            let _ = started.send(());
            futures_util::future::pending::<()>().await;
            Ok(Value::Null)
        }
        .boxed()
    });
    let tools = names(&["slow"]);
    let limits = Limits::default();
    let running =
        tokio::spawn(
            async move { run("return await tools.slow({})", &tools, invoke, &limits).await },
        );
    tokio::time::timeout(Duration::from_secs(5), started_rx)
        .await
        .expect("the call started")
        .unwrap();
    running.abort();
    let closed = tokio::time::timeout(Duration::from_secs(5), dropped_rx)
        .await
        .expect("the tool future was dropped well before the 10 s deadline");
    assert!(closed.is_err(), "the sender was dropped, not used");
}

#[tokio::test]
async fn panicking_tool_rejects_its_call_and_the_process_goes_on() {
    let invoke: Invoke = Arc::new(|name, _| {
        async move {
            if name == "later" {
                tokio::task::yield_now().await;
            }
            panic!("tool bug");
        }
        .boxed()
    });
    let out = run(
        r#"const messages = [];
           for (const call of [tools.now, tools.later]) {
             try { await call({}); } catch (e) { messages.push(e.message); }
           }
           return messages;"#,
        &names(&["now", "later"]),
        invoke,
        &Limits::default(),
    )
    .await
    .unwrap();
    assert_eq!(
        out.value,
        json!([
            "the tool failed unexpectedly",
            "the tool failed unexpectedly"
        ])
    );
    assert_next_script_runs().await;
}
