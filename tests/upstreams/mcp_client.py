"""MCP test client over Streamable HTTP, built on the official Python SDK `mcp` 2.3.0 (Python >= 3.11).

Pinned in tests/upstreams/requirements.txt; install with
    python3 -m venv tests/upstreams/.venv
    tests/upstreams/.venv/bin/pip install -r tests/upstreams/requirements.txt
Run by the Rust integration tests as a child process against trawl's MCP endpoint:
    MCP_URL=http://127.0.0.1:PORT/mcp [MCP_TOKEN=...] tests/upstreams/.venv/bin/python tests/upstreams/mcp_client.py CMD ...

    list                 -> {"protocolVersion", "serverInfo", "tools": [{name, description,
                            inputSchema, outputSchema?}, ...]}   (all pages of tools/list)
    call NAME JSON_ARGS  -> the raw CallToolResult {content, structuredContent?, isError?}
                            (printed even when isError is true; the exit status is then 1)

Each command prints exactly one JSON line on stdout when it succeeds. MCP_TOKEN is sent
as `Authorization: Bearer <token>` on every request. MCP_MODE picks the SDK's connect
mode: "auto" (default: probe `server/discover` at 2026-07-28, fall back to `initialize`
at 2025-11-25), "legacy" (initialize only) or "2026-07-28" (modern, no probe).
MCP_DEBUG=1 logs every HTTP exchange to stderr.

Exit status: 0 ok; 1 any error (JSON-RPC error, isError result, HTTP error other than
401/403, connection failure); 2 usage; 3 HTTP 401; 4 HTTP 403. On an HTTP error the
status and the WWW-Authenticate header are printed to stderr as `http status: N` and
`www-authenticate: ...` (the SDK itself turns a bare HTTP 4xx into a JSON-RPC error
-32603 "Server returned an error response", or -32601 for a 404 before a session
exists, so the status is taken from an httpx2 response hook).

Leaving the client context ends the session with an HTTP DELETE (when the server gave
an Mcp-Session-Id).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp_types import Implementation
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

MAX_PAGES = 10_000


class Fail(Exception):
    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = code


# The last HTTP response with a status >= 400 (status, method, WWW-Authenticate).
last_http_error: dict[str, Any] | None = None
debug_enabled = bool(os.environ.get("MCP_DEBUG"))


def debug(*args: Any) -> None:
    if debug_enabled:
        print("[mcp_client.py]", *args, file=sys.stderr, flush=True)


async def on_request(request: httpx2.Request) -> None:
    if debug_enabled:
        hdrs = {
            k: (v[:12] + "..." if k.lower() == "authorization" else v)
            for k, v in request.headers.items()
            if k.lower().startswith("mcp-") or k.lower() in ("accept", "content-type", "authorization")
        }
        body = request.content.decode("utf-8", "replace")[:300] if request.method == "POST" else ""
        debug(">>", request.method, request.url, hdrs, body)


async def on_response(response: httpx2.Response) -> None:
    global last_http_error
    debug("<<", response.status_code, response.headers.get("content-type"), response.headers.get("mcp-session-id"))
    if response.request.method != "POST":
        return  # the optional GET stream (405 is normal) and the closing DELETE say nothing about a call
    if response.status_code < 400:
        last_http_error = None  # e.g. a 4xx answer to the server/discover probe followed by a good initialize
    else:
        last_http_error = {
            "status": response.status_code,
            "method": response.request.method,
            "www_authenticate": response.headers.get("www-authenticate"),
        }


def out(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def dump(model: Any) -> Any:
    # exclude_unset: only what the server sent, not the SDK model's defaults (isError=false, resultType=...)
    return model.model_dump(by_alias=True, mode="json", exclude_unset=True)


def tool_error(name: str, result: dict[str, Any]) -> Fail:
    text = "\n".join(c.get("text", "") for c in result.get("content", []) if c.get("type") == "text")
    return Fail(f"tool {name} returned isError: {text or json.dumps(result)}")


async def cmd_list(client: Client) -> None:
    tools: list[dict[str, Any]] = []
    cursor: str | None = None
    seen: set[str] = set()
    for _ in range(MAX_PAGES):
        page = await client.list_tools(cursor=cursor)
        for t in page.tools:
            d = dump(t)
            entry: dict[str, Any] = {"name": d["name"]}
            if "description" in d:
                entry["description"] = d["description"]
            entry["inputSchema"] = d["inputSchema"]
            if "outputSchema" in d:
                entry["outputSchema"] = d["outputSchema"]
            tools.append(entry)
        cursor = page.next_cursor
        if cursor is None:
            break
        if cursor in seen:
            raise Fail(f"tools/list repeated cursor {cursor!r}")
        seen.add(cursor)
    else:
        raise Fail("tools/list: too many pages")
    info = client.server_info
    out(
        {
            "protocolVersion": client.protocol_version,
            "serverInfo": dump(info) if info is not None else None,
            "tools": tools,
        }
    )


async def cmd_call(client: Client, name: str, args: dict[str, Any]) -> None:
    result = dump(await client.call_tool(name, args))
    out(result)
    if result.get("isError"):
        raise tool_error(name, result)


def flatten(exc: BaseException) -> BaseException:
    """anyio task groups wrap errors in ExceptionGroups; return the first real error."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


async def main() -> int:
    argv = sys.argv[1:]
    url = os.environ.get("MCP_URL")
    usage = "usage: MCP_URL=... [MCP_TOKEN=...] mcp_client.py list | call NAME JSON_ARGS"
    if not url or not argv:
        print(usage, file=sys.stderr)
        return 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "list" and not rest:

        async def run(c: Client) -> None:
            await cmd_list(c)

    elif cmd == "call" and len(rest) in (1, 2):
        try:
            call_args = json.loads(rest[1]) if len(rest) == 2 else {}
        except json.JSONDecodeError as e:
            print(f"JSON_ARGS is not valid JSON: {e}", file=sys.stderr)
            return 2

        async def run(c: Client) -> None:
            await cmd_call(c, rest[0], call_args)

    else:
        print(usage, file=sys.stderr)
        return 2

    headers: dict[str, str] = {}
    token = os.environ.get("MCP_TOKEN")
    if token:
        headers["Authorization"] = f"Bearer {token}"
    mode = os.environ.get("MCP_MODE", "auto")

    connected = False
    try:
        async with create_mcp_http_client(headers=headers) as http:
            http.event_hooks = {"request": [on_request], "response": [on_response]}
            async with Client(
                streamable_http_client(url, http_client=http),
                mode=mode,
                client_info=Implementation(name="trawl-test-mcp-client-py", version="0.0.0"),
            ) as client:
                connected = True
                debug("connected: protocol", client.protocol_version)
                await run(client)
        return 0
    except BaseException as raw:  # noqa: BLE001 - every failure maps to an exit status
        err = flatten(raw)
        if isinstance(err, KeyboardInterrupt):
            raise
        where = "request" if connected else "connect"
        status = last_http_error["status"] if last_http_error else None
        if isinstance(err, Fail):
            print(f"error: {err}", file=sys.stderr)
            return err.exit_code
        if isinstance(err, MCPError):
            data = f" data={json.dumps(err.data)}" if err.data is not None else ""
            print(f"{where} failed: JSON-RPC error {err.code}: {err.message}{data}", file=sys.stderr)
            if status is not None:
                print(f"http status: {status}", file=sys.stderr)
                if last_http_error and last_http_error.get("www_authenticate"):
                    print(f"www-authenticate: {last_http_error['www_authenticate']}", file=sys.stderr)
                return 3 if status == 401 else 4 if status == 403 else 1
            return 1
        print(f"{where} failed: {type(err).__name__}: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(anyio.run(main))
