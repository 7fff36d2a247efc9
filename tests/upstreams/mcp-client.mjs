// MCP test client over Streamable HTTP, built on the official TypeScript SDK
// `@modelcontextprotocol/sdk` 1.32.2 (pinned in tests/upstreams/package.json;
// `npm ci --prefix tests/upstreams`). Run by the Rust integration tests as a
// child process against trawl's MCP endpoint. The SDK offers protocol version
// 2025-11-25 in `initialize` and then sends the negotiated version in the
// MCP-Protocol-Version header of every later request.
//
// Usage:
//   MCP_URL=http://127.0.0.1:PORT/mcp [MCP_TOKEN=...] node tests/upstreams/mcp-client.mjs CMD ...
//
//   list                   -> {"protocolVersion", "serverInfo", "tools": [{name, description,
//                             inputSchema, outputSchema?}, ...]}   (all pages of tools/list)
//   call NAME JSON_ARGS    -> the raw CallToolResult {content, structuredContent?, isError?}
//                             (printed even when isError is true; the exit status is then 1)
//   job SPEC_JSON_FILE     -> research.submit_job {"spec": <file>}, poll research.job_status
//                             every 200 ms until a terminal status (120 s limit), page through
//                             research.job_items (limit 1000, following next_cursor), then
//                             {"job_id", "status", "items": N, "first_item", "tools": [names]}
//
// Each command prints exactly one JSON line on stdout when it succeeds. MCP_TOKEN is
// sent as `Authorization: Bearer <token>` on every request (POST, GET, DELETE).
// MCP_DEBUG=1 logs non-fatal transport errors to stderr.
//
// Exit status: 0 ok; 1 any error (thrown error, JSON-RPC error, isError result,
// timeout, HTTP error other than 401/403); 2 usage; 3 HTTP 401; 4 HTTP 403.
// On an HTTP error the status and the WWW-Authenticate header are printed to stderr
// as `http status: N` and `www-authenticate: ...`.
//
// At the end the session is ended with an HTTP DELETE (transport.terminateSession():
// client.close() alone only aborts the streams and sends no DELETE in this SDK).

import { readFileSync } from 'node:fs';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport, StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';
import { McpError } from '@modelcontextprotocol/sdk/types.js';

const JOB_TOOLS = ['research.submit_job', 'research.job_status', 'research.job_items'];
const TERMINAL = new Set(['succeeded', 'partial', 'failed', 'cancelled', 'awaiting_approval']);
const POLL_MS = 200;
const JOB_TIMEOUT_MS = 120_000;
const MAX_PAGES = 10_000;

class Fail extends Error {
  constructor(message, code = 1) {
    super(message);
    this.exitCode = code;
  }
}

function writeLine(stream, text) {
  return new Promise((resolve) => stream.write(text + '\n', () => resolve()));
}

const out = (obj) => writeLine(process.stdout, JSON.stringify(obj));
const debug = process.env.MCP_DEBUG ? (...a) => console.error('[mcp-client]', ...a) : () => {};

// The last HTTP response with a status >= 400, so the error path can show its
// WWW-Authenticate header (the SDK's StreamableHTTPError carries only the status).
let lastHttpError = null;
const recordingFetch = async (input, init) => {
  const res = await fetch(input, init);
  if (res.status >= 400) {
    lastHttpError = {
      status: res.status,
      method: init?.method ?? 'GET',
      wwwAuthenticate: res.headers.get('www-authenticate'),
    };
  }
  return res;
};

function toolError(name, result) {
  const text = (result.content ?? [])
    .filter((c) => c.type === 'text')
    .map((c) => c.text)
    .join('\n');
  return new Fail(`tool ${name} returned isError: ${text || JSON.stringify(result)}`);
}

async function callOk(client, name, args) {
  const result = await client.callTool({ name, arguments: args });
  if (result.isError) throw toolError(name, result);
  return result;
}

async function listAllTools(client) {
  const tools = [];
  const seen = new Set();
  let cursor;
  for (let page = 0; page < MAX_PAGES; page++) {
    const res = await client.listTools(cursor === undefined ? undefined : { cursor });
    tools.push(...res.tools);
    cursor = res.nextCursor;
    if (cursor === undefined || cursor === null) return tools;
    if (seen.has(cursor)) throw new Fail(`tools/list repeated cursor ${JSON.stringify(cursor)}`);
    seen.add(cursor);
  }
  throw new Fail('tools/list: too many pages');
}

function structured(name, result) {
  const sc = result.structuredContent;
  if (sc === null || typeof sc !== 'object') {
    throw new Fail(`tool ${name} returned no structuredContent: ${JSON.stringify(result)}`);
  }
  return sc;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function cmdList(client, transport) {
  const tools = await listAllTools(client);
  await out({
    protocolVersion: transport.protocolVersion ?? null,
    serverInfo: client.getServerVersion() ?? null,
    tools: tools.map((t) => {
      const o = { name: t.name, description: t.description, inputSchema: t.inputSchema };
      if (t.outputSchema !== undefined) o.outputSchema = t.outputSchema;
      return o;
    }),
  });
}

async function cmdCall(client, name, args) {
  const result = await client.callTool({ name, arguments: args });
  await out(result);
  if (result.isError) throw toolError(name, result);
}

async function cmdJob(client, spec) {
  // Listing first also makes the SDK validate structuredContent against each tool's outputSchema.
  const tools = await listAllTools(client);
  const names = tools.map((t) => t.name);
  const missing = JOB_TOOLS.filter((n) => !names.includes(n));
  if (missing.length) throw new Fail(`missing tools: ${missing.join(', ')} (have: ${names.join(', ')})`);

  const submitted = structured('research.submit_job', await callOk(client, 'research.submit_job', { spec }));
  const jobId = submitted.job_id;
  if (typeof jobId !== 'string' || !jobId) {
    throw new Fail(`research.submit_job gave no job_id: ${JSON.stringify(submitted)}`);
  }
  debug('job', jobId, 'submitted');

  const deadline = Date.now() + JOB_TIMEOUT_MS;
  let status;
  for (;;) {
    const st = structured('research.job_status', await callOk(client, 'research.job_status', { job_id: jobId }));
    status = st.status;
    debug('job', jobId, 'status', status);
    if (TERMINAL.has(status)) break;
    if (Date.now() >= deadline) {
      throw new Fail(`job ${jobId} not finished after ${JOB_TIMEOUT_MS / 1000} s (status ${JSON.stringify(status)})`);
    }
    await sleep(POLL_MS);
  }

  let count = 0;
  let firstItem = null;
  let cursor = null;
  const seen = new Set();
  for (let page = 0; ; page++) {
    if (page >= MAX_PAGES) throw new Fail('research.job_items: too many pages');
    const args = { job_id: jobId, limit: 1000 };
    if (cursor !== null) args.cursor = cursor;
    const sc = structured('research.job_items', await callOk(client, 'research.job_items', args));
    if (!Array.isArray(sc.items)) {
      throw new Fail(`research.job_items structuredContent has no items array: ${JSON.stringify(sc)}`);
    }
    if (firstItem === null && sc.items.length > 0) firstItem = sc.items[0];
    count += sc.items.length;
    cursor = sc.next_cursor ?? null;
    if (cursor === null) break;
    if (seen.has(cursor)) throw new Fail(`research.job_items repeated cursor ${JSON.stringify(cursor)}`);
    seen.add(cursor);
  }

  await out({ job_id: jobId, status, items: count, first_item: firstItem, tools: names });
}

function usage() {
  console.error(
    'usage: MCP_URL=... [MCP_TOKEN=...] node mcp-client.mjs list | call NAME JSON_ARGS | job SPEC_JSON_FILE',
  );
  process.exit(2);
}

function httpStatusOf(err) {
  if (err instanceof StreamableHTTPError && typeof err.code === 'number' && err.code >= 400) return err.code;
  if (err instanceof UnauthorizedError) return 401;
  return null;
}

async function main() {
  const [cmd, ...rest] = process.argv.slice(2);
  const url = process.env.MCP_URL;
  if (!url || !cmd) usage();

  let run;
  if (cmd === 'list' && rest.length === 0) {
    run = (c, t) => cmdList(c, t);
  } else if (cmd === 'call' && (rest.length === 1 || rest.length === 2)) {
    let args;
    try {
      args = rest.length === 2 ? JSON.parse(rest[1]) : {};
    } catch (e) {
      console.error(`JSON_ARGS is not valid JSON: ${e.message}`);
      process.exit(2);
    }
    run = (c) => cmdCall(c, rest[0], args);
  } else if (cmd === 'job' && rest.length === 1) {
    let spec;
    try {
      spec = JSON.parse(readFileSync(rest[0], 'utf8'));
    } catch (e) {
      console.error(`cannot read spec ${rest[0]}: ${e.message}`);
      process.exit(2);
    }
    run = (c) => cmdJob(c, spec);
  } else {
    usage();
  }

  const headers = {};
  if (process.env.MCP_TOKEN) headers.Authorization = `Bearer ${process.env.MCP_TOKEN}`;
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers },
    fetch: recordingFetch,
  });
  const client = new Client({ name: 'trawl-test-mcp-client-ts', version: '0.0.0' });
  client.onerror = (e) => debug('transport error:', e?.message ?? e);

  let exitCode = 0;
  let connected = false;
  try {
    await client.connect(transport);
    connected = true;
    debug('connected: protocol', transport.protocolVersion, 'session', transport.sessionId);
    await run(client, transport);
  } catch (err) {
    exitCode = err instanceof Fail ? err.exitCode : 1;
    const status = httpStatusOf(err);
    if (status !== null) {
      const wa = lastHttpError && lastHttpError.status === status ? lastHttpError.wwwAuthenticate : null;
      console.error(`${connected ? 'request' : 'connect'} failed: ${err.message}`);
      console.error(`http status: ${status}`);
      if (wa) console.error(`www-authenticate: ${wa}`);
      exitCode = status === 401 ? 3 : status === 403 ? 4 : 1;
    } else if (err instanceof McpError) {
      console.error(`error: JSON-RPC error ${err.code}: ${err.message}${err.data !== undefined ? ` data=${JSON.stringify(err.data)}` : ''}`);
    } else if (err instanceof Fail) {
      console.error(`error: ${err.message}`);
    } else {
      console.error(`error: ${err?.stack ?? err}`);
    }
  }

  if (connected) {
    try {
      await transport.terminateSession(); // DELETE (a 405 answer is accepted)
    } catch (err) {
      console.error(`session DELETE failed: ${err.message}`);
      if (exitCode === 0) exitCode = 1;
    }
  }
  try {
    await client.close();
  } catch (err) {
    debug('close:', err?.message ?? err);
  }
  process.exit(exitCode);
}

main().catch((err) => {
  console.error(`error: ${err?.stack ?? err}`);
  process.exit(1);
});
