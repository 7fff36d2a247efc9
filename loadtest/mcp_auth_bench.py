#!/usr/bin/env python3
"""Benchmark: what OAuth token validation costs an MCP `tools/call` on `/mcp`.

Starts, on loopback ports, two `trawl dev` processes (release build, each with
its own fresh state folder) and the test authorization server
(`tests/upstreams/oauth-server.mjs`, RS256 JWT access tokens by default):

- `off`: /mcp open (`TRAWL_API_KEYS=` empty, no OAuth settings);
- `jwt`: /mcp requires a bearer token (`TRAWL_RESOURCE_URI`, `TRAWL_OAUTH_ISSUER`);
  every request carries a client-credentials JWT with `aud` = the resource URI
  and `scope` = `tools:call research:read`. The keys are fetched from the
  issuer's JWKS at start (trawl warms the cache) and then used from memory;
- `key` (only with `--variants ...,key`): the same server as `jwt`, started
  with `TRAWL_API_KEYS=<key>` as well, called with that API key as the bearer:
  authentication without a JWT, to tell the signature check from the rest.

For each concurrency C, each round runs every variant once (the order rotates
from one round to the next): C fresh MCP sessions (`initialize`, then
`notifications/initialized`), then `wrk` with C threads of one connection each,
each connection on its own session, sending the same `tools/call` of
`tool_search` ({"query": "search", "limit": 1}) for `--warmup` seconds (not
counted) and then `--duration` seconds (counted). Every response must be HTTP
200 whose SSE body holds the JSON-RPC result (`"id":1,"result":{`, with
`"isError":false`) and no JSON-RPC error; one failed request fails the run (the
first call of each run is also parsed in full). The sessions are deleted
afterwards.

By default each call is sent with `Connection: close`, so it opens a connection
of its own: before commit 9a3e1e7 (TCP_NODELAY on the API's sockets), trawl's
SSE answer on a reused connection (headers, then the event, written separately)
waited for the client's delayed ACK, about 40 ms per call on Linux, which hid
everything else. `--keep-alive` reuses each connection, as MCP clients do; the
default stays as it was so that figures remain comparable with the first ones.

Reported per run: requests/s, latency p50 / p99 / max (wrk's, per request, from
the request's write to the response's end), the CPU trawl and wrk used (cores,
from /proc and wait4) and what else the machine did meanwhile (`other_cores`:
other programs and uncharged kernel work), and at the end the medians per
variant and concurrency with the ratio of each variant's median requests/s to
`off`'s. Before each run the script waits (`--idle-wait`, up to 120 s) for an
idle second, as the machine may be shared.

    python3 loadtest/mcp_auth_bench.py [--duration 15] [--warmup 3] [--rounds 3]
        [--concurrency 16,64] [--variants off,jwt[,key]] [--alg RS256|ES256]
        [--keep-alive] [--no-build] [--binary PATH] [--json FILE]

Needs `wrk` (apt-get install wrk), Node and `npm ci --prefix tests/upstreams`.
"""

import argparse
import base64
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROTOCOL = "2025-11-25"
CALL = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "tools/call",
    "params": {"name": "tool_search", "arguments": {"query": "search", "limit": 1}},
}
CLIENT_ID, CLIENT_SECRET = "bench", "bench-secret"
API_KEY = "bench-api-key-0123456789abcdef"
CLK_TCK = os.sysconf("SC_CLK_TCK")

# Every process this script starts, so that only those are stopped.
started: list[subprocess.Popen] = []


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_all() -> None:
    for p in reversed(started):
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in reversed(started):
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    started.clear()


def cpu_seconds(pid: int) -> float:
    """utime + stime of a live process (all its threads), from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def machine_busy() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs, from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return sum(v) - idle, sum(v)


def wait_idle(max_wait: float, threshold: float = 0.15) -> float:
    """Waits (up to max_wait seconds) for a second in which the machine's CPUs are
    less than `threshold` busy, so that a run does not start while another
    program is working; returns the last second's busy fraction."""
    deadline = time.monotonic() + max_wait
    while True:
        b0 = machine_busy()
        time.sleep(1)
        b1 = machine_busy()
        busy = (b1[0] - b0[0]) / max(1, b1[1] - b0[1])
        if busy < threshold or time.monotonic() >= deadline:
            return round(busy, 3)


def http(method: str, url: str, body: bytes | None = None, headers: dict | None = None,
         timeout: float = 10) -> tuple[int, dict, bytes]:
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()


def wait_ready(url: str, p: subprocess.Popen, log: str, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if p.poll() is not None:
            sys.exit(f"{what} exited ({p.returncode}); see {log}:\n{open(log).read()[-3000:]}")
        try:
            if http("GET", url, timeout=2)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    sys.exit(f"{what} not ready after {timeout} s; see {log}")


def start_trawl(binary: str, work: str, name: str, port: int, extra_env: dict) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("TRAWL_") and k not in ("BRIGHTDATA_API_TOKEN", "RUST_LOG")}
    # The bench measures authentication, not the per-caller rate of /mcp (one
    # caller sends everything here): that limit is lifted.
    env.update({"TRAWL_LISTEN": f"127.0.0.1:{port}", "TRAWL_API_KEYS": "",
                "TRAWL_RATE_MCP": "1000000", "TRAWL_RATE_MCP_BURST": "1000000"})
    env.update(extra_env)
    log = os.path.join(work, f"trawl-{name}.log")
    p = subprocess.Popen([binary, "dev", "--state", os.path.join(work, f"state-{name}")],
                         env=env, stdin=subprocess.DEVNULL, stdout=open(log, "w"),
                         stderr=subprocess.STDOUT)
    started.append(p)
    wait_ready(f"http://127.0.0.1:{port}/healthz", p, log, f"trawl dev ({name})")
    return p


def start_oauth(work: str, resource: str, alg: str) -> str:
    config = {
        "port": 0,
        "signing_alg": alg,
        "resources": [{"uri": resource, "scopes": ["research:read", "research:write", "tools:call"],
                       "ttl_seconds": 7200}],
        "clients": [{"client_id": CLIENT_ID, "client_secret": CLIENT_SECRET,
                     "grant_types": ["client_credentials"], "scope": "tools:call research:read",
                     "token_endpoint_auth_method": "client_secret_basic"}],
    }
    path = os.path.join(work, "oauth.json")
    with open(path, "w") as f:
        json.dump(config, f)
    log = os.path.join(work, "oauth.log")
    p = subprocess.Popen(["node", os.path.join(ROOT, "tests", "upstreams", "oauth-server.mjs"), path],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=open(log, "w"), text=True)
    started.append(p)
    line = p.stdout.readline()
    if not line:
        sys.exit(f"the authorization server did not start; see {log}:\n{open(log).read()[-3000:]}")
    return json.loads(line)["issuer"]


def client_token(issuer: str, resource: str) -> str:
    _, _, doc = http("GET", f"{issuer}/.well-known/oauth-authorization-server")
    token_url = json.loads(doc)["token_endpoint"]
    basic = base64.b64encode(f"{CLIENT_ID}:{CLIENT_SECRET}".encode()).decode()
    form = urllib.parse.urlencode({"grant_type": "client_credentials", "resource": resource,
                                   "scope": "tools:call research:read"}).encode()
    status, _, body = http("POST", token_url, form, {
        "authorization": f"Basic {basic}", "content-type": "application/x-www-form-urlencoded"})
    if status != 200:
        sys.exit(f"token request failed: {status} {body[:500]!r}")
    token = json.loads(body)["access_token"]
    assert token.count(".") == 2, "expected a JWT access token"
    return token


def mcp_headers(bearer: str, session: str | None = None) -> dict:
    h = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    if bearer:
        h["authorization"] = f"Bearer {bearer}"
    if session:
        h["mcp-session-id"] = session
        h["mcp-protocol-version"] = PROTOCOL
    return h


def sse_messages(body: bytes) -> list[dict]:
    """The JSON-RPC messages of a response body (SSE `data:` lines, or plain JSON)."""
    text = body.decode()
    if text.lstrip().startswith("{"):
        return [json.loads(text)]
    out = []
    for line in text.splitlines():
        if line.startswith("data:") and line[5:].strip():
            out.append(json.loads(line[5:]))
    return out


def open_session(url: str, bearer: str) -> str:
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": PROTOCOL, "capabilities": {},
                       "clientInfo": {"name": "mcp_auth_bench", "version": "1"}}}
    status, headers, body = http("POST", url, json.dumps(init).encode(), mcp_headers(bearer))
    if status != 200 or "mcp-session-id" not in headers:
        sys.exit(f"initialize failed: {status} {headers} {body[:500]!r}")
    session = headers["mcp-session-id"]
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    status, _, body = http("POST", url, json.dumps(note).encode(), mcp_headers(bearer, session))
    if status != 202:
        sys.exit(f"notifications/initialized: {status} {body[:500]!r}")
    return session


def check_call(url: str, bearer: str, session: str) -> dict:
    """One `tools/call` outside wrk, its result checked in full."""
    status, headers, body = http("POST", url, json.dumps(CALL).encode(), mcp_headers(bearer, session))
    msgs = [m for m in sse_messages(body) if "id" in m]
    if status != 200 or len(msgs) != 1 or "result" not in msgs[0] or "error" in msgs[0] \
            or msgs[0]["result"].get("isError"):
        sys.exit(f"tools/call failed: {status} {headers.get('content-type')} {body[:800]!r}")
    return {"content_type": headers.get("content-type"), "bytes": len(body), "result": msgs[0]["result"]}


def close_session(url: str, bearer: str, session: str) -> None:
    http("DELETE", url, None, mcp_headers(bearer, session))


LUA = r"""
-- Written by loadtest/mcp_auth_bench.py: one MCP session per wrk thread (each
-- thread has one connection), a fixed tools/call body, every response checked.
local sessions = {%(sessions)s}
local bearer = %(bearer)s
local close = %(close)s
local body = %(body)s
local threads = {}
local n = 0

function setup(thread)
  n = n + 1
  thread:set("sid", sessions[n])
  table.insert(threads, thread)
end

function init(args)
  local h = {
    ["Content-Type"] = "application/json",
    ["Accept"] = "application/json, text/event-stream",
    ["Mcp-Session-Id"] = sid,
    ["Mcp-Protocol-Version"] = "%(protocol)s",
  }
  if close then h["Connection"] = "close" end
  if bearer ~= "" then h["Authorization"] = "Bearer " .. bearer end
  req = wrk.format("POST", "/mcp", h, body)
  ok = 0
  bad = 0
  first_bad = ""
end

function request()
  return req
end

function response(status, headers, b)
  -- The result itself may hold "error" (tool_search returns output schemas, and
  -- one has an `error` property): the check is on the JSON-RPC message's members.
  if status == 200 and string.find(b, '"jsonrpc":"2.0","id":1,"result":{', 1, true)
      and string.find(b, '"isError":false}}', 1, true)
      and not string.find(b, '"jsonrpc":"2.0","id":1,"error":', 1, true) then
    ok = ok + 1
  else
    bad = bad + 1
    if first_bad == "" then first_bad = status .. " " .. string.sub(b, 1, 400) end
  end
end

function done(summary, latency, requests)
  local okn, badn, fb = 0, 0, ""
  for _, t in ipairs(threads) do
    okn = okn + t:get("ok")
    badn = badn + t:get("bad")
    if fb == "" then fb = t:get("first_bad") end
  end
  local e = summary.errors
  io.write(string.format(
    'BENCH {"requests":%%d,"duration_us":%%d,"ok":%%d,"bad":%%d,"connect_errors":%%d,"read_errors":%%d,' ..
    '"write_errors":%%d,"status_errors":%%d,"timeouts":%%d,"p50_us":%%d,"p90_us":%%d,"p99_us":%%d,' ..
    '"max_us":%%d,"mean_us":%%.1f}\n',
    summary.requests, summary.duration, okn, badn, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max, latency.mean))
  if fb ~= "" then io.write("BENCH_BAD " .. fb .. "\n") end
end
"""


def lua_str(s: str) -> str:
    return json.dumps(s)  # a JSON string of ASCII is a valid Lua string literal


def run_wrk(work: str, port: int, bearer: str, sessions: list[str], seconds: int,
            trawl: subprocess.Popen, keep_alive: bool) -> dict:
    script = os.path.join(work, "call.lua")
    with open(script, "w") as f:
        f.write(LUA % {
            "sessions": ", ".join(lua_str(s) for s in sessions),
            "bearer": lua_str(bearer),
            "body": lua_str(json.dumps(CALL, separators=(",", ":"))),
            "protocol": PROTOCOL,
            "close": "false" if keep_alive else "true",
        })
    c = len(sessions)
    cmd = ["wrk", "-t", str(c), "-c", str(c), "-d", f"{int(seconds)}s", "--timeout", "5s",
           "-s", script, f"http://127.0.0.1:{port}/mcp"]
    trawl_cpu0, busy0 = cpu_seconds(trawl.pid), machine_busy()
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    started.append(p)
    out = p.stdout.read()
    _, status, usage = os.wait4(p.pid, 0)
    started.remove(p)
    wall = time.monotonic() - t0
    trawl_cpu, busy1 = cpu_seconds(trawl.pid) - trawl_cpu0, machine_busy()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"wrk failed:\n{out}")
    line = next((l for l in out.splitlines() if l.startswith("BENCH ")), None)
    if line is None:
        sys.exit(f"wrk printed no result:\n{out}")
    r = json.loads(line[6:])
    bad = [l for l in out.splitlines() if l.startswith("BENCH_BAD ")]
    errors = r["bad"] + r["connect_errors"] + r["read_errors"] + r["write_errors"] + r["timeouts"]
    if errors or r["ok"] != r["requests"]:
        sys.exit(f"{errors} failed requests of {r['requests']}: {r}\n{bad[0] if bad else ''}")
    secs = r["duration_us"] / 1e6
    ncpu = os.cpu_count() or 1
    machine = (busy1[0] - busy0[0]) / max(1, busy1[1] - busy0[1])
    trawl_cores, wrk_cores = trawl_cpu / wall, (usage.ru_utime + usage.ru_stime) / wall
    return {
        "requests": r["requests"],
        "rps": round(r["requests"] / secs, 1),
        "p50_ms": r["p50_us"] / 1000,
        "p90_ms": r["p90_us"] / 1000,
        "p99_ms": r["p99_us"] / 1000,
        "max_ms": r["max_us"] / 1000,
        "trawl_cores": round(trawl_cores, 2),
        "wrk_cores": round(wrk_cores, 2),
        "machine_busy": round(machine, 3),
        # Everything else: other programs, and the kernel's loopback work that
        # is not charged to either process (softirq).
        "other_cores": round(machine * ncpu - trawl_cores - wrk_cores, 2),
        "trawl_cpu_us_per_call": round(trawl_cpu / r["requests"] * 1e6, 1),
    }


def one_run(work: str, target: dict, c: int, warmup: int, duration: int, keep_alive: bool,
            idle_wait: float) -> dict:
    url = target["url"]
    idle = wait_idle(idle_wait) if idle_wait > 0 else None
    sessions = [open_session(url, target["bearer"]) for _ in range(c)]
    try:
        check_call(url, target["bearer"], sessions[0])
        if warmup > 0:
            run_wrk(work, target["port"], target["bearer"], sessions, warmup, target["proc"], keep_alive)
        r = run_wrk(work, target["port"], target["bearer"], sessions, duration, target["proc"], keep_alive)
        r["busy_before"] = idle
        return r
    finally:
        for s in sessions:
            close_session(url, target["bearer"], s)


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=int, default=15, help="counted seconds per run")
    ap.add_argument("--warmup", type=int, default=3, help="uncounted seconds before each run")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--concurrency", default="16,64", help="comma-separated connection counts")
    ap.add_argument("--variants", default="off,jwt", help="comma-separated: off, jwt, key")
    ap.add_argument("--alg", default="RS256", choices=["RS256", "ES256"], help="the token's signature")
    ap.add_argument("--keep-alive", action="store_true",
                    help="reuse each connection, as MCP clients do (default: `Connection: close`, a new one per call)")
    ap.add_argument("--idle-wait", type=float, default=120,
                    help="before each run, wait up to this long for an idle second (CPUs under 15%% busy)")
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--binary", default=os.path.join(ROOT, "target", "release", "trawl"))
    ap.add_argument("--json", help="write every run and the summary to this file")
    a = ap.parse_args()
    variants = [v.strip() for v in a.variants.split(",") if v.strip()]
    if variants[0] != "off" or not set(variants) <= {"off", "jwt", "key"}:
        sys.exit("--variants must start with off and name only off, jwt, key")
    levels = [int(x) for x in a.concurrency.split(",")]
    if not a.no_build:
        subprocess.run(["cargo", "build", "--release", "-p", "trawl"], cwd=ROOT, check=True)

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    work = tempfile.mkdtemp(prefix="mcp_auth_bench.")
    runs = []
    try:
        off_port, on_port = free_port(), free_port()
        resource = f"http://127.0.0.1:{on_port}/mcp"
        off = start_trawl(a.binary, work, "off", off_port, {})
        targets = {"off": {"port": off_port, "proc": off, "bearer": ""}}
        if {"jwt", "key"} & set(variants):
            issuer = start_oauth(work, resource, a.alg)
            on = start_trawl(a.binary, work, "on", on_port, {
                "TRAWL_RESOURCE_URI": resource, "TRAWL_OAUTH_ISSUER": issuer,
                "TRAWL_API_KEYS": API_KEY if "key" in variants else ""})
            token = client_token(issuer, resource)
            targets["jwt"] = {"port": on_port, "proc": on, "bearer": token}
            targets["key"] = {"port": on_port, "proc": on, "bearer": API_KEY}
            # Without a credential the protected server must refuse.
            status, _, _ = http("POST", resource, json.dumps(CALL).encode(), mcp_headers(""))
            if status != 401:
                sys.exit(f"/mcp with OAuth answered {status} without a token, not 401")
        for t in targets.values():
            t["url"] = f"http://127.0.0.1:{t['port']}/mcp"
        s = open_session(targets["off"]["url"], "")
        sample = check_call(targets["off"]["url"], "", s)
        close_session(targets["off"]["url"], "", s)
        print(f"# tools/call answer: {sample['content_type']}, {sample['bytes']} bytes", flush=True)
        print(f"# work folder: {work}; wrk {a.warmup} s warm-up + {a.duration} s per run; "
              f"{'keep-alive' if a.keep_alive else 'a new connection per call'}; "
              f"load average before: {os.getloadavg()[0]:.2f}", flush=True)

        for c in levels:
            for rnd in range(a.rounds):
                order = variants[rnd % len(variants):] + variants[:rnd % len(variants)]
                for v in order:
                    r = one_run(work, targets[v], c, a.warmup, a.duration, a.keep_alive, a.idle_wait)
                    r.update({"variant": v, "concurrency": c, "round": rnd + 1})
                    runs.append(r)
                    print(json.dumps(r), flush=True)
    finally:
        stop_all()

    summary = []
    print()
    print("| concurrency | variant | req/s (runs) | median req/s | p50 ms | p99 ms | trawl cores | wrk cores "
          "| other cores | trawl CPU µs/call | ratio to off |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for c in levels:
        base = median([r["rps"] for r in runs if r["concurrency"] == c and r["variant"] == "off"])
        for v in variants:
            rs = [r for r in runs if r["concurrency"] == c and r["variant"] == v]
            m = {
                "concurrency": c, "variant": v,
                "rps_runs": [r["rps"] for r in rs],
                "rps": median([r["rps"] for r in rs]),
                "p50_ms": median([r["p50_ms"] for r in rs]),
                "p99_ms": median([r["p99_ms"] for r in rs]),
                "trawl_cores": median([r["trawl_cores"] for r in rs]),
                "wrk_cores": median([r["wrk_cores"] for r in rs]),
                "other_cores": median([r["other_cores"] for r in rs]),
                "trawl_cpu_us_per_call": median([r["trawl_cpu_us_per_call"] for r in rs]),
            }
            m["ratio"] = round(m["rps"] / base, 3)
            summary.append(m)
            print(f"| {c} | {v} | {' / '.join(f'{x:,.0f}' for x in m['rps_runs'])} | {m['rps']:,.0f} | "
                  f"{m['p50_ms']:.2f} | {m['p99_ms']:.2f} | {m['trawl_cores']:.2f} | {m['wrk_cores']:.2f} | "
                  f"{m['other_cores']:.2f} | "
                  f"{m['trawl_cpu_us_per_call']:.0f} | {m['ratio']:.3f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "runs": runs, "summary": summary}, f, indent=2)


if __name__ == "__main__":
    main()
