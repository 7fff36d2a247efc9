"""Does deploy/Dockerfile copy what `cargo build -p trawl` needs? (deploy/check)

    python dockerfile.py REPO_ROOT

Cargo resolves the whole workspace even for one package, so every workspace
member (root Cargo.toml `members`, globs expanded) must be in the build
context's copies; so must the files outside a crate that build scripts and
`include_str!`/`include_bytes!` reach with `../` paths (proto/, migrations/).
The COPY sources of the build stage are read from the Dockerfile, and
.dockerignore must not exclude any git-tracked file under them (its patterns are
matched with a simplified version of Docker's rules: `*`, `?`, `**`, trailing
`/`, no `!` exceptions).

The `browser` stage (the isolated pool's image) must be Debian bookworm like
the builder (the binary's glibc), install Debian's `chromium`, copy the binary
the build stage made, name it as TRAWL_CHROMIUM, and run as 65532 with the
`trawl` entrypoint; the last stage (the default target) must stay the
distroless runtime. The build stage installs the tool guard's detector model
(`trawl models install`), and both role images copy it and set TRAWL_MODELS_DIR.

It does not run the build (that needs Docker and a Rust toolchain): a crate that
fails to compile, or a dependency missing from Cargo.lock, is not seen here.
"""

from __future__ import annotations

import glob
import re
import subprocess
import sys
import tomllib
from pathlib import Path

REF = re.compile(r"""(?:include_str|include_bytes)!\(\s*"(\.\./[^"]+)"|join\(\s*"(\.\./[^"]+)"\s*\)""")


def copy_sources(dockerfile: Path) -> list[str]:
    """The sources of the COPY instructions of the first (build) stage."""
    sources: list[str] = []
    stage = 0
    text = dockerfile.read_text().replace("\\\n", " ")
    for line in text.splitlines():
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        op = words[0].upper()
        if op == "FROM":
            stage += 1
            if stage > 1:
                break
        elif op in ("COPY", "ADD"):
            args = [w for w in words[1:] if not w.startswith("--")]
            if any(w.startswith("--from") for w in words[1:]):
                continue
            sources += [a.rstrip("/").removeprefix("./") for a in args[:-1]]
    return sources


def stages(dockerfile: Path) -> list[tuple[str, str, list[str]]]:
    """(base image, stage name, instructions) of every stage, in order."""
    out: list[tuple[str, str, list[str]]] = []
    text = dockerfile.read_text().replace("\\\n", " ")
    for line in text.splitlines():
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        if words[0].upper() == "FROM":
            name = words[3] if len(words) > 3 and words[2].upper() == "AS" else ""
            out.append((words[1], name, []))
        elif out:
            out[-1][2].append(" ".join(words))
    return out


def browser_stage_errors(dockerfile: Path) -> list[str]:
    all_stages = stages(dockerfile)
    found = [s for s in all_stages if s[1] == "browser"]
    if not found:
        return ["no `browser` stage (the isolated pool's image with Chromium)"]
    base, _, ops = found[0]
    errors = []
    if not re.fullmatch(r"debian:bookworm(-slim)?(@sha256:[0-9a-f]{64})?", base):
        errors.append(f"the browser stage is FROM {base}, not Debian bookworm (the builder's glibc)")
    run = " ".join(o for o in ops if o.upper().startswith("RUN "))
    if not re.search(r"apt-get install\b.*\bchromium\b", run):
        errors.append("the browser stage does not install Debian's chromium")
    want = {
        "COPY --from=build /out/trawl /usr/local/bin/trawl": "copies the build stage's binary",
        "USER 65532:65532": "runs as 65532",
        'ENTRYPOINT ["trawl"]': "has the trawl entrypoint",
    }
    for op, what in want.items():
        if op not in ops:
            errors.append(f"the browser stage never {what} ({op})")
    if not any(o.startswith("ENV ") and "TRAWL_CHROMIUM=/usr/bin/chromium" in o for o in ops):
        errors.append("the browser stage does not set TRAWL_CHROMIUM=/usr/bin/chromium")
    errors += model_errors("browser", ops)
    if all_stages[-1][1] != "runtime":
        errors.append(f"the last stage (the default target) is {all_stages[-1][1] or all_stages[-1][0]}, not runtime")
    else:
        errors += model_errors("runtime", all_stages[-1][2])
    build_run = " ".join(o for o in all_stages[0][2] if o.upper().startswith("RUN "))
    if "trawl models install" not in build_run or "--dir /out/models/multilingual-e5-small" not in build_run:
        errors.append("the build stage does not install the detector's model into /out/models (trawl models install)")
    return errors


def model_errors(stage: str, ops: list[str]) -> list[str]:
    """A role's image must carry the guard detector's model where the roles look."""
    errors = []
    if "COPY --from=build /out/models /usr/local/share/trawl/models" not in ops:
        errors.append(f"the {stage} stage does not copy the detector's model (/out/models)")
    if not any(o.startswith("ENV ") and "TRAWL_MODELS_DIR=/usr/local/share/trawl/models" in o for o in ops):
        errors.append(f"the {stage} stage does not set TRAWL_MODELS_DIR=/usr/local/share/trawl/models")
    return errors


def covered(path: str, sources: list[str]) -> bool:
    return any(path == s or path.startswith(s + "/") for s in sources)


def pattern_regex(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern as a regex over slash-separated relative paths."""
    p = pattern.strip().removeprefix("/").rstrip("/")
    out, i = "", 0
    while i < len(p):
        if p.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif p.startswith("**", i):
            out, i = out + ".*", i + 2
        elif p[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif p[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(p[i]), i + 1
    return re.compile(out + r"\Z")


def ignored(path: str, patterns: list[str]) -> str | None:
    """The pattern that excludes `path` (itself or a folder above it), if any."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pat in patterns:
        rx = pattern_regex(pat)
        if any(rx.match(pre) for pre in prefixes):
            return pat
    return None


def main() -> int:
    root = Path(sys.argv[1]).resolve()
    errors: list[str] = []
    sources = copy_sources(root / "deploy" / "Dockerfile")
    if not sources:
        errors.append("no COPY instructions found in the build stage")

    workspace = tomllib.loads((root / "Cargo.toml").read_text()).get("workspace", {})
    need = {"Cargo.toml", "Cargo.lock"}
    for pattern in workspace.get("members", []):
        for m in sorted(glob.glob(str(root / pattern))):
            if (Path(m) / "Cargo.toml").is_file():
                need.add(str(Path(m).relative_to(root)))

    # Paths outside a crate that its build script or include_* macros read.
    for rs in sorted(root.glob("services/*/build.rs")) + sorted(root.glob("services/*/src/**/*.rs")):
        for m in REF.finditer(rs.read_text()):
            rel = m.group(1) or m.group(2)
            # include_*! paths are relative to the file; build.rs joins are
            # relative to CARGO_MANIFEST_DIR, the folder build.rs is in.
            target = (rs.parent / rel).resolve()
            try:
                target_rel = target.relative_to(root)
            except ValueError:
                continue
            top = target_rel.parts[0]
            if top not in ("services",) and (root / top).exists():
                need.add(top)

    for n in sorted(need):
        if not covered(n, sources):
            errors.append(f"{n} is needed by the build but not copied (COPY sources: {', '.join(sources)})")

    dockerignore = root / ".dockerignore"
    patterns = [
        line.strip()
        for line in (dockerignore.read_text().splitlines() if dockerignore.exists() else [])
        if line.strip() and not line.strip().startswith("#")
    ]
    if any(p.startswith("!") for p in patterns):
        errors.append(".dockerignore uses ! exceptions, which this check does not model")
    tracked = subprocess.run(
        ["git", "ls-files", "--", *sources], cwd=root, capture_output=True, text=True, check=True
    ).stdout.split()
    for f in tracked:
        pat = ignored(f, patterns)
        if pat:
            errors.append(f"{f} is needed by the build but .dockerignore excludes it ({pat})")
    for must in ("target", ".git"):
        if not ignored(must, patterns):
            errors.append(f".dockerignore should exclude {must}/")

    errors += browser_stage_errors(root / "deploy" / "Dockerfile")

    for e in errors:
        print(f"FAIL {e}")
    print(
        f"build stage copies {', '.join(sources)}; {len(need)} required paths, {len(tracked)} tracked files; "
        "browser stage: Debian bookworm, chromium, the binary, 65532: "
        f"{'FAILED' if errors else 'OK'}"
    )
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
