"""Checks of deploy/compose.yaml beyond the Compose Specification schema (deploy/check).

    python compose.py deploy/compose.yaml
    python compose.py deploy/compose.local.yaml --override-of deploy/compose.yaml

The schema (check-jsonschema's vendored compose-spec) says the file is well
formed. This says it hangs together, without Docker:

- every `depends_on` names a service, with a known condition, and a service
  waited on with `service_completed_successfully` is a one-shot (restart "no");
  `service_healthy` only on services that have a healthcheck;
- `build.context` and `build.dockerfile` exist;
- every trawl service (image trawl:dev) runs a real role, has a read-only root
  filesystem with a tmpfs at /tmp, and drops all capabilities;
- published ports are bound to 127.0.0.1;
- `${...}` interpolations are well formed.

For the override of images built without a registry (compose.local.yaml): it
names only services of the base file; every service runs an image that
deploy/images/build-local builds, never pulled (`pull_policy: never`), and the
trawl roles drop the base file's `build` (`!reset`).

It cannot tell whether the images exist or pull, whether the Dockerfile builds,
or whether the stack starts: that needs a Docker engine.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import yaml

ROLES = {"api", "scheduler", "worker", "migrate", "sim"}
CONDITIONS = {"service_started", "service_healthy", "service_completed_successfully"}
INTERPOLATION = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?+])([^}]*))?\}")


def walk_strings(node: Any):
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for k, v in node.items():
            yield from walk_strings(k)
            yield from walk_strings(v)
    elif isinstance(node, list):
        for v in node:
            yield from walk_strings(v)


RESET = object()


class OverrideLoader(yaml.SafeLoader):
    """YAML with Compose's `!reset` tag (it removes what the base file sets)."""


OverrideLoader.add_constructor("!reset", lambda loader, node: RESET)


def check_override(path: Path, base_path: Path) -> int:
    doc = yaml.load(path.read_text(), Loader=OverrideLoader)
    base = yaml.safe_load(base_path.read_text()).get("services") or {}
    builder = (path.parent / "images" / "build-local").read_text()
    errors: list[str] = []
    for name, svc in (doc.get("services") or {}).items():
        if name not in base:
            errors.append(f"{name}: not a service of {base_path.name}")
            continue
        image = svc.get("image")
        if not image or image not in builder:
            errors.append(f"{name}: image {image!r} is not one deploy/images/build-local builds")
        if svc.get("pull_policy") != "never":
            errors.append(f"{name}: needs pull_policy: never (no registry)")
        if "build" in base[name] and svc.get("build") is not RESET:
            errors.append(f"{name}: must drop the base file's build (build: !reset null)")
    missing = sorted(set(base) - set(doc.get("services") or {}))
    if missing:
        errors.append(f"services left on registry images: {', '.join(missing)}")
    for e in errors:
        print(f"FAIL {e}")
    print(f"{len(doc.get('services') or {})} services overridden: {'FAILED' if errors else 'every image local, never pulled'}")
    return 1 if errors else 0


def main() -> int:
    path = Path(sys.argv[1])
    if len(sys.argv) == 4 and sys.argv[2] == "--override-of":
        return check_override(path, Path(sys.argv[3]))
    text = path.read_text()
    doc = yaml.safe_load(text)
    services: dict[str, Any] = doc.get("services") or {}
    errors: list[str] = []

    for s in walk_strings(doc):
        rest = INTERPOLATION.sub("", s.replace("$$", ""))
        if "${" in rest:
            errors.append(f"malformed interpolation in {s!r}")

    for name, svc in services.items():
        deps = svc.get("depends_on") or {}
        if isinstance(deps, list):
            deps = {d: {"condition": "service_started"} for d in deps}
        for dep, spec in deps.items():
            if dep not in services:
                errors.append(f"{name}: depends_on {dep!r}, which is not a service")
                continue
            cond = (spec or {}).get("condition", "service_started")
            if cond not in CONDITIONS:
                errors.append(f"{name}: depends_on {dep} with unknown condition {cond!r}")
            if cond == "service_healthy" and "healthcheck" not in services[dep]:
                errors.append(f"{name}: waits for {dep} to be healthy, but {dep} has no healthcheck")
            if cond == "service_completed_successfully" and str(services[dep].get("restart", "no")) != "no":
                errors.append(f"{name}: waits for {dep} to complete, but {dep} restarts")

        build = svc.get("build")
        if isinstance(build, dict):
            ctx = (path.parent / build.get("context", ".")).resolve()
            if not ctx.is_dir():
                errors.append(f"{name}: build context {ctx} does not exist")
            dockerfile = ctx / build.get("dockerfile", "Dockerfile")
            if not dockerfile.is_file():
                errors.append(f"{name}: Dockerfile {dockerfile} does not exist")

        for port in svc.get("ports") or []:
            if not str(port).startswith("127.0.0.1:"):
                errors.append(f"{name}: port {port} is published on every interface; bind it to 127.0.0.1")

        if svc.get("image") == "trawl:dev":
            cmd = svc.get("command") or []
            if not cmd or cmd[0] not in ROLES:
                errors.append(f"{name}: command {cmd} does not start with a trawl role ({', '.join(sorted(ROLES))})")
            if svc.get("read_only") is not True:
                errors.append(f"{name}: trawl roles run with read_only: true")
            if "/tmp" not in [str(t).split(":")[0] for t in svc.get("tmpfs") or []]:
                errors.append(f"{name}: needs a tmpfs at /tmp (read-only root filesystem)")
            if "ALL" not in (svc.get("cap_drop") or []):
                errors.append(f"{name}: must drop ALL capabilities")

    for e in errors:
        print(f"FAIL {e}")
    print(f"{len(services)} services: {'FAILED' if errors else 'references, roles and hardening OK'}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
