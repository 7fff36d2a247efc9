//! `trawl_api::mcp::read_rpc` on any bytes: the classification of a POST body
//! to `/mcp` that runs before rmcp sees it, and whose `tools/call` tool name
//! decides which scope the caller must hold.
//!
//! Invariants, beyond "returns without panicking":
//! - `NotJson` exactly when serde_json cannot read the body as JSON;
//! - `Batch` exactly when the body is a JSON array;
//! - a `Message`'s `method` is the document's `method`;
//! - a body trawl lets through (`Message`) that rmcp, the transport behind the
//!   check, reads as a request is seen here with rmcp's method and, for
//!   `tools/call`, rmcp's tool name: the scope check (by tool, and by method for
//!   `prompts/*` and `resources/*`) looks at what rmcp then runs.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rmcp::model::{ClientJsonRpcMessage, ClientRequest};
use serde::de::IgnoredAny;
use serde_json::Value;
use trawl_api::mcp::{Rpc, read_rpc};

fuzz_target!(|body: &[u8]| {
    let rpc = read_rpc(body);

    let is_json = serde_json::from_slice::<IgnoredAny>(body).is_ok();
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    assert_eq!(rpc == Rpc::NotJson, !is_json, "{rpc:?}");
    assert_eq!(
        rpc == Rpc::Batch,
        is_json && first == Some(&b'['),
        "{rpc:?}"
    );

    if let Rpc::Message { method, .. } = &rpc
        && let Ok(Value::Object(doc)) = serde_json::from_slice::<Value>(body)
    {
        assert_eq!(doc.get("jsonrpc").and_then(Value::as_str), Some("2.0"));
        assert_eq!(doc.get("method").and_then(Value::as_str), method.as_deref());
    }

    // What the transport does with a body trawl lets through (rmcp reads it
    // with `serde_json::from_slice::<ClientJsonRpcMessage>`). trawl may refuse
    // more than rmcp (a duplicated member name is `Invalid` here, where rmcp
    // keeps the last one), which is safe: a refused body never reaches rmcp.
    if let Rpc::Message { method, tool, .. } = &rpc
        && let Ok(ClientJsonRpcMessage::Request(request)) = serde_json::from_slice(body)
    {
        let request = &request.request;
        assert_eq!(
            method.as_deref(),
            Some(request.method()),
            "scope check on another method"
        );
        if let ClientRequest::CallToolRequest(call) = request {
            assert_eq!(
                tool.as_deref(),
                Some(&*call.params.name),
                "scope check on another tool"
            );
        }
    }
});
