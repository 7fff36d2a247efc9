"""Are the environment variables deploy/ sets ones trawl reads? (deploy/check)

    python settings.py REPO_ROOT FILE...

Every TRAWL_* and BRIGHTDATA_* name in the given files (the compose file, the
rendered charts) must appear in trawl's source (services/**/*.rs) or in
docs/configuration.md, so a misspelt setting fails here instead of being
silently ignored by a running role. OTEL_* names are the standard OpenTelemetry
variables, read by the SDK rather than by name in trawl's code.

PENDING lists settings that are being implemented while this deployment is
written; they pass, and are reported while the code does not have them yet.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

NAME = re.compile(r"\b(?:TRAWL|BRIGHTDATA|OTEL)_[A-Z0-9_]*[A-Z0-9]\b")
STANDARD = {"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SERVICE_NAME"}
PENDING = {
    "TRAWL_OPS_LISTEN",
    "TRAWL_SLACK_WEBHOOK_URL",
    "TRAWL_SLACK_SIGNING_SECRET",
    "TRAWL_WEBHOOK_URL",
    "TRAWL_WEBHOOK_SECRET",
    "TRAWL_APPROVAL_TTL",
}


def main() -> int:
    root = Path(sys.argv[1])
    known: set[str] = set()
    for rs in root.glob("services/**/*.rs"):
        known |= set(NAME.findall(rs.read_text(errors="replace")))
    known |= set(NAME.findall((root / "docs" / "configuration.md").read_text()))

    used: dict[str, set[str]] = {}
    for f in sys.argv[2:]:
        for name in NAME.findall(Path(f).read_text()):
            used.setdefault(name, set()).add(f)

    errors = []
    pending = []
    for name in sorted(used):
        if name in known or name in STANDARD:
            continue
        if name in PENDING:
            pending.append(name)
            continue
        errors.append(f"{name} (in {', '.join(sorted(used[name]))}) is not a setting trawl reads")
    for e in errors:
        print(f"FAIL {e}")
    if pending:
        print(f"note: not in the code yet (being implemented): {', '.join(pending)}")
    print(f"{len(used)} setting names used: {'FAILED' if errors else 'all known'}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
