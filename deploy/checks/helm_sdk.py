"""`helm lint` and `helm template` for deploy/check, offline, through Helm's own Go SDK.

No PyPI package ships the `helm` executable for Linux, so this drives Helm v4's
SDK (the same chart loader, linter and template engine the CLI uses) through
helm-python-sdk, a ctypes binding over `libhelm_c`. The options mirror the CLI:

    python helm_sdk.py lint CHART [-f values.yaml ...] [--namespace NS]
    python helm_sdk.py template CHART [-f values.yaml ...] [--name N] [--namespace NS]

`lint` runs Helm's linter in strict mode (warnings fail, as `helm lint --strict`)
with the given values, and exits 1 on any warning or error. `template` checks the
values against values.schema.json, renders every template as `helm template`
would for an install (hooks included, NOTES.txt and empty documents left out)
and prints the manifests as one multi-document YAML stream, each document under
a `# Source:` comment. NOTES.txt must render too; it is printed to stderr.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import helm_python as helm

# Lint message severities (helm.sh/helm/v4/pkg/lint/support).
UNKNOWN, INFO, WARNING, ERROR = 0, 1, 2, 3
SEVERITY = {UNKNOWN: "UNKNOWN", INFO: "INFO", WARNING: "WARNING", ERROR: "ERROR"}


def coalesce(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Merges values files the way `-f a.yaml -f b.yaml` does: later files win,
    maps merge key by key, null deletes a key."""
    out = dict(base)
    for key, value in override.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = coalesce(out[key], value)
        else:
            out[key] = value
    return out


def user_values(files: list[str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for f in files:
        # Helm's own YAML parser, so the values mean what they mean to `helm`.
        values = coalesce(values, helm.values_from_yaml(Path(f).read_text()) or {})
    return values


def lint(args: argparse.Namespace) -> int:
    report = helm.lint(
        args.chart,
        user_values(args.values),
        strict=True,
        namespace=args.namespace,
        kube_version=args.kube_version,
    )
    worst = UNKNOWN
    for m in report.get("messages") or []:
        sev = int(m.get("severity", UNKNOWN))
        worst = max(worst, sev)
        print(f"[{SEVERITY.get(sev, sev)}] {m.get('path', '')}: {m.get('error', '')}")
    for e in report.get("errors") or []:
        worst = ERROR
        print(f"[ERROR] {e}")
    charts = report.get("total_charts_linted", 0)
    failed = worst >= WARNING or charts < 1
    print(f"{charts} chart(s) linted, {'FAILED' if failed else 'no failures'}")
    return 1 if failed else 0


def template(args: argparse.Namespace) -> int:
    values = user_values(args.values)
    with helm.Chart.load(args.chart) as chart:
        chart.validate_schema(values)
        rendered = chart.render(
            values,
            name=args.name,
            namespace=args.namespace,
            revision=1,
            is_install=True,
        )
    docs = 0
    for path in sorted(rendered):
        text = rendered[path]
        base = path.rsplit("/", 1)[-1]
        if base == "NOTES.txt":
            print(text, file=sys.stderr)
            continue
        if base.startswith("_"):
            continue
        for doc in text.split("\n---"):
            body = doc.strip("\n")
            meaningful = [
                line
                for line in body.splitlines()
                if line.strip() and not line.lstrip().startswith("#") and line.strip() != "---"
            ]
            if not meaningful:
                continue
            print(f"---\n# Source: {path}\n{body}")
            docs += 1
    if docs == 0:
        print("no manifests rendered", file=sys.stderr)
        return 1
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("lint", "template"):
        s = sub.add_parser(name)
        s.add_argument("chart")
        s.add_argument("-f", "--values", action="append", default=[])
        s.add_argument("--namespace", default="trawl")
        s.add_argument("--name", default="trawl")
        s.add_argument("--kube-version", default=None)
    args = p.parse_args()
    try:
        return lint(args) if args.command == "lint" else template(args)
    except helm.HelmError as e:
        print(f"helm {args.command}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
