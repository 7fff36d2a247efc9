#!/usr/bin/env python3
"""Scores a `trawl tools scan --json` of tools.json against classes.json.

    trawl tools scan --json --state "$(mktemp -d)" tests/guard/adversarial/tools.json \\
      | python3 tests/guard/adversarial/score.py

A poisoned tool is caught when it is blocked, held for review or refused; a benign
one is wrong when it is. Prints the figures by class.
"""

import json
import os
import sys
from collections import defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    scan = json.load(sys.stdin)
    classes = json.load(open(os.path.join(HERE, "classes.json"), encoding="utf-8"))
    kept = {t["tool"].split(".", 1)[1]: t["state"]["state"] in ("blocked", "held") for t in scan["tools"]}
    for r in scan.get("refused", []):
        kept[(r.get("tool") or r.get("name", "")).split(".", 1)[-1]] = True
    by = defaultdict(lambda: [0, 0])
    missing = [n for n in classes if n not in kept]
    if missing:
        sys.exit(f"not in the scan: {', '.join(missing)}")
    for name, cls in classes.items():
        by[cls][0] += kept[name]
        by[cls][1] += 1
    print(f"guard: {scan.get('guard')}")
    poisoned = [0, 0]
    for cls, (k, n) in sorted(by.items()):
        print(f"{cls:8} {'held wrongly' if cls == 'benign' else 'caught'} {k}/{n}")
        if cls != "benign":
            poisoned[0] += k
            poisoned[1] += n
    print(f"poisoned caught {poisoned[0]}/{poisoned[1]} ({100 * poisoned[0] / poisoned[1]:.1f} %)")


if __name__ == "__main__":
    main()
