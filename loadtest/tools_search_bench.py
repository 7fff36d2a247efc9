#!/usr/bin/env python3
"""Benchmark: `trawl tools search` with many configured stdio servers whose
listings are stored.

Configures N stdio MCP servers (default 70): each is `trawl-test-upstream`
serving the real `tools/list` result of one server of the guard corpus
(`tests/guard/benign/*.json`, made by `tests/guard/collect`), in file-name
order; with `--trivial`, 3 small made-up tools each. Then, in a fresh state folder (the embedded SQLite store):

1. `trawl tools search --refresh` once: every server is started and listed,
   and the listings (and, with a model, the tools' vectors) are stored;
2. `trawl tools search QUERY` for each query (all distinct, none seen before):
   the command answers from the stored listings, starting no server.

Reported for step 2: wall time per command, from the process's start to its
exit (p50, p90, max), with the model (`TRAWL_EMBED_MODEL`: hybrid search) and
without it (BM25 alone), the peak RSS of the largest command, and the
starts of the servers (each server appends to a file when it starts; step 2
must start none, or the run fails), and the tokens (o200k_base) of what a
model is shown with search, `tool_search` and the top 5, against the whole
catalog's. Every command must exit 0 and, on the corpus, print hits.

    python3 loadtest/tools_search_bench.py [--servers 70] [--queries 30] [--trivial]
        [--trawl target/release/trawl] [--upstream target/release/trawl-test-upstream]
        [--model tests/models/all-minilm-l6-v2]

Build first: `cargo build --release -p trawl -p trawl-tests --bin trawl --bin trawl-test-upstream`.
"""

import argparse
import glob
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

QUERIES = [
    "what is the weather in Paris tomorrow",
    "remember that Alice works at Acme",
    "list the open pull requests of a repository",
    "send a message to the team channel",
    "read a file from my home folder",
    "find recent news about electric cars",
    "take a screenshot of a web page",
    "convert an amount of money to euros",
    "create a calendar event for Monday",
    "run a SQL query against the database",
    "translate a paragraph into Spanish",
    "search for flights to Tokyo",
    "look up a word in the dictionary",
    "get the price of bitcoin",
    "summarize a youtube video",
    "delete a branch",
    "add two numbers together",
    "what time is it in Sydney",
    "show the logs of a cloud function",
    "store a note for later",
    "find a place to eat nearby",
    "check the status of my order",
    "write a row into a spreadsheet",
    "open a ticket in the issue tracker",
    "download a page as markdown",
    "what are people saying about a product",
    "get the stock quote of a company",
    "click the login button",
    "list my email drafts",
    "compute a hash of a string",
]


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--servers", type=int, default=70)
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--trawl", default=os.path.join(ROOT, "target/release/trawl"))
    ap.add_argument(
        "--upstream", default=os.path.join(ROOT, "target/release/trawl-test-upstream")
    )
    ap.add_argument(
        "--trivial",
        action="store_true",
        help="each server lists 3 small made-up tools instead of a corpus server's",
    )
    ap.add_argument("--model", default=os.path.join(ROOT, "tests/models/all-minilm-l6-v2"))
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="trawl-search-bench-")
    try:
        bench(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def bench(args, work):
    if args.trivial:
        listings = []
        for i in range(args.servers):
            path = os.path.join(work, f"trivial{i}.json")
            tools = [
                {
                    "name": f"{verb}_{i}",
                    "description": f"{verb.capitalize()}s a record of service {i}.",
                    "inputSchema": {"type": "object", "properties": {"id": {"type": "string"}}},
                }
                for verb in ("read", "write", "delete")
            ]
            with open(path, "w") as f:
                json.dump({"tools": tools}, f)
            listings.append(path)
    else:
        listings = sorted(glob.glob(os.path.join(ROOT, "tests/guard/benign/*.json")))
    if len(listings) < args.servers:
        sys.exit(f"{len(listings)} listings in tests/guard/benign; run tests/guard/collect")
    for f in (args.trawl, args.upstream):
        if not os.access(f, os.X_OK):
            sys.exit(f"{f}: not built (see --help)")
    queries = QUERIES[: args.queries]

    starts = os.path.join(work, "starts")
    lines = ["servers:"]
    tools = 0
    for i, path in enumerate(listings[: args.servers]):
        with open(path) as f:
            tools += len(json.load(f)["tools"])
        lines += [
            f"  s{i}:",
            f"    command: {args.upstream}",
            f"    args: [--tools, {path}, --starts, {starts}]",
        ]
    config = os.path.join(work, "tools.yaml")
    with open(config, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"{args.servers} stdio servers, {tools} tools")

    def run(state, query, model, refresh=False):
        env = dict(os.environ, TRAWL_TOOLS_CONFIG=config, TRAWL_HOME=state, RUST_LOG="warn")
        env.pop("TRAWL_DATABASE_URL", None)
        if model:
            env["TRAWL_EMBED_MODEL"] = args.model
        else:
            env.pop("TRAWL_EMBED_MODEL", None)
        cmd = [args.trawl, "tools", "search", query, "--json"]
        if refresh:
            cmd.append("--refresh")
        started = time.perf_counter()
        out = subprocess.run(cmd, env=env, capture_output=True, text=True)
        secs = time.perf_counter() - started
        if out.returncode != 0:
            sys.exit(f"{' '.join(cmd)}: exit {out.returncode}\n{out.stderr}")
        result = json.loads(out.stdout)
        if not result["tools"] and not args.trivial:
            sys.exit(f"{query!r}: no hits\n{out.stdout}")
        return secs, result

    def count_starts():
        if not os.path.exists(starts):
            return 0
        with open(starts) as f:
            return sum(1 for _ in f)

    for model in (True, False):
        name = "hybrid (model)" if model else "BM25 (no model)"
        state = os.path.join(work, "state-model" if model else "state-plain")
        secs, result = run(state, "warm up", model, refresh=True)
        listed = count_starts()
        print(f"{name}: --refresh listed {listed} servers in {secs * 1e3:.0f} ms ({result['search']})")
        times, loaded = [], []
        for q in queries:
            secs, result = run(state, q, model)
            times.append(secs * 1e3)
            loaded.append(result["tokens"]["loaded"])
        started_again = count_starts() - listed
        if started_again:
            sys.exit(f"{name}: {started_again} servers were started by searches over stored listings")
        print(
            f"{name}: {len(times)} searches, p50 {statistics.median(times):.0f} ms, "
            f"p90 {pct(times, 0.9):.0f} ms, max {max(times):.0f} ms; servers started: 0; "
            f"search {result['search']}"
        )
        whole = result["tokens"]["catalog"]
        print(
            f"{name}: context of tool_search + top 5: median {statistics.median(loaded):.0f} tokens, "
            f"max {max(loaded)}, against the whole catalog's {whole}: "
            f"{100 * (1 - max(loaded) / whole):.2f} % smaller at least"
        )
        os.remove(starts)
    print(f"peak RSS of any command: {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
