"""Checks of a rendered chart that kubernetes-validate cannot make (deploy/check).

    python rendered.py RENDERED.yaml [--expect Kind=N ...] [--external-secret NAME]

1. Custom resources. kubernetes-validate only knows built-in kinds and passes
   any other kind with a warning. Here each custom resource is validated against
   the model generated from its operator's CRD openAPI schema (cloudcoil's
   generated pydantic models: KEDA's ScaledObject, prometheus-operator's
   ServiceMonitor), strictly: the document must survive a round trip through the
   model unchanged, so an unknown field (a typo) or a value of the wrong type
   fails. A custom kind without a model fails too. The nats-jetstream trigger's
   `metadata` is a free string map in the CRD, so its keys are checked against
   the parameters KEDA documents for that scaler.
2. The chart's own promises, on every pod: non-root, read-only root filesystem,
   no privilege escalation, all capabilities dropped, RuntimeDefault seccomp, a
   /tmp emptyDir, no service account token; liveness on /healthz and readiness
   on /readyz at a declared port (Deployments); a Deployment scaled by KEDA has
   no replica count and one not scaled by KEDA has one; every Service,
   NetworkPolicy, PodDisruptionBudget and ScaledObject points at something
   rendered; every Secret a pod reads is rendered or named with
   --external-secret. Metrics: every long-running role (api, scheduler, worker)
   sets TRAWL_OPS_LISTEN on a declared `ops` port, where its /metrics is (the
   api serves none on its HTTP port then); its prometheus.io/port annotation,
   the `trawl-metrics` Services and the ServiceMonitor's endpoints point at that
   port and no other; where NetworkPolicies admit scrapers to one role's ops
   port they admit the same peers to every role's (the isolated pool may have
   its own).
   The isolated pool (browse slices): its image is the browser image (another
   repository than the other roles'), it sets TRAWL_WORKER_POOL=isolated and
   TRAWL_BROWSER_POOL, and its NetworkPolicy lets it reach the port of each
   browser endpoint its settings name (BRIGHTDATA_BROWSER_ENDPOINT, default
   wss://brd.superproxy.io:9222; BRIGHTDATA_PROXY_ENDPOINT, default
   brd.superproxy.io:33335; TRAWL_BROWSER_WS when set), at that address when it
   is one.
3. The scenario: --expect Kind=N says how many objects of a kind the value set
   must produce (so a value set that silently turned a feature off fails).
"""

from __future__ import annotations

import argparse
import ipaddress
import re
import sys
from collections import Counter
from typing import Any
from urllib.parse import urlsplit

import yaml
from cloudcoil.models.keda.v1alpha1 import ScaledObject
from cloudcoil.models.prometheus_operator.v1 import ServiceMonitor

CUSTOM_MODELS = {
    ("keda.sh/v1alpha1", "ScaledObject"): ScaledObject,
    ("monitoring.coreos.com/v1", "ServiceMonitor"): ServiceMonitor,
}

# https://keda.sh/docs/latest/scalers/nats-jetstream/ (parameter list).
NATS_JETSTREAM_KEYS = {
    "natsServerMonitoringEndpoint",
    "account",
    "stream",
    "consumer",
    "lagThreshold",
    "activationLagThreshold",
    "useHttps",
}
NATS_JETSTREAM_REQUIRED = {"natsServerMonitoringEndpoint", "account", "stream", "consumer", "lagThreshold"}

POD_KINDS = {"Deployment", "Job", "StatefulSet", "DaemonSet"}

errors: list[str] = []


def fail(where: str, msg: str) -> None:
    errors.append(f"{where}: {msg}")


def name_of(doc: dict[str, Any]) -> str:
    return f"{doc.get('kind')}/{(doc.get('metadata') or {}).get('name')}"


def diff(a: Any, b: Any, path: str = "") -> list[str]:
    """Where two JSON-like values differ (for the round-trip check)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b), key=str):
            if k not in a:
                out.append(f"{path}/{k}: dropped by the model (not in the CRD schema)")
            elif k not in b:
                out.append(f"{path}/{k}: added by the model")
            else:
                out += diff(a[k], b[k], f"{path}/{k}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: list length {len(a)} became {len(b)}"]
        out = []
        for i, (x, y) in enumerate(zip(a, b)):
            out += diff(x, y, f"{path}/{i}")
        return out
    if a != b or type(a) is not type(b):
        return [f"{path}: {a!r} became {b!r} (wrong type or value for the CRD schema)"]
    return []


def check_custom(doc: dict[str, Any]) -> None:
    key = (doc.get("apiVersion"), doc.get("kind"))
    model = CUSTOM_MODELS.get(key)
    if model is None:
        fail(name_of(doc), f"custom resource {key[0]} {key[1]} has no schema to validate it against")
        return
    try:
        parsed = model.model_validate(doc)
    except Exception as e:  # pydantic.ValidationError, with every field error
        fail(name_of(doc), f"does not match the {key[1]} CRD schema:\n{e}")
        return
    back = parsed.model_dump(by_alias=True, exclude_unset=True, mode="json")
    for d in diff(doc, back):
        fail(name_of(doc), d)


def check_scaled_object(doc: dict[str, Any], deployments: dict[str, dict[str, Any]]) -> None:
    where = name_of(doc)
    spec = doc.get("spec") or {}
    target = (spec.get("scaleTargetRef") or {}).get("name")
    if target not in deployments:
        fail(where, f"scaleTargetRef {target!r} is not a rendered Deployment")
    lo, hi = spec.get("minReplicaCount", 0), spec.get("maxReplicaCount", 100)
    if lo > hi:
        fail(where, f"minReplicaCount {lo} > maxReplicaCount {hi}")
    for i, trig in enumerate(spec.get("triggers") or []):
        if trig.get("type") != "nats-jetstream":
            continue
        meta = trig.get("metadata") or {}
        for k in sorted(set(meta) - NATS_JETSTREAM_KEYS):
            fail(where, f"triggers[{i}].metadata.{k}: not a nats-jetstream parameter")
        for k in sorted(NATS_JETSTREAM_REQUIRED - set(meta)):
            fail(where, f"triggers[{i}].metadata.{k}: missing")
        for k, v in meta.items():
            if not isinstance(v, str):
                fail(where, f"triggers[{i}].metadata.{k}: {v!r} must be a string")
        for k in ("lagThreshold", "activationLagThreshold"):
            if k in meta and not re.fullmatch(r"[0-9]+", str(meta[k])):
                fail(where, f"triggers[{i}].metadata.{k}: {meta[k]!r} is not a whole number")
        if meta.get("lagThreshold") == "0":
            fail(where, f"triggers[{i}].metadata.lagThreshold must be above 0")
        if not re.fullmatch(r"[A-Z0-9_-]+_SLICES", str(meta.get("stream", ""))):
            fail(where, f"triggers[{i}].metadata.stream {meta.get('stream')!r} is not <PREFIX>_SLICES")
        if not re.fullmatch(r"[^:/\s]+:[0-9]+", str(meta.get("natsServerMonitoringEndpoint", ""))):
            fail(where, "natsServerMonitoringEndpoint must be host:port (no scheme)")
        if meta.get("useHttps") not in (None, "true", "false"):
            fail(where, f"useHttps {meta.get('useHttps')!r} must be \"true\" or \"false\"")


def pod_template(doc: dict[str, Any]) -> dict[str, Any]:
    return ((doc.get("spec") or {}).get("template")) or {}


def selector_matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def check_pod(doc: dict[str, Any], secrets: set[str]) -> None:
    where = name_of(doc)
    spec = pod_template(doc).get("spec") or {}
    psc = spec.get("securityContext") or {}
    if psc.get("runAsNonRoot") is not True:
        fail(where, "pod securityContext.runAsNonRoot must be true")
    if (psc.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
        fail(where, "pod seccompProfile must be RuntimeDefault")
    if spec.get("automountServiceAccountToken") is not False:
        fail(where, "automountServiceAccountToken must be false (trawl never calls the Kubernetes API)")
    tmp_volumes = {v["name"] for v in spec.get("volumes") or [] if "emptyDir" in v}
    for c in spec.get("containers") or []:
        cw = f"{where} container {c.get('name')}"
        sc = c.get("securityContext") or {}
        if sc.get("readOnlyRootFilesystem") is not True:
            fail(cw, "readOnlyRootFilesystem must be true")
        if sc.get("allowPrivilegeEscalation") is not False:
            fail(cw, "allowPrivilegeEscalation must be false")
        if "ALL" not in ((sc.get("capabilities") or {}).get("drop") or []):
            fail(cw, "capabilities must drop ALL")
        if sc.get("runAsUser", psc.get("runAsUser")) != 65532:
            fail(cw, "must run as UID 65532")
        mounts = {m.get("mountPath"): m.get("name") for m in c.get("volumeMounts") or []}
        if mounts.get("/tmp") not in tmp_volumes:
            fail(cw, "needs an emptyDir at /tmp (the root filesystem is read-only)")
        ports = {p.get("name") for p in c.get("ports") or []} | {p.get("containerPort") for p in c.get("ports") or []}
        if doc.get("kind") == "Deployment":
            for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
                get = (c.get(probe) or {}).get("httpGet") or {}
                if get.get("path") != path:
                    fail(cw, f"{probe} must GET {path}")
                elif get.get("port") not in ports:
                    fail(cw, f"{probe} port {get.get('port')!r} is not a container port")
        for env in c.get("env") or []:
            ref = (env.get("valueFrom") or {}).get("secretKeyRef")
            if ref and ref.get("name") not in secrets:
                fail(cw, f"env {env.get('name')} reads Secret {ref.get('name')!r}, which is neither rendered nor declared external")
        names = [e.get("name") for e in c.get("env") or []]
        for dup in sorted(n for n, k in Counter(names).items() if k > 1):
            fail(cw, f"env {dup} is set twice")


ROLES = {"api", "scheduler", "worker"}
METRICS_LABEL = "trawl-metrics"


def ops_port(container: dict[str, Any]) -> int | None:
    for p in container.get("ports") or []:
        if p.get("name") == "ops":
            return p.get("containerPort")
    return None


def rule_admits(rule: dict[str, Any], name: str, number: int | None) -> bool:
    ports = rule.get("ports")
    if not ports:
        return True
    return any(p.get("port") in (name, number) for p in ports)


def canonical(peers: Any) -> str:
    return yaml.safe_dump(peers, sort_keys=True)


def check_metrics(docs: list[dict[str, Any]], deployments: dict[str, dict[str, Any]]) -> None:
    """Where /metrics is served, annotated, discovered, scraped and admitted."""
    roles: dict[str, tuple[dict[str, Any], int | None]] = {}
    for name, d in deployments.items():
        for c in (pod_template(d).get("spec") or {}).get("containers") or []:
            args = c.get("args") or []
            if not args or args[0] not in ROLES:
                continue
            cw = f"Deployment/{name} container {c.get('name')}"
            env = {e.get("name"): e.get("value") for e in c.get("env") or []}
            port = ops_port(c)
            roles[name] = (d, port)
            listen = env.get("TRAWL_OPS_LISTEN")
            if listen is None:
                fail(cw, f"`trawl {args[0]}` must set TRAWL_OPS_LISTEN (its /healthz, /readyz and /metrics)")
                continue
            if port is None:
                fail(cw, "TRAWL_OPS_LISTEN is set but no container port is named `ops`")
                continue
            if str(listen).rsplit(":", 1)[-1] != str(port):
                fail(cw, f"TRAWL_OPS_LISTEN {listen!r} is not the `ops` port {port}")
            ann = (pod_template(d).get("metadata") or {}).get("annotations") or {}
            if "prometheus.io/port" in ann and ann["prometheus.io/port"] != str(port):
                fail(cw, f"prometheus.io/port {ann['prometheus.io/port']!r} is not the `ops` port {port} (where /metrics is)")

    services = [d for d in docs if d.get("kind") == "Service"]
    discovered: set[str] = set()
    for svc in services:
        labels = (svc.get("metadata") or {}).get("labels") or {}
        if labels.get(METRICS_LABEL) != "true":
            continue
        sel = (svc.get("spec") or {}).get("selector") or {}
        for name, (d, port) in roles.items():
            pod_labels = (pod_template(d).get("metadata") or {}).get("labels") or {}
            if not selector_matches(sel, pod_labels):
                continue
            discovered.add(name)
            for sp in (svc.get("spec") or {}).get("ports") or []:
                if sp.get("targetPort") not in ("ops", port):
                    fail(name_of(svc), f"{METRICS_LABEL} Service targets {sp.get('targetPort')!r} of Deployment/{name}, which serves /metrics on `ops` only")
    for name in sorted(set(roles) - discovered):
        fail(f"Deployment/{name}", f"no {METRICS_LABEL} Service selects it (the ServiceMonitor would not find it)")

    for sm in (d for d in docs if d.get("kind") == "ServiceMonitor"):
        sel = ((sm.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        selected = [s for s in services if selector_matches(sel, (s.get("metadata") or {}).get("labels") or {})]
        names = {p.get("name") for s in selected for p in (s.get("spec") or {}).get("ports") or []}
        scraped = set()
        for i, ep in enumerate((sm.get("spec") or {}).get("endpoints") or []):
            if ep.get("port") not in names:
                fail(name_of(sm), f"endpoints[{i}].port {ep.get('port')!r} is not a port of any Service it selects ({sorted(n for n in names if n)})")
            scraped.add(ep.get("port"))
        for s in selected:
            if not {p.get("name") for p in (s.get("spec") or {}).get("ports") or []} & scraped:
                fail(name_of(sm), f"selects {name_of(s)} but scrapes none of its ports")

    policies = [d for d in docs if d.get("kind") == "NetworkPolicy"]
    admitted: dict[str, str] = {}
    for name, (d, port) in roles.items():
        pod_labels = (pod_template(d).get("metadata") or {}).get("labels") or {}
        if pod_labels.get("app.kubernetes.io/component", "").endswith("-isolated"):
            continue
        mine = [
            np
            for np in policies
            if selector_matches(((np.get("spec") or {}).get("podSelector") or {}).get("matchLabels") or {}, pod_labels)
        ]
        if not mine:
            continue
        peers = [
            rule.get("from", "anyone")
            for np in mine
            for rule in (np.get("spec") or {}).get("ingress") or []
            if rule_admits(rule, "ops", port)
        ]
        admitted[name] = canonical(peers)
    if len(set(admitted.values())) > 1:
        detail = "; ".join(f"Deployment/{n}: {yaml.safe_load(v) or 'nobody'}" for n, v in sorted(admitted.items()))
        fail("NetworkPolicies", f"the roles' ops ports (/metrics) admit different scrapers: {detail}")


def endpoint_port(url: str) -> tuple[str, int]:
    """(host, port) of a browser endpoint: a URL or host:port."""
    u = urlsplit(url if "://" in url else f"tcp://{url}")
    default = {"wss": 443, "https": 443, "ws": 80, "http": 80}.get(u.scheme, 0)
    return u.hostname or "", u.port or default


def rule_reaches(rule: dict[str, Any], host: str, port: int) -> bool:
    ports = rule.get("ports")
    if ports and not any(p.get("port") == port and p.get("protocol", "TCP") == "TCP" for p in ports):
        return False
    peers = rule.get("to")
    if not peers:
        return True
    for peer in peers:
        block = peer.get("ipBlock")
        if not block:
            continue
        try:
            addr = ipaddress.ip_address(host)
        except ValueError:
            # A name: the rule must open the port to public addresses.
            if block.get("cidr") == "0.0.0.0/0":
                return True
            continue
        net = ipaddress.ip_network(block["cidr"])
        if addr in net and not any(addr in ipaddress.ip_network(e) for e in block.get("except") or []):
            return True
    return False


def check_isolated(docs: list[dict[str, Any]], deployments: dict[str, dict[str, Any]]) -> None:
    isolated = {
        n: d
        for n, d in deployments.items()
        if ((pod_template(d).get("metadata") or {}).get("labels") or {}).get("app.kubernetes.io/component", "").endswith(
            "-isolated"
        )
    }
    repo = lambda image: image.rsplit("@", 1)[0].rsplit(":", 1)[0]  # noqa: E731
    others = {
        repo(c.get("image", ""))
        for n, d in deployments.items()
        if n not in isolated
        for c in (pod_template(d).get("spec") or {}).get("containers") or []
    }
    policies = [d for d in docs if d.get("kind") == "NetworkPolicy"]
    for name, d in isolated.items():
        where = f"Deployment/{name}"
        pod = pod_template(d)
        labels = (pod.get("metadata") or {}).get("labels") or {}
        for c in (pod.get("spec") or {}).get("containers") or []:
            if repo(c.get("image", "")) in others:
                fail(where, f"runs {c.get('image')}, the other roles' image, not the browser image")
            env = {e["name"]: e.get("value") for e in c.get("env") or []}
            if env.get("TRAWL_WORKER_POOL") != "isolated":
                fail(where, "does not set TRAWL_WORKER_POOL=isolated")
            if not str(env.get("TRAWL_BROWSER_POOL") or "").isdigit():
                fail(where, "does not set TRAWL_BROWSER_POOL")
            mine = [
                np
                for np in policies
                if selector_matches(((np.get("spec") or {}).get("podSelector") or {}).get("matchLabels") or {}, labels)
            ]
            if not mine:
                continue
            endpoints = [
                env.get("BRIGHTDATA_BROWSER_ENDPOINT") or "wss://brd.superproxy.io:9222",
                env.get("BRIGHTDATA_PROXY_ENDPOINT") or "brd.superproxy.io:33335",
            ] + ([env["TRAWL_BROWSER_WS"]] if env.get("TRAWL_BROWSER_WS") else [])
            for url in endpoints:
                host, port = endpoint_port(url)
                if not any(
                    rule_reaches(rule, host, port) for np in mine for rule in (np.get("spec") or {}).get("egress") or []
                ):
                    fail(where, f"its NetworkPolicy does not let it reach the browser endpoint {host}:{port}")


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("rendered")
    p.add_argument("--expect", action="append", default=[], help="Kind=N")
    p.add_argument("--external-secret", action="append", default=[])
    args = p.parse_args()

    with open(args.rendered) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]

    kinds = Counter(d.get("kind") for d in docs)
    for e in args.expect:
        kind, n = e.split("=")
        if kinds.get(kind, 0) != int(n):
            fail("value set", f"expected {n} {kind}, rendered {kinds.get(kind, 0)}")

    deployments = {d["metadata"]["name"]: d for d in docs if d.get("kind") == "Deployment"}
    secrets = {d["metadata"]["name"] for d in docs if d.get("kind") == "Secret"} | set(args.external_secret)
    pods = [d for d in docs if d.get("kind") in POD_KINDS]
    scaled = {
        (d.get("spec") or {}).get("scaleTargetRef", {}).get("name")
        for d in docs
        if d.get("kind") == "ScaledObject"
    }

    for d in docs:
        api = str(d.get("apiVersion", ""))
        group = api.split("/")[0] if "/" in api else ""
        if group.endswith(".sh") or group.endswith("coreos.com"):
            check_custom(d)
        if d.get("kind") == "ScaledObject":
            check_scaled_object(d, deployments)

    for d in pods:
        check_pod(d, secrets)

    for name, d in deployments.items():
        has = "replicas" in (d.get("spec") or {})
        if name in scaled and has:
            fail(f"Deployment/{name}", "scaled by KEDA, so it must not set replicas (KEDA owns them)")
        if name not in scaled and not has:
            fail(f"Deployment/{name}", "not scaled by KEDA, so it must set replicas")

    check_metrics(docs, deployments)
    check_isolated(docs, deployments)

    pod_labels = [(d, (pod_template(d).get("metadata") or {}).get("labels") or {}) for d in pods]
    for d in docs:
        kind, spec = d.get("kind"), d.get("spec") or {}
        sel = None
        if kind == "Service":
            sel = spec.get("selector") or {}
        elif kind in ("NetworkPolicy", "PodDisruptionBudget"):
            key = "podSelector" if kind == "NetworkPolicy" else "selector"
            sel = (spec.get(key) or {}).get("matchLabels") or {}
        if sel is None:
            continue
        matched = [pd for pd, labels in pod_labels if selector_matches(sel, labels)]
        if not sel or not matched:
            fail(name_of(d), f"selector {sel} matches no rendered pod")
            continue
        if kind == "Service":
            for port in spec.get("ports") or []:
                tp = port.get("targetPort")
                for pd in matched:
                    cports = [
                        q
                        for c in (pod_template(pd).get("spec") or {}).get("containers") or []
                        for q in c.get("ports") or []
                    ]
                    if tp not in {q.get("name") for q in cports} | {q.get("containerPort") for q in cports}:
                        fail(name_of(d), f"targetPort {tp!r} is not a port of {name_of(pd)}")

    for e in errors:
        print(f"FAIL {e}")
    print(
        f"{len(docs)} objects ({', '.join(f'{k} {v}' for k, v in sorted(kinds.items()))}): "
        f"{'FAILED, ' + str(len(errors)) + ' problem(s)' if errors else 'custom resources and chart invariants OK'}"
    )
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
