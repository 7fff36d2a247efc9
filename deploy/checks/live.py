"""`deploy/check --live`: the deployed shape, built and started for real.

    python deploy/checks/live.py [--keep] [--bench N] [--sim-latency 500ms]

Steps, each printed with its time; the first that fails ends the run (after
the teardown), and the exit status is 1 with the step named:

  engine      a Docker engine: the one DOCKER_HOST (or the default socket)
              names, else a dockerd of its own (data root, exec root and socket
              in a temp folder, the default bridge off), stopped at the end.
              What it needs and does not find (dockerd, root, cgroups, overlay,
              iptables, the compose plugin) is named.
  images      deploy/images/build-local: the base by debootstrap, Postgres and
              Redis from Debian's packages, NATS, trawl from the host's release
              build, the OTLP receiver in place of Jaeger.
  up          compose.yaml + compose.local.yaml, `up --wait`: every service
              running and every health check passing (the trawl roles' too).
  laptop-prices  examples/laptop-prices.yaml through the published API port;
              its items equal those of the embedded run (`trawl run`) of the
              same file on the host.
  worker killed  a 2,000-slice page job; a quarter in, `docker kill` of one
              worker (compose starts it again: Docker counts a kill as a manual
              stop, so its restart policy does not) and SIGKILL of the other's
              process (a crash: the restart policy brings it back): `N lost, M
              duplicated` (a page URL with no item, or with more than one).
  nats restarted the same with `docker restart` of the NATS container.
  hardening   every trawl container, from `docker inspect` and from its
              process in /proc: UID and GID 65532, a read-only root mount, no
              capabilities (effective, permitted, bounding), no_new_privs.
  spans       the OTLP receiver got spans of every job, under the job's own
              trace id (from GET /v1/jobs/{id}) and, from the scheduler and the
              workers, under no other.
  approval    a job above its approve_above_usd waits in awaiting_approval;
              POST /v1/approvals/{id}/approve with an admin key; it succeeds.
  chart probes  the Helm chart rendered with the local image; each role
              started the way its manifest says (args, env, security context)
              on the compose network, and its liveness, readiness and startup
              probe paths requested until they answer 200.
  bench       with --bench N: N runs of the 2,000-slice job with the simulator
              at 0 latency and no job traced, timed (loadtest/deployed_bench.py --api).
  teardown    `down --volumes`; no container, network or volume of the project
              is left.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "loadtest"))
from deployed_bench import job as page_job  # noqa: E402  (the benchmarks' page job)

PROJECT = "trawl-live"
USER_KEY = "live-user-key"
ADMIN_KEY = "live-admin-key"
ROLES = ("sim", "migrate", "api", "scheduler", "worker")
TERMINAL = ("succeeded", "partial", "failed", "cancelled")
FAULT_SLICES = 2000


class Failed(Exception):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Live:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.tmp = Path(tempfile.mkdtemp(prefix="trawl-live-"))
        self.env = dict(os.environ)
        self.dockerd: subprocess.Popen | None = None
        self.api_port = free_port()
        self.api = f"http://127.0.0.1:{self.api_port}"
        self.jobs: dict[str, str] = {}  # job id -> the step that ran it
        self.compose_env = {
            "HOST_API_PORT": str(self.api_port),
            "HOST_NATS_MONITOR_PORT": str(free_port()),
            "TRAWL_API_KEYS": f"live:{USER_KEY}",
            "TRAWL_ADMIN_KEYS": f"live-admin:{ADMIN_KEY}",
            "TRAWL_SIM_LATENCY": args.sim_latency,
            "RUST_LOG": "info",
        }

    # --- running things -----------------------------------------------------

    def run(self, *cmd: str, check: bool = True, timeout: float = 600, env: dict | None = None) -> str:
        try:
            p = subprocess.run(cmd, env=env or self.env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise Failed(f"{' '.join(cmd)} did not end within {timeout:.0f} s")
        if check and p.returncode != 0:
            raise Failed(f"{' '.join(cmd)} exited {p.returncode}:\n{(p.stdout + p.stderr)[-3000:]}")
        return p.stdout

    def docker(self, *args: str, **kw) -> str:
        return self.run("docker", *args, **kw)

    def logs(self, container: str) -> str:
        """A container's output, standard output and error (where the roles log) together."""
        p = subprocess.run(["docker", "logs", container], env=self.env, capture_output=True, text=True, timeout=60)
        return p.stdout + p.stderr

    def compose(self, *args: str, **kw) -> str:
        env = {**self.env, **self.compose_env}
        return self.run("docker", "compose", "-p", PROJECT, "-f", str(ROOT / "deploy/compose.yaml"),
                        "-f", str(ROOT / "deploy/compose.local.yaml"), *args, env=env, **kw)

    def container(self, service: str, index: int = 1) -> str:
        return f"{PROJECT}-{service}-{index}"

    def inspect(self, name: str) -> dict:
        return json.loads(self.docker("inspect", name))[0]

    def http(self, method: str, path: str, body: bytes | None = None, ctype: str | None = None,
             key: str = USER_KEY, accept: str | None = None) -> tuple[int, dict[str, str], bytes]:
        req = urllib.request.Request(path if path.startswith("http") else self.api + path, data=body,
                                     method=method)
        req.add_header("Authorization", f"Bearer {key}")
        if ctype:
            req.add_header("Content-Type", ctype)
        if accept:
            req.add_header("Accept", accept)
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
        except urllib.error.HTTPError as e:
            return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()

    def json(self, method: str, path: str, **kw) -> Any:
        status, _, body = self.http(method, path, **kw)
        if status >= 300:
            raise Failed(f"{method} {path}: {status} {body[:500]!r}")
        return json.loads(body)

    # --- jobs through the API -------------------------------------------------

    def submit(self, spec: str, step: str) -> str:
        job = self.json("POST", "/v1/jobs", body=spec.encode(), ctype="application/yaml")
        self.jobs[job["job_id"]] = step
        return job["job_id"]

    def wait(self, job_id: str, until: Callable[[dict], bool] = lambda v: v["status"] in TERMINAL,
             timeout: float = 600) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            try:
                view = self.json("GET", f"/v1/jobs/{job_id}")
            except (Failed, OSError):
                view = None  # the API may be away for a moment (a fault step)
            if view and until(view):
                return view
            if view and view["status"] in TERMINAL:
                raise Failed(f"job {job_id} ended {view['status']} ({view.get('reason')}) first")
            if time.monotonic() > deadline:
                raise Failed(f"job {job_id} still {view and view['status']} after {timeout:.0f} s: {view}")
            time.sleep(0.2)

    def rows(self, job_id: str, what: str) -> list[dict]:
        out, url = [], f"/v1/jobs/{job_id}/{what}?limit=1000"
        while url:
            status, headers, body = self.http("GET", url, accept="application/x-ndjson")
            if status != 200:
                raise Failed(f"GET {url}: {status} {body[:300]!r}")
            out += [json.loads(line) for line in body.decode().splitlines() if line.strip()]
            m = re.search(r"<([^>]+)>;\s*rel=\"next\"", headers.get("link", ""))
            url = m.group(1) if m else None
        return out

    # --- steps ------------------------------------------------------------------

    def engine(self) -> str:
        if shutil.which("docker") is None:
            raise Failed("no docker CLI (Debian: apt-get install docker.io)")
        if subprocess.run(["docker", "version"], env=self.env, capture_output=True).returncode == 0:
            return f"using the running engine {self.server_version()}"
        missing = []
        if shutil.which("dockerd") is None:
            missing.append("dockerd (Debian: apt-get install docker.io)")
        if os.geteuid() != 0:
            missing.append("root (dockerd runs as root)")
        cgroup = Path("/sys/fs/cgroup")
        if not cgroup.is_dir() or not any(cgroup.iterdir()):
            missing.append("cgroups (nothing mounted at /sys/fs/cgroup)")
        if "overlay" not in Path("/proc/filesystems").read_text() and \
                subprocess.run(["modprobe", "overlay"], capture_output=True).returncode != 0:
            missing.append("the overlay filesystem (not in /proc/filesystems, modprobe overlay failed)")
        if shutil.which("iptables") is None:
            missing.append("iptables (dockerd's networks)")
        if missing:
            raise Failed("no engine answers and one cannot be started here; missing: " + "; ".join(missing))
        sock = self.tmp / "docker.sock"
        log = open(self.tmp / "dockerd.log", "w")
        self.dockerd = subprocess.Popen(
            ["dockerd", "--data-root", str(self.tmp / "data"), "--exec-root", str(self.tmp / "exec"),
             "--pidfile", str(self.tmp / "dockerd.pid"), "-H", f"unix://{sock}", "--bridge", "none"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.env["DOCKER_HOST"] = f"unix://{sock}"
        deadline = time.monotonic() + 60
        while subprocess.run(["docker", "version"], env=self.env, capture_output=True).returncode != 0:
            if self.dockerd.poll() is not None or time.monotonic() > deadline:
                tail = (self.tmp / "dockerd.log").read_text()[-2000:]
                raise Failed(f"dockerd did not come up:\n{tail}")
            time.sleep(0.2)
        return f"started dockerd {self.server_version()} (data root {self.tmp / 'data'})"

    def server_version(self) -> str:
        info = json.loads(self.docker("info", "--format", "{{json .}}"))
        compose = self.run("docker", "compose", "version", "--short", check=False).strip()
        if not compose:
            raise Failed("no docker compose plugin (2.24 or later; Debian trixie's docker-compose)")
        return (f"{info['ServerVersion']}, {info['Driver']}, cgroup v{info.get('CgroupVersion', '?')}, "
                f"compose {compose}")

    def images(self) -> str:
        out = self.run(str(ROOT / "deploy/images/build-local"), timeout=3600)
        lines = out.strip().splitlines()
        ready = lines.index("build-local: images ready:") if "build-local: images ready:" in lines else len(lines)
        return ", ".join(line.strip() for line in lines[ready + 1:]) or "built"

    def up(self) -> str:
        self.compose("up", "-d", "--wait", "--wait-timeout", "300", timeout=400)
        ps = [json.loads(line) for line in self.compose("ps", "-a", "--format", "json").splitlines() if line.strip()]
        bad = [f"{c['Name']}: {c['State']} {c.get('Health', '')}" for c in ps
               if c["Service"] != "migrate" and (c["State"] != "running" or c.get("Health") not in ("", "healthy"))]
        migrate = [c for c in ps if c["Service"] == "migrate"]
        if not migrate or migrate[0].get("ExitCode") != 0:
            bad.append(f"migrate: {migrate and migrate[0]}")
        if bad:
            raise Failed("not every service is up and healthy: " + "; ".join(bad))
        healthy = sorted(c["Service"] for c in ps if c.get("Health") == "healthy")
        # The images carry the guard detector's model and the stack requires it:
        # the roles with a tool layer say at start that it runs.
        rules_only = [c["Name"] for c in ps if c["Service"] in ("api", "worker")
                      and "the tool guard's semantic detector can run" not in self.logs(c["Name"])]
        if rules_only:
            raise Failed("no detector in " + ", ".join(rules_only) + " (the image's model not loaded)")
        return (f"{len(ps)} containers; healthy: {', '.join(healthy)}; migrate exited 0; "
                "the api and the workers run the guard's detector")

    def laptop(self) -> str:
        spec = (ROOT / "examples/laptop-prices.yaml").read_text()
        job = self.submit(spec, "laptop-prices")
        view = self.wait(job)
        if view["status"] != "succeeded":
            raise Failed(f"job {job} ended {view['status']}: {view.get('reason')}")
        deployed = [self.item_key(i) for i in self.rows(job, "items")]
        binary = ROOT / "target/release/trawl"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("BRIGHTDATA_", "TRAWL_", "OTEL_"))}
        out = self.tmp / "embedded"
        self.run(str(binary), "run", str(ROOT / "examples/laptop-prices.yaml"), "--yes", "--state",
                 str(out / "state"), "--out", str(out / "out"), env=env)
        embedded = [self.item_key(json.loads(line)) for line in (out / "out/items.jsonl").read_text().splitlines()
                    if line.strip()]
        if not embedded:
            raise Failed("the embedded run yielded no item")
        if sorted(deployed) != sorted(embedded):
            only_d = Counter(deployed) - Counter(embedded)
            only_e = Counter(embedded) - Counter(deployed)
            raise Failed(f"items differ: {len(deployed)} deployed, {len(embedded)} embedded; only deployed: "
                         f"{list(only_d)[:3]}; only embedded: {list(only_e)[:3]}")
        return f"job {job}: {len(deployed)} items, the same as the embedded run's"

    @staticmethod
    def item_key(item: dict) -> str:
        return json.dumps({k: item.get(k) for k in ("kind", "url", "geo", "data")}, sort_keys=True)

    def fault_job(self, step: str, inject: Callable[[], str]) -> str:
        spec = page_job(FAULT_SLICES).replace(f"name: bench-{FAULT_SLICES}", f"name: live-{step.replace(' ', '-')}")
        urls = set(re.findall(r'"(https://shop\.example/p/bench-\d+)"', spec))
        t0 = time.monotonic()
        job = self.submit(spec, step)
        # A quarter in, so the fault lands mid-job.
        at_fault = self.wait(job, lambda v: v["counts"]["slices"]["succeeded"] >= FAULT_SLICES // 4
                             or v["status"] in TERMINAL)
        done_before = at_fault["counts"]["slices"]["succeeded"]
        what = inject()
        view = self.wait(job)
        wall = time.monotonic() - t0
        seen = Counter(i["url"] for i in self.rows(job, "items"))
        seen.update(r["url"] for r in self.rows(job, "rejections"))
        lost = len(urls - set(seen))
        duplicated = sum(n - 1 for n in seen.values() if n > 1)
        stray = len(set(seen) - urls)
        summary = (f"{lost} lost, {duplicated} duplicated; job {job} {view['status']}, "
                   f"{view['counts']['slices']['total']} slices in {wall:.1f} s, the fault at "
                   f"{done_before} done; {what}")
        if lost or duplicated or stray or view["status"] != "succeeded" or len(urls) != FAULT_SLICES:
            raise Failed(summary + (f"; {stray} items of URLs not in the job" if stray else ""))
        return summary

    def kill_worker(self) -> str:
        """`docker kill` of one worker, which Docker counts as a manual stop (its
        restart policy leaves it down) and `compose up` starts again; and a
        crash of the other (SIGKILL of its process from the host), which the
        restart policy brings back by itself."""
        killed, crashed = self.container("worker", 1), self.container("worker", 2)
        before = {n: self.inspect(n)["State"]["StartedAt"] for n in (killed, crashed)}
        self.docker("kill", killed)
        self.compose("up", "-d", "--no-recreate", "worker", timeout=120)
        os.kill(self.inspect(crashed)["State"]["Pid"], signal.SIGKILL)
        deadline = time.monotonic() + 60
        while True:
            now = {n: self.inspect(n) for n in (killed, crashed)}
            if all(d["State"]["Running"] and d["State"]["StartedAt"] != before[n] for n, d in now.items()):
                break
            if time.monotonic() > deadline:
                raise Failed(f"not both workers running again within 60 s: "
                             f"{ {n: d['State']['Status'] for n, d in now.items()} }")
            time.sleep(0.2)
        return (f"{killed} killed (docker kill) and started again by compose up; {crashed} crashed "
                f"(SIGKILL from the host) and restarted by its restart policy "
                f"(restarts: {now[crashed]['RestartCount']})")

    def restart_nats(self) -> str:
        name = self.container("nats")
        t0 = time.monotonic()
        self.docker("restart", name)
        return f"{name} restarted in {time.monotonic() - t0:.1f} s"

    def hardening(self) -> str:
        checked, problems = [], []
        for line in self.compose("ps", "-a", "--format", "json").splitlines():
            c = json.loads(line) if line.strip() else None
            if not c or c["Service"] not in ROLES:
                continue
            d = self.inspect(c["Name"])
            name, host, cfg = c["Name"], d["HostConfig"], d["Config"]
            if cfg.get("User") != "65532:65532":
                problems.append(f"{name}: User {cfg.get('User')!r}")
            if not host.get("ReadonlyRootfs"):
                problems.append(f"{name}: root filesystem is writable")
            if "ALL" not in (host.get("CapDrop") or []) or host.get("CapAdd"):
                problems.append(f"{name}: CapDrop {host.get('CapDrop')}, CapAdd {host.get('CapAdd')}")
            if "no-new-privileges:true" not in (host.get("SecurityOpt") or []):
                problems.append(f"{name}: no no-new-privileges")
            pid = d["State"]["Pid"]
            if d["State"]["Running"] and pid:
                problems += [f"{name}: {p}" for p in self.process_hardening(pid)]
                checked.append(c["Service"])
            else:
                checked.append(f"{c['Service']} (exited; configuration only)")
        if problems:
            raise Failed("; ".join(problems))
        return f"UID/GID 65532, read-only root, no capabilities, no_new_privs: {', '.join(sorted(checked))}"

    @staticmethod
    def process_hardening(pid: int) -> list[str]:
        problems = []
        try:
            status = dict(line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                          if ":\t" in line)
            mounts = Path(f"/proc/{pid}/mountinfo").read_text().splitlines()
        except OSError as e:
            return [f"cannot read /proc/{pid} ({e}); run as root"]
        for field in ("Uid", "Gid"):
            ids = set(status[field].split())
            if ids != {"65532"}:
                problems.append(f"{field} {status[field]}")
        for field in ("CapEff", "CapPrm", "CapBnd", "CapAmb"):
            if int(status[field].strip(), 16) != 0:
                problems.append(f"{field} {status[field].strip()}")
        if status.get("NoNewPrivs", "").strip() != "1":
            problems.append("NoNewPrivs is not 1")
        root = [m for m in mounts if m.split()[4] == "/"]
        if not root or "ro" not in root[-1].split()[5].split(","):
            problems.append(f"root mounted {root[-1].split()[5] if root else '?'}")
        return problems

    def spans(self) -> str:
        if not self.jobs:
            raise Failed("no job ran")
        want = {}
        for job in self.jobs:
            view = self.json("GET", f"/v1/jobs/{job}")
            if not view.get("trace_id"):
                raise Failed(f"job {job} has no trace_id: is it sampled?")
            want[job] = view["trace_id"]
        sink = self.container("jaeger")
        deadline = time.monotonic() + 60  # the exporters send every 5 s
        while True:
            since = time.time()
            self.docker("kill", "-s", "USR1", sink)
            report = None
            while report is None and time.time() - since < 10:
                logs = self.docker("logs", "--since", str(int(since) - 1), sink)
                lines = [line for line in logs.splitlines() if line.startswith("{")]
                report = json.loads(lines[-1]) if lines else None
                if report is None:
                    time.sleep(0.2)
            if report is None:
                raise Failed(f"{sink} printed no counts after SIGUSR1")
            problems = self.trace_problems(report["traces"], want)
            if not problems:
                break
            if time.monotonic() > deadline:
                raise Failed("; ".join(problems))
            time.sleep(1)
        return (f"{report['spans']} spans in {len(report['traces'])} traces; each of {len(want)} jobs under "
                f"its own trace id, from api, scheduler and workers")

    @staticmethod
    def trace_problems(traces: dict[str, dict], want: dict[str, str]) -> list[str]:
        problems = []
        for job, trace in want.items():
            got = traces.get(trace)
            if got is None:
                problems.append(f"no span of job {job}'s trace {trace}")
                continue
            services = set(got["services"])
            lacking = {"trawl-api", "trawl-scheduler", "trawl-worker"} - services
            if lacking:
                problems.append(f"job {job}'s trace has no span from {', '.join(sorted(lacking))}")
            # The API's reads of a job (GET /v1/jobs/{id}) are traces of their
            # own; the job's work (planning, slices) belongs to its trace only.
            others = [t for t, v in traces.items()
                      if t != trace and job in v["jobs"] and set(v["services"]) - {"trawl-api"}]
            if others:
                problems.append(f"job {job}'s work is also under trace(s) {', '.join(others[:3])}")
        return problems

    def approval(self) -> str:
        spec = page_job(3).replace("name: bench-3", "name: live-approval").replace(
            "budget: {max_usd: 1000}", "budget: {max_usd: 1000, approve_above_usd: 0.000001}")
        job = self.submit(spec, "approval")
        self.wait(job, lambda v: v["status"] == "awaiting_approval")
        pending = self.json("GET", "/v1/approvals?status=pending", key=ADMIN_KEY)["approvals"]
        mine = [a for a in pending if a.get("job_id") == job and a["kind"] == "job_budget"]
        if len(mine) != 1:
            raise Failed(f"expected one pending job_budget approval of job {job}, got {mine}")
        status, _, body = self.http("POST", f"/v1/approvals/{mine[0]['id']}/approve", key=USER_KEY)
        if status != 403:
            raise Failed(f"a plain key's approval answered {status}, not 403: {body[:200]!r}")
        decision = self.json("POST", f"/v1/approvals/{mine[0]['id']}/approve", key=ADMIN_KEY)
        view = self.wait(job)
        if view["status"] != "succeeded" or len(self.rows(job, "items")) != 3:
            raise Failed(f"job {job} ended {view['status']} after approval: {view.get('reason')}")
        return (f"job {job} awaited approval {mine[0]['id']} (${mine[0]['amount_usd']:.4f}); a user key got 403, "
                f"the admin key approved ({decision.get('job_status')}), the job succeeded with 3 items")

    def chart_probes(self) -> str:
        values = self.tmp / "values.yaml"
        values.write_text(yaml.safe_dump({
            "image": {"repository": "trawl", "tag": "local", "pullPolicy": "Never"},
            "config": {"natsUrl": "nats://nats:4222", "redisUrl": "redis://redis:6379"},
            "otel": {"endpoint": "http://jaeger:4317"},
            "secrets": {"databaseUrl": "postgres://postgres:trawl@postgres:5432/trawl",
                        "apiKeys": f"live:{USER_KEY}"},
        }))
        py = sys.executable
        rendered = self.run(py, str(ROOT / "deploy/checks/helm_sdk.py"), "template", str(ROOT / "deploy/helm/trawl"),
                            "-f", str(values), "--name", "trawl")
        docs = [d for d in yaml.safe_load_all(rendered) if d]
        by_kind = lambda kind: {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}  # noqa: E731
        secrets, maps = by_kind("Secret"), by_kind("ConfigMap")
        network = f"{PROJECT}_default"
        results = []
        for kind in ("Job", "Deployment"):
            for name, doc in by_kind(kind).items():
                pod = doc["spec"]["template"]["spec"]
                for c in pod["containers"]:
                    results.append(self.start_as_rendered(kind, name, pod, c, secrets, maps, network))
        return "; ".join(results)

    def start_as_rendered(self, kind: str, name: str, pod: dict, c: dict, secrets: dict, maps: dict,
                          network: str) -> str:
        image = c["image"]
        if image != "trawl:local":
            raise Failed(f"{name}: image {image}, not the local build (image.repository/tag ignored?)")
        sc = {**(pod.get("securityContext") or {}), **(c.get("securityContext") or {})}
        cmd = ["run", "-d", "--name", f"{PROJECT}-probe-{name}", "--network", network,
               "--user", f"{sc.get('runAsUser', 0)}:{sc.get('runAsGroup', 0)}"]
        if sc.get("readOnlyRootFilesystem"):
            cmd.append("--read-only")
        for cap in (sc.get("capabilities") or {}).get("drop", []):
            cmd += ["--cap-drop", cap]
        if sc.get("allowPrivilegeEscalation") is False:
            cmd += ["--security-opt", "no-new-privileges:true"]
        volumes = {v["name"]: v for v in pod.get("volumes") or []}
        for m in c.get("volumeMounts") or []:
            v = volumes[m["name"]]
            if "emptyDir" in v:
                cmd += ["--tmpfs", f"{m['mountPath']}:uid={sc.get('runAsUser', 0)},mode=1777"]
            elif "configMap" in v or "secret" in v:
                files = self.volume_files(v, secrets, maps, self.tmp / f"vol-{name}-{m['name']}")
                cmd += ["-v", f"{files}:{m['mountPath']}:ro"]
            else:
                raise Failed(f"{name}: volume {m['name']} of a kind this check cannot give: {v}")
        for e in c.get("env") or []:
            value = self.env_value(e, secrets, maps)
            if value is not None:
                cmd += ["-e", f"{e['name']}={value}"]
        if c.get("command"):
            cmd += ["--entrypoint", c["command"][0]]
        cmd += [c["image"], *(c.get("command") or [])[1:], *(c.get("args") or [])]
        cname = f"{PROJECT}-probe-{name}"
        self.docker("rm", "-f", cname, check=False)
        self.docker(*cmd)
        try:
            if kind == "Job":
                code = self.docker("wait", cname, timeout=120).strip()
                if code != "0":
                    raise Failed(f"{name} ({' '.join(c.get('args') or [])}) exited {code}: "
                                 f"{self.docker('logs', cname, check=False)[-1500:]}")
                return f"{name} ran to exit 0"
            ip = self.inspect(cname)["NetworkSettings"]["Networks"][network]["IPAddress"]
            ports = {p["name"]: p["containerPort"] for p in c.get("ports") or [] if "name" in p}
            answered = []
            for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                get = (c.get(probe) or {}).get("httpGet")
                if not get:
                    continue
                port = ports.get(get["port"], get["port"])
                url = f"http://{ip}:{port}{get['path']}"
                self.until_ok(cname, url)
                answered.append(f"{probe.removesuffix('Probe')} {get['path']}:{port}")
            if not answered:
                raise Failed(f"{name} has no HTTP probe")
            return f"{name} ({' '.join(c.get('args') or [])}): " + ", ".join(answered) + " 200"
        finally:
            self.docker("rm", "-f", cname, check=False)

    def until_ok(self, container: str, url: str) -> None:
        deadline = time.monotonic() + 60
        last = ""
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url, timeout=3) as r:
                    if r.status == 200:
                        return
                    last = str(r.status)
            except urllib.error.HTTPError as e:
                last = f"{e.code} {e.read()[:200]!r}"
            except OSError as e:
                last = str(e)
            if not self.inspect(container)["State"]["Running"]:
                raise Failed(f"{container} exited: {self.docker('logs', container, check=False)[-1500:]}")
            time.sleep(0.5)
        raise Failed(f"{url} did not answer 200 within 60 s (last: {last})")

    @staticmethod
    def env_value(e: dict, secrets: dict, maps: dict) -> str | None:
        if "value" in e:
            return str(e["value"])
        ref = e.get("valueFrom") or {}
        if "secretKeyRef" in ref:
            r = ref["secretKeyRef"]
            s = secrets.get(r["name"])
            data = dict((s or {}).get("stringData") or {})
            data.update({k: base64.b64decode(v).decode() for k, v in ((s or {}).get("data") or {}).items()})
            if r["key"] in data:
                return data[r["key"]]
        elif "configMapKeyRef" in ref:
            r = ref["configMapKeyRef"]
            data = (maps.get(r["name"]) or {}).get("data") or {}
            if r["key"] in data:
                return data[r["key"]]
        else:
            raise Failed(f"env {e['name']}: a source this check cannot give: {ref}")
        if r.get("optional"):
            return None
        raise Failed(f"env {e['name']}: {r['name']} has no key {r['key']} and it is not optional")

    @staticmethod
    def volume_files(v: dict, secrets: dict, maps: dict, into: Path) -> Path:
        into.mkdir(parents=True, exist_ok=True)
        if "configMap" in v:
            data = (maps.get(v["configMap"]["name"]) or {}).get("data") or {}
        else:
            s = secrets.get(v["secret"]["secretName"]) or {}
            data = {**(s.get("stringData") or {}),
                    **{k: base64.b64decode(x).decode() for k, x in (s.get("data") or {}).items()}}
        for k, text in data.items():
            (into / k).write_text(text)
            (into / k).chmod(0o644)
        into.chmod(0o755)
        return into

    def bench(self) -> str:
        # The simulator again with no latency, and no job traced: the run is
        # bound by trawl, as the host-process runs of deployed_bench.py are
        # (which export no span). The changed settings recreate the roles.
        self.compose_env["TRAWL_SIM_LATENCY"] = "0s"
        self.compose_env["OTEL_TRACES_SAMPLER"] = "always_off"
        self.compose("up", "-d", "--wait", "--wait-timeout", "300", timeout=400)
        out = self.run(sys.executable, str(ROOT / "loadtest/deployed_bench.py"), "--api", self.api, "--api-key",
                       USER_KEY, "--slices", str(FAULT_SLICES), "--runs", str(self.args.bench), timeout=3600)
        print(out.rstrip())
        return out.strip().splitlines()[-1]

    def teardown(self) -> str:
        self.compose("down", "--volumes", "--remove-orphans", "--timeout", "60", timeout=300)
        left = []
        for what in ("container", "network", "volume"):
            extra = ["-a"] if what == "container" else []
            out = self.docker(what, "ls", *extra, "-q", "--filter", f"label=com.docker.compose.project={PROJECT}")
            if out.strip():
                left.append(f"{len(out.split())} {what}(s)")
        if left:
            raise Failed("left behind: " + ", ".join(left))
        return "containers, networks and volumes removed"

    def close(self) -> None:
        if self.dockerd is not None:
            self.dockerd.send_signal(signal.SIGTERM)
            try:
                self.dockerd.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.dockerd.kill()
                self.dockerd.wait()
            # dockerd leaves its default network namespace mounted in the exec root.
            mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
            for m in sorted((m for m in mounts if m.startswith(str(self.tmp) + "/")), key=len, reverse=True):
                subprocess.run(["umount", "-l", m], capture_output=True)
        shutil.rmtree(self.tmp, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keep", action="store_true", help="leave the stack running (no teardown)")
    ap.add_argument("--bench", type=int, default=0, metavar="N",
                    help="after the checks, N timed runs of the 2,000-slice job at 0 latency")
    ap.add_argument("--sim-latency", default="500ms",
                    help="the simulator's latency during the checks, so the faults land mid-job")
    args = ap.parse_args()
    live = Live(args)
    failed = None
    t_all = time.monotonic()

    def step(name: str, fn: Callable[[], str]) -> bool:
        nonlocal failed
        t0 = time.monotonic()
        try:
            detail = fn()
        except Failed as e:
            failed = failed or name
            print(f"FAIL {name} ({time.monotonic() - t0:.1f} s): {e}", flush=True)
            return False
        print(f"ok   {name} ({time.monotonic() - t0:.1f} s): {detail}", flush=True)
        return True

    try:
        steps = [
            ("engine", live.engine),
            ("images", live.images),
            ("up", live.up),
            ("laptop-prices", live.laptop),
            ("worker killed", lambda: live.fault_job("worker killed", live.kill_worker)),
            ("nats restarted", lambda: live.fault_job("nats restarted", live.restart_nats)),
            ("hardening", live.hardening),
            ("approval", live.approval),
            ("spans", live.spans),
            ("chart probes", live.chart_probes),
        ]
        if args.bench:
            steps.append(("bench", live.bench))
        for i, (name, fn) in enumerate(steps):
            if not step(name, fn):
                if i >= 2:  # the stack was started: keep what tells why
                    logs = live.compose("logs", "--no-color", "--tail", "40", check=False)
                    print("---- last lines of each service's log\n" + logs)
                break
        if live.dockerd is not None or subprocess.run(["docker", "version"], env=live.env,
                                                       capture_output=True).returncode == 0:
            if not args.keep:
                step("teardown", live.teardown)
    finally:
        if not args.keep:
            live.close()
        elif live.dockerd is not None:
            print(f"the stack is left running: DOCKER_HOST={live.env['DOCKER_HOST']} "
                  f"docker compose -p {PROJECT} ...; stop dockerd with kill {live.dockerd.pid}")
    total = time.monotonic() - t_all
    if failed:
        print(f"deploy/check --live: FAILED at step '{failed}' after {total:.0f} s")
        return 1
    print(f"deploy/check --live: every step passed in {total:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
