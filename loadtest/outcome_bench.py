#!/usr/bin/env python3
"""Benchmark: Postgres CPU per slice of the outcome statement, by batch size.

Runs the Postgres store's outcome statement (the `RECORD` constant of
services/store/src/postgres/outcomes.rs, read from the source) on a fresh
database with the schema of migrations/, for N page slices of one job, each
outcome with one item, one trace step, one cost row and one audit row (what a
page slice of the deployed benchmark writes), in batches of B outcomes, one
statement and one commit per batch, on one prepared connection, as the store's
writers do. CPU is read from /proc for every Postgres process (the backend,
WAL writer, checkpointer...), before and after, so the figure is what Postgres
spends per slice, commit flushes included.

Needs psycopg (`pip install "psycopg[binary]"`); the store itself needs none of
this.

    python3 loadtest/outcome_bench.py [--slices 10000] [--batch 1 4 16 64]
"""

import argparse
import glob
import json
import os
import re
import subprocess
import time

import psycopg

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ADMIN = os.environ.get("TRAWL_TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
TICK = os.sysconf("SC_CLK_TCK")


def record_statement() -> str:
    src = open(os.path.join(ROOT, "services/store/src/postgres/outcomes.rs")).read()
    m = re.search(r'const RECORD: &str = "\\\n(.*?)";\n', src, re.S)
    if not m:
        raise SystemExit("RECORD not found in outcomes.rs")
    # $N placeholders become psycopg's named ones, so that one value serves every
    # use of its number.
    return re.sub(r"\$(\d+)", lambda n: f"%(p{n.group(1)})s", m.group(1).replace('\\"', '"'))


def postgres_cpu() -> float:
    total = 0.0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if not open(f"/proc/{pid}/comm").read().startswith("postgres"):
                continue
            f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            total += (int(f[11]) + int(f[12])) / TICK
        except OSError:
            pass
    return total


def params(job: str, ids: list, stripe: int) -> dict:
    m, now = len(ids), int(time.time() * 1000)
    J = [job] * m
    data = [json.dumps({"name": f"Product {s}", "price": 19.99, "currency": "USD",
                        "title": f"Product {s}", "sku": f"SKU-{s}"}) for s in ids]
    values = [
        # 1-10: the slices' outcomes; 11: now
        J, ids, ["succeeded"] * m, [None] * m, [None] * m, [1] * m, [0] * m, [1] * m, [0] * m,
        [1000] * m, now,
        # 12-18: items
        J, ids, [0] * m, ["page"] * m, [f"https://shop.example/p/{s}" for s in ids], ["us"] * m, data,
        # 19-25: rejections (none)
        [], [], [], [], [], [], [],
        # 26-37: trace steps
        J, ids, [0] * m, ["brightdata.unlocker"] * m, ["ab" * 32] * m, [False] * m, [1] * m,
        ["ok"] * m, [None] * m, [1234] * m, [1000] * m, [now] * m,
        # 38-42: costs
        J, ids, [0] * m, ["web_unlocker"] * m, [1000] * m,
        # 43-48: children (none)
        [], [], [], [], [], [],
        # 49-60: audit rows
        J, ids, [0] * m, ["brightdata.unlocker"] * m, ["ab" * 32] * m, ["allowed"] * m,
        ["policy"] * m, ["worker"] * m, [1234] * m, [5000] * m, [None] * m, [now] * m,
        # 61-62: trace and span ids (tracing off); 63: the counter stripe
        [None] * m, [None] * m, stripe,
    ]
    return {f"p{i + 1}": v for i, v in enumerate(values)}


def one_run(n: int, batch: int, statement: str) -> dict:
    db = f"trawl_outcome_bench_{os.getpid()}"
    subprocess.run(["psql", ADMIN, "-qc", f"DROP DATABASE IF EXISTS {db}"], check=True,
                   stderr=subprocess.DEVNULL)
    subprocess.run(["psql", ADMIN, "-qc", f"CREATE DATABASE {db}"], check=True)
    url = ADMIN.rsplit("/", 1)[0] + "/" + db
    try:
        for f in sorted(glob.glob(os.path.join(ROOT, "migrations", "*.sql"))):
            subprocess.run(["psql", url, "-q", "-v", "ON_ERROR_STOP=1", "-f", f], check=True,
                           stdout=subprocess.DEVNULL)
        with psycopg.connect(url, autocommit=True) as conn:
            job = "job-1"
            conn.execute("INSERT INTO jobs (id, name, spec, status, estimate, created_ms, updated_ms) "
                         "VALUES (%s, 'bench', '{}', 'running', 0, 0, 0)", (job,))
            ids = [f"p{i:07d}" for i in range(n)]
            specs = [json.dumps({"id": s, "kind": {"page": {"url": f"https://shop.example/p/{s}",
                                                             "geo": "us"}}}) for s in ids]
            conn.execute("INSERT INTO slices (job_id, slice_id, kind, spec, created_ms, published_ms) "
                         "SELECT %s, s, 'page', sp::jsonb, 0, 0 FROM UNNEST(%s::text[], %s::text[]) "
                         "AS t (s, sp)", (job, ids, specs))
            conn.execute("CHECKPOINT")
            conn.execute("VACUUM ANALYZE")
            cpu0, t0 = postgres_cpu(), time.monotonic()
            for k in range(0, n, batch):
                conn.execute(statement, params(job, ids[k:k + batch], (k // batch) % 16), prepare=True)
            cpu1, t1 = postgres_cpu(), time.monotonic()
            done = conn.execute("SELECT SUM(slices_succeeded) FROM job_counters").fetchone()[0]
            if done != n:
                raise SystemExit(f"counters say {done} slices succeeded, not {n}")
    finally:
        subprocess.run(["psql", ADMIN, "-qc", f"DROP DATABASE IF EXISTS {db}"], check=True)
    return {"batch": batch, "slices": n, "wall_s": round(t1 - t0, 2),
            "postgres_cpu_ms_per_slice": round((cpu1 - cpu0) * 1000 / n, 3)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--slices", type=int, default=10000)
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 4, 16, 64])
    a = ap.parse_args()
    statement = record_statement()
    for b in a.batch:
        print(json.dumps(one_run(a.slices, b, statement)), flush=True)


if __name__ == "__main__":
    main()
