#!/usr/bin/env python3
"""Benchmark: N page slices through the deployed shape, and the bare baseline.

trawl: `trawl api`, `trawl scheduler` and two `trawl worker` processes (release
build) over the real Postgres, NATS JetStream and Redis of this machine, a fresh
database, stream prefix and cache prefix per run, and `trawl sim` (zero latency,
no faults) as Bright Data in a process of its own. A job of N page URLs with the
cache bypassed (`max_age: 0`) is submitted over HTTP; the clock runs from the
submit to the job's end. CPU seconds and peak RSS (VmHWM) are read per role from
/proc just before the roles are stopped.

Baseline, on the same services: `bare_loop` (tests/examples/bare_loop.rs)
publishes N messages to a JetStream work-queue stream, pulls them with the same
concurrency as the two workers, inserts one row each into Postgres and acks.

With `--otlp`, each run is an A/B pair of trawl runs: one without tracing and
one with every role (api, scheduler, workers) exporting its spans over OTLP gRPC
(`OTEL_EXPORTER_OTLP_ENDPOINT`) to `otlp_sink` (tests/examples/otlp_sink.rs), a
receiver on this machine that counts the spans it is sent. The order alternates
from run to run. The sink is stopped after the roles (which flush their last
spans on exit), so its count is every span exported for the run. The bare loop
is skipped in this mode unless `--bare` is given.

With `--api URL --api-key KEY`, nothing is started: the job goes to a running
API (the compose stack of `deploy/check --live --bench N`, for one), and each run
is timed from the submit to the job's end, as the host-process runs are. Their
ratio is what containers cost.

With `--sim-latency 500ms --workers N`, the simulator answers each call after
that long and the run is bound by the upstream, not by CPU: the bench then
prints the throughput against what N workers of 32 slices at a time can reach
(N x 32 / latency), and skips the bare loop.

    python3 loadtest/deployed_bench.py [--slices 10000] [--runs 1]
    python3 loadtest/deployed_bench.py --slices 10000 --runs 3 --otlp [--bare]
    python3 loadtest/deployed_bench.py --slices 2000 --sim-latency 500ms --workers 1 2 4
    python3 loadtest/deployed_bench.py --slices 2000 --runs 3 --api http://127.0.0.1:8080 --api-key KEY
"""

import argparse
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

from embedded_bench import job as embedded_job

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PG_ADMIN = os.environ.get("TRAWL_TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
NATS = os.environ.get("TRAWL_TEST_NATS_URL", "nats://127.0.0.1:4222")
REDIS = os.environ.get("TRAWL_TEST_REDIS_URL", "redis://127.0.0.1:6379")
CONCURRENCY = 32
WORKERS = 2
TICK = os.sysconf("SC_CLK_TCK")


def geos() -> list:
    """Every country code trawl knows (services/core/src/geo.rs)."""
    src = open(os.path.join(ROOT, "services/core/src/geo.rs")).read()
    return re.search(r'const CODES: &str = "([a-z ]+)";', src).group(1).split()


def job(n: int, budget: bool = True) -> str:
    """The embedded benchmark's job (same pages, extraction, schema, no cache),
    with or without its `max_usd`. Past 20,000 slices, the pages are
    n / countries URLs (rounded down) in every country (a few fewer than n slices), so that
    the spec stays small, and the budget is raised to match."""
    if n > 20_000:
        g = geos()
        text = embedded_job(n // len(g)).replace("geos: [us]", f"geos: [{', '.join(g)}]")
        text = text.replace("budget: {max_usd: 1000}", f"budget: {{max_usd: {n}}}")
        return text if budget else re.sub(r"budget: \{max_usd: \d+\}\n", "", text)
    text = embedded_job(n)
    return text if budget else text.replace("budget: {max_usd: 1000}\n", "")


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def log_time(path: str, pattern: str):
    """The timestamp (seconds since the epoch) of the first log line matching."""
    from datetime import datetime
    with open(path) as f:
        for line in f:
            stamp = re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z", line)
            if stamp and re.search(pattern, line):
                return datetime.fromisoformat(stamp.group(0).replace("Z", "+00:00")).timestamp()
    return None


def psql(sql: str) -> None:
    subprocess.run(["psql", PG_ADMIN, "-qc", sql], check=True, stdout=subprocess.DEVNULL)


def proc_stats(pid: int) -> dict:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / TICK
    rss = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                rss = int(line.split()[1]) * 1024
    return {"cpu_s": cpu, "peak_rss_mb": rss / 1e6}


def service_cpu() -> dict:
    """CPU seconds so far of the Postgres, NATS and Redis server processes."""
    out = {"postgres": 0.0, "nats-server": 0.0, "redis-server": 0.0}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                raw = f.read()
        except OSError:
            continue
        name = raw[raw.index("(") + 1:raw.rindex(")")]
        fields = raw.rsplit(")", 1)[1].split()
        for key in out:
            if name.startswith(key[:15]):
                out[key] += (int(fields[11]) + int(fields[12])) / TICK
    return out


def machine_cpu() -> tuple:
    """(busy, total) jiffies of the whole machine, from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return sum(v) - idle, sum(v)


def wait_line(path: str, pattern: str, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(path) as f:
            m = re.search(pattern, f.read())
        if m:
            return m.group(1)
        time.sleep(0.05)
    raise SystemExit(f"no '{pattern}' in {path} after {timeout}s:\n" + open(path).read())


def http(method: str, url: str, key: str, body: bytes = None, ctype: str = None) -> dict:
    req = urllib.request.Request(url, data=body, method=method)
    req.add_header("Authorization", f"Bearer {key}")
    if ctype:
        req.add_header("Content-Type", ctype)
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def sink_start(binary: str) -> tuple:
    """Starts the OTLP sink; returns (process, endpoint URL)."""
    sink = subprocess.Popen([binary, "--port", "0"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    line = sink.stdout.readline()
    m = re.match(r"listening on (http://\S+)", line)
    if not m:
        sink.kill()
        raise SystemExit(f"otlp_sink did not start: {line!r}")
    return sink, m.group(1)


def sink_stop(sink: subprocess.Popen) -> dict:
    """Closes the sink's stdin; returns its final counts (every span the roles
    sent, their exit flush included) and, under "at_end", the counts it printed
    when the job ended (SIGUSR1), if any."""
    sink.stdin.close()
    try:
        out = sink.stdout.read()
        sink.wait(timeout=30)
    except subprocess.TimeoutExpired:
        sink.kill()
        sink.wait()
        raise
    lines = [json.loads(x) for x in out.strip().splitlines()]
    res = dict(lines[-1])
    if len(lines) > 1:
        res["at_end"] = lines[0]
    return res


def trawl_run(binary: str, n: int, budget: bool, sink: tuple = None, workers: int = WORKERS,
              sim_latency: str = "0s") -> dict:
    """One trawl run; with `sink` (its process, endpoint, and more variables for
    the roles' environment) every role exports its spans there, and the sink's CPU and counts are sampled at the job's end."""
    otlp = sink[1] if sink else None
    tag = f"{random.getrandbits(48):012x}"
    db = f"trawl_bench_{tag}"
    psql(f"CREATE DATABASE {db}")
    base = PG_ADMIN.rsplit("/", 1)[0]
    procs = {}
    with tempfile.TemporaryDirectory() as d:
        try:
            sim_log = os.path.join(d, "sim.log")
            sim = subprocess.Popen([binary, "sim", "--port", "0", "--sim-latency", sim_latency],
                                   stderr=open(sim_log, "w"), stdout=subprocess.DEVNULL)
            procs["sim"] = sim
            sim_url = wait_line(sim_log, r"simulator on (http://\S+)")
            key = f"bench-{tag}"
            env = {
                "PATH": os.environ.get("PATH", ""),
                "RUST_LOG": os.environ.get("BENCH_LOG", "warn"),
                "TRAWL_DATABASE_URL": f"{base}/{db}",
                "TRAWL_NATS_URL": NATS,
                "TRAWL_NATS_PREFIX": f"bench_{tag}",
                "TRAWL_REDIS_URL": REDIS,
                "TRAWL_REDIS_PREFIX": f"bench_{tag}:",
                "TRAWL_LISTEN": "127.0.0.1:0",
                "TRAWL_API_KEYS": key,
                "TRAWL_WORKER_CONCURRENCY": str(CONCURRENCY),
                "BRIGHTDATA_API_URL": sim_url,
                "BRIGHTDATA_API_TOKEN": "bench",
            }
            if otlp:
                env["OTEL_EXPORTER_OTLP_ENDPOINT"] = otlp
                env.update(sink[2])
            logs = {}
            roles = ["api", "scheduler"] + [f"worker-{i}" for i in range(workers)]
            for role in roles:
                logs[role] = os.path.join(d, f"{role}.log")
                role_env = {**env, "OTEL_SERVICE_NAME": f"trawl-{role}"} if otlp else dict(env)
                if role == "scheduler":
                    # When the job was planned and published, from its own log.
                    role_env["RUST_LOG"] = os.environ.get("BENCH_LOG", "warn") + ",trawl_scheduler=debug"
                procs[role] = subprocess.Popen([binary, role.split("-")[0]], env=role_env,
                                               stdout=subprocess.DEVNULL, stderr=open(logs[role], "w"))
            api = wait_line(logs["api"], r"listening on (http://\S+)")
            for w in roles[2:]:
                wait_line(logs[w], r"(worker running)")
            watched = {r: p.pid for r, p in procs.items()}
            if sink:
                watched["otlp_sink"] = sink[0].pid
            own0 = {r: proc_stats(pid)["cpu_s"] for r, pid in watched.items()}
            t0 = time.monotonic()
            cpu0 = machine_cpu()
            svc0 = service_cpu()
            submitted_at = time.time()
            sub = http("POST", f"{api}/v1/jobs", key, job(n, budget).encode(), "application/yaml")
            job_id = sub["job_id"]
            rss = {r: [] for r in procs}
            while True:
                v = http("GET", f"{api}/v1/jobs/{job_id}", key)
                for r, p in procs.items():
                    rss[r].append(rss_mb(p.pid))
                if v["status"] in ("succeeded", "partial", "failed", "cancelled"):
                    break
                time.sleep(0.2)
            wall = time.monotonic() - t0
            planned = log_time(logs["scheduler"], r"job planned")
            published = log_time(logs["scheduler"], r"published")
            cpu1 = machine_cpu()
            svc1 = service_cpu()
            busy = (cpu1[0] - cpu0[0]) / max(1, cpu1[1] - cpu0[1])
            stats = {r: proc_stats(pid) for r, pid in watched.items()}
            if sink:
                sink[0].send_signal(signal.SIGUSR1)
            # CPU of the job: each process's CPU over the measured window.
            for r, st in stats.items():
                st["job_cpu_s"] = st["cpu_s"] - own0[r]
            # What else the machine did meanwhile (other users' builds, tests):
            # busy CPU not accounted for by these processes and the services.
            ours = sum(st["job_cpu_s"] for st in stats.values()) + sum(svc1[k] - svc0[k] for k in svc0)
            other = max(0.0, (cpu1[0] - cpu0[0]) / TICK - ours) / wall
            if os.environ.get("BENCH_LOG"):
                for role in roles:
                    print(f"--- {role}", file=sys.stderr)
                    sys.stderr.write(open(logs[role]).read()[-3000:])
            return {"wall_s": wall, "slices": v["counts"]["slices"]["total"], "status": v["status"],
                    "items": v["counts"]["items"], "machine_busy": busy, "other_cores": other, "roles": stats,
                    "services_cpu_s": {k: svc1[k] - svc0[k] for k in svc0},
                    # RSS (MB) at a quarter, half and three quarters of the run, and the most.
                    "rss_mb": {r: [round(x[len(x) // 4], 1), round(x[len(x) // 2], 1), round(x[3 * len(x) // 4], 1),
                                   round(max(x), 1)] for r, x in rss.items() if x},
                    "planned_after_s": planned and planned - submitted_at,
                    "published_after_s": published and published - submitted_at}
        finally:
            for p in procs.values():
                p.terminate()
            for p in procs.values():
                try:
                    p.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    p.kill()
            psql(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")


def bare_run(binary: str, n: int) -> dict:
    svc0 = service_cpu()
    out = subprocess.run([binary, "--messages", str(n), "--concurrency", str(CONCURRENCY * WORKERS)],
                         check=True, capture_output=True, text=True,
                         env={**os.environ, "TRAWL_TEST_DATABASE_URL": PG_ADMIN, "TRAWL_TEST_NATS_URL": NATS})
    svc1 = service_cpu()
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res["services_cpu_s"] = {k: svc1[k] - svc0[k] for k in svc0}
    return res


def print_roles(t: dict) -> None:
    for role, s in t["roles"].items():
        print(f"  {role:10} CPU {s['cpu_s']:.2f} s ({1000 * s['cpu_s'] / t['slices']:.3f} s per 1,000 slices; "
              f"{s['job_cpu_s']:.2f} s during the job), peak RSS {s['peak_rss_mb']:.1f} MB")
    print("  services CPU during the trawl run: " + ", ".join(f"{k} {v:.2f} s" for k, v in t["services_cpu_s"].items()))
    print("  RSS MB at 1/4, 1/2, 3/4 of the run and the most: " + ", ".join(
        f"{r} {v}" for r, v in t.get("rss_mb", {}).items()))
    if t.get("published_after_s"):
        print(f"  planned {t['planned_after_s']:.2f} s and published {t['published_after_s']:.2f} s after the submit: "
              f"{t['slices'] / t['published_after_s']:,.0f} slices/s planned and published")
    print(f"  machine busy {100 * t['machine_busy']:.0f}% of both cores during the trawl run; "
          f"other work {t['other_cores']:.2f} cores")


def otlp_main(args, trawl_bin: str, sink_bin: str, bare_bin: str) -> None:
    """A/B: each run, trawl without tracing and with every role exporting to the sink."""
    rates = {"off": [], "on": []}
    otel_env = dict(kv.split("=", 1) for kv in args.otel_env)
    for i in range(args.runs):
        order = ["off", "on"] if i % 2 == 0 else ["on", "off"]
        res = {}
        for mode in order:
            if mode == "on":
                sink = sink_start(sink_bin) + (otel_env,)
                try:
                    t = trawl_run(trawl_bin, args.slices, not args.no_budget, sink)
                finally:
                    counts = sink_stop(sink[0])
                t["otlp"] = counts
            else:
                t = trawl_run(trawl_bin, args.slices, not args.no_budget)
            t["rate"] = t["slices"] / t["wall_s"]
            res[mode] = t
            rates[mode].append(t["rate"])
        out = {"run": i + 1, "order": order, **res}
        if args.bare:
            out["bare"] = bare_run(bare_bin, args.slices)
        print(json.dumps(out, indent=2))
        off, on = res["off"], res["on"]
        o = on["otlp"]
        print(f"run {i + 1} ({' then '.join(order)}): off {off['rate']:,.0f} slices/s ({off['status']}), "
              f"on {on['rate']:,.0f} slices/s ({on['status']}), ratio {on['rate'] / off['rate']:.3f}; "
              f"other work {off['other_cores']:.2f} / {on['other_cores']:.2f} cores")
        at_end = o.get("at_end", {}).get("spans")
        at_end = f"{at_end:,}" if at_end is not None else "?"
        print(f"  spans received {o['spans']:,} in {o['requests']:,} requests, {o['bytes'] / 1e6:.1f} MB "
              f"({o['spans'] / on['slices']:.2f} per slice); by the job's end {at_end}")
        for mode in ("off", "on"):
            print(f" tracing {mode}:")
            print_roles(res[mode])
        if args.bare:
            b = out["bare"]
            print(f"  bare loop {b['messages'] / b['wall_s']:,.0f} msg/s")
        sys.stdout.flush()
    m_off, m_on = statistics.median(rates["off"]), statistics.median(rates["on"])
    print(f"medians: off {m_off:,.0f}, on {m_on:,.0f} slices/s, ratio {m_on / m_off:.3f} "
          f"(overhead {100 * (1 - m_on / m_off):.1f} %)")


def seconds(d: str) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s)", d)
    if not m:
        raise SystemExit(f"--sim-latency: {d!r} is not like 500ms or 1s")
    return float(m.group(1)) / (1000 if m.group(2) == "ms" else 1)


def upstream_main(args, trawl_bin: str) -> None:
    """Upstream-bound: each worker count, `runs` times, against N x 32 / latency."""
    latency = seconds(args.sim_latency)
    for w in args.workers:
        ideal = w * CONCURRENCY / latency
        for i in range(args.runs):
            t = trawl_run(trawl_bin, args.slices, not args.no_budget, workers=w,
                          sim_latency=args.sim_latency)
            rate = t["slices"] / t["wall_s"]
            print(f"{w} worker(s), run {i + 1}: {rate:,.1f} slices/s ({t['status']}), ideal {ideal:,.0f} "
                  f"({w} x {CONCURRENCY} / {args.sim_latency}), ratio {rate / ideal:.3f}")
            print_roles(t)
            sys.stdout.flush()


def api_main(args) -> None:
    """Runs against an API already running: submit, follow, time."""
    api = args.api.rstrip("/")
    rates = []
    for i in range(args.runs):
        t0 = time.monotonic()
        job_id = http("POST", f"{api}/v1/jobs", args.api_key, job(args.slices, not args.no_budget).encode(),
                      "application/yaml")["job_id"]
        while True:
            v = http("GET", f"{api}/v1/jobs/{job_id}", args.api_key)
            if v["status"] in ("succeeded", "partial", "failed", "cancelled"):
                break
            time.sleep(0.2)
        wall = time.monotonic() - t0
        slices = v["counts"]["slices"]["total"]
        rates.append(slices / wall)
        print(f"run {i + 1}: {slices / wall:,.0f} slices/s ({v['status']}), {slices:,} slices in {wall:.2f} s, "
              f"{v['counts']['items']['valid']:,} items")
        sys.stdout.flush()
    print(f"median {statistics.median(rates):,.0f} slices/s over {len(rates)} run(s) through {api}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--slices", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--no-budget", action="store_true",
                    help="submit the job without max_usd (no budget reservations)")
    ap.add_argument("--otlp", action="store_true",
                    help="A/B each run: tracing off, and every role exporting spans to otlp_sink")
    ap.add_argument("--bare", action="store_true", help="with --otlp: run the bare loop too")
    ap.add_argument("--otel-env", action="append", default=[], metavar="KEY=VALUE",
                    help="with --otlp: another variable for the traced roles (e.g. OTEL_TRACES_SAMPLER=always_off)")
    ap.add_argument("--sim-latency", default="0s", help="the simulator's latency per call (e.g. 500ms)")
    ap.add_argument("--workers", type=int, nargs="+", default=[WORKERS],
                    help="worker processes (several: one run of each, upstream-bound mode)")
    ap.add_argument("--no-bare", action="store_true", help="skip the bare loop (a large job alone)")
    ap.add_argument("--no-build", action="store_true", help="use the binaries already built")
    ap.add_argument("--api", help="time runs through this running API instead of starting processes")
    ap.add_argument("--api-key", default="", help="with --api: its bearer key")
    ap.add_argument("--bin-dir", default=os.path.join(ROOT, "target", "release"),
                    help="where trawl and examples/ are (default target/release)")
    args = ap.parse_args()
    if args.api:
        api_main(args)
        return
    if not args.no_build:
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "trawl", "--bin", "trawl"], cwd=ROOT, check=True)
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "trawl-tests", "--example", "bare_loop",
                        "--example", "otlp_sink"], cwd=ROOT, check=True)
    trawl_bin = os.path.join(args.bin_dir, "trawl")
    bare_bin = os.path.join(args.bin_dir, "examples", "bare_loop")
    sink_bin = os.path.join(args.bin_dir, "examples", "otlp_sink")
    if args.otlp:
        otlp_main(args, trawl_bin, sink_bin, bare_bin)
        return
    if args.sim_latency not in ("0s", "0ms", "0"):
        upstream_main(args, trawl_bin)
        return
    for i in range(args.runs):
        t = trawl_run(trawl_bin, args.slices, not args.no_budget)
        if args.no_bare:
            print(json.dumps({"run": i + 1, "trawl": t}, indent=2))
            print(f"run {i + 1}: trawl {t['slices'] / t['wall_s']:,.0f} slices/s ({t['status']}), "
                  f"{t['slices']:,} slices in {t['wall_s']:.1f} s")
            print_roles(t)
            continue
        b = bare_run(bare_bin, args.slices)
        t_rate = t["slices"] / t["wall_s"]
        b_rate = b["messages"] / b["wall_s"]
        print(json.dumps({"run": i + 1, "trawl": t, "bare": b}, indent=2))
        print(f"run {i + 1}: trawl {t_rate:,.0f} slices/s ({t['status']}), bare loop {b_rate:,.0f} msg/s, "
              f"ratio {t_rate / b_rate:.2f}")
        print_roles(t)
        print(f"  bare loop  CPU {b['cpu_s']:.2f} s, peak RSS {b['peak_rss_mb']:.1f} MB")
        # The bare loop's Postgres backends exit with it, before they can be
        # sampled; only the NATS server's share is reported.
        print(f"  nats-server CPU during the bare loop: {b['services_cpu_s']['nats-server']:.2f} s")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
