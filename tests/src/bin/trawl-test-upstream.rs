//! A scripted MCP server for the tests of trawl's upstream client
//! (`CARGO_BIN_EXE_trawl-test-upstream`).
//!
//! ```text
//! trawl-test-upstream --tools FILE [--page-size N] [--http 127.0.0.1:0] [--starts FILE]
//! ```
//!
//! - `--tools FILE`: `{"tools": [...MCP tool definitions...]}`, read again on
//!   every `tools/list` and `tools/call`, so a test can change a tool between
//!   two listings.
//! - `--page-size N`: `tools/list` pages of N tools with opaque cursors (0, the
//!   default, is one page).
//! - `--http ADDR`: serve Streamable HTTP at `/mcp` and print
//!   `listening on http://ADDR/mcp` as the first line of stdout; stdio otherwise.
//! - `--starts FILE`: append a line to FILE when the server starts, so a test
//!   can count how often it was started.
//!
//! `tools/call` of a listed tool answers its arguments: as JSON text in
//! `content`, and `{"tool", "arguments"}` in `structuredContent`. Two names are
//! special: `fail` answers `isError: true` with "failed on purpose", and
//! `sleep` first waits `arguments.ms` milliseconds. An unlisted tool is a
//! JSON-RPC invalid-params error.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Clone)]
struct Scripted {
    tools_file: Arc<PathBuf>,
    page_size: usize,
}

impl Scripted {
    fn tools(&self) -> Result<Vec<Tool>, ErrorData> {
        let read = || -> Result<Vec<Tool>, BoxError> {
            let mut doc: Value = serde_json::from_slice(&std::fs::read(&*self.tools_file)?)?;
            Ok(serde_json::from_value(doc["tools"].take())?)
        };
        read().map_err(|e| {
            ErrorData::internal_error(format!("{}: {e}", self.tools_file.display()), None)
        })
    }
}

impl ServerHandler for Scripted {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("trawl-test-upstream", "0.1.0"))
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = self.tools()?;
        if self.page_size == 0 {
            return Ok(ListToolsResult::with_all_items(tools));
        }
        // The cursor is the offset of the page, dressed up so no client parses it.
        let start = match request.and_then(|r| r.cursor) {
            None => 0,
            Some(c) => c
                .strip_prefix("offset-")
                .and_then(|n| n.parse::<usize>().ok())
                .filter(|&n| n <= tools.len())
                .ok_or_else(|| ErrorData::invalid_params(format!("bad cursor {c:?}"), None))?,
        };
        let end = (start + self.page_size).min(tools.len());
        let mut page = ListToolsResult::with_all_items(tools[start..end].to_vec());
        page.next_cursor = (end < tools.len()).then(|| format!("offset-{end}"));
        Ok(page)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        if !self.tools()?.iter().any(|t| t.name == name) {
            return Err(ErrorData::invalid_params(
                format!("unknown tool {name}"),
                None,
            ));
        }
        let args = Value::Object(request.arguments.unwrap_or_default());
        let result = match name.as_str() {
            "fail" => CallToolResult::error(vec![ContentBlock::text("failed on purpose")]),
            _ => {
                if name == "sleep" {
                    let ms = args["ms"].as_u64().unwrap_or(0);
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                }
                let mut result =
                    CallToolResult::success(vec![ContentBlock::text(args.to_string())]);
                result.structured_content = Some(json!({"tool": name, "arguments": args}));
                result
            }
        };
        Ok(CallToolResponse::Complete(result))
    }
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let mut tools_file = None;
    let mut page_size = 0;
    let mut http = None;
    let mut starts = None;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--tools" => tools_file = Some(PathBuf::from(value)),
            "--page-size" => page_size = value.parse()?,
            "--http" => http = Some(value),
            "--starts" => starts = Some(PathBuf::from(value)),
            _ => return Err(format!("unknown flag {flag}").into()),
        }
    }
    if let Some(path) = starts {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        writeln!(f, "started")?;
    }
    let server = Scripted {
        tools_file: Arc::new(tools_file.ok_or("--tools FILE is required")?),
        page_size,
    };

    let Some(addr) = http else {
        server
            .serve(rmcp::transport::stdio())
            .await?
            .waiting()
            .await?;
        return Ok(());
    };
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    let mut stdout = std::io::stdout();
    writeln!(stdout, "listening on http://{}/mcp", listener.local_addr()?)?;
    stdout.flush()?;
    let app = axum::Router::new().nest_service("/mcp", service);
    axum::serve(listener, app).await?;
    Ok(())
}
