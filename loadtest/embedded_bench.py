#!/usr/bin/env python3
"""Benchmark: N page slices in embedded mode against the built-in simulator.

Runs `trawl run` (release build) on a generated job of N page URLs with a fresh
state folder, the cache bypassed (max_age 0, so every slice goes upstream) and the
simulator at zero latency, then reports slices/s, CPU seconds and peak RSS of the
trawl process (simulator included: it runs inside it).

    python3 loadtest/embedded_bench.py [--slices 10000] [--concurrency 32] [--runs 3]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def job(n: int) -> str:
    urls = ",\n    ".join(f'"https://shop.example/p/bench-{i}"' for i in range(n))
    return f"""name: bench-{n}
pages:
  urls: [
    {urls}
  ]
  geos: [us]
extract:
  fields:
    name:     {{jsonld: "name"}}
    price:    {{jsonld: "offers.price", type: number}}
    currency: {{jsonld: "offers.priceCurrency"}}
    title:    {{css: "h1"}}
    sku:      {{regex: "SKU: ([A-Z0-9-]+)"}}
schema:
  type: object
  required: [name, price, currency]
  properties:
    price: {{type: number, exclusiveMinimum: 0}}
    currency: {{type: string, pattern: "^[A-Z]{{3}}$"}}
cache: {{max_age: 0}}
budget: {{max_usd: 1000}}
"""


def one_run(binary: str, n: int, concurrency: int) -> dict:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "job.yaml")
        with open(path, "w") as f:
            f.write(job(n))
        env = {k: v for k, v in os.environ.items() if k not in ("BRIGHTDATA_API_TOKEN", "TRAWL_SIM_FAULTS", "TRAWL_SIM_LATENCY")}
        errlog = open(os.path.join(d, "stderr.log"), "w+")
        t0 = time.monotonic()
        p = subprocess.Popen(
            [binary, "run", path, "--out", os.path.join(d, "out"), "--state", os.path.join(d, "state"),
             "--concurrency", str(concurrency)],
            env=env, stdout=subprocess.DEVNULL, stderr=errlog,
        )
        # wait4 gives this child's own resource usage (CPU time, peak RSS in KiB).
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.monotonic() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        if p.returncode != 0:
            errlog.seek(0)
            sys.exit(f"trawl run failed ({p.returncode}):\n{errlog.read()}")
        with open(os.path.join(d, "out", "summary.json")) as f:
            s = json.load(f)
        assert s["slices"]["total"] == n and s["upstream_calls"] == n, s
        return {
            "slices": n,
            "wall_s": round(wall, 3),
            "run_s": round(s["elapsed_s"], 3),
            "slices_per_s": round(n / wall, 1),
            "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
            "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
            "items_valid": s["items"]["valid"],
            "items_rejected": s["items"]["rejected"],
        }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--slices", type=int, default=10_000)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--binary", help="a trawl binary to measure (another build, for a before/after run); implies --no-build")
    a = ap.parse_args()
    if not a.no_build and not a.binary:
        subprocess.run(["cargo", "build", "--release", "-p", "trawl"], cwd=ROOT, check=True)
    binary = a.binary or os.path.join(ROOT, "target", "release", "trawl")
    results = [one_run(binary, a.slices, a.concurrency) for _ in range(a.runs)]
    for r in results:
        print(json.dumps(r))
    best = max(results, key=lambda r: r["slices_per_s"])
    print(f"median slices/s: {sorted(r['slices_per_s'] for r in results)[len(results) // 2]}, "
          f"best: {best['slices_per_s']}, max peak RSS: {max(r['peak_rss_mb'] for r in results)} MB")


if __name__ == "__main__":
    main()
