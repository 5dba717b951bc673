"""Dependency locks and the drift check (stdlib only; run with the Python of the virtualenv concerned).

``make lock``, ``make test-oldest`` and ``make test-latest`` call it:

* ``freeze`` writes a constraints file from the running interpreter's installed distributions
  (``pip freeze --all`` less the project itself; torch's local ``+cpu`` label dropped, so the same
  line constrains the CPU and the CUDA build of one release);
* ``latest`` prints the names of every requirement of ``pyproject.toml`` (with the given extras)
  without version specifiers: what a drift check upgrades to the newest release;
* ``bounds`` checks that every declared lower bound is the version an oldest lock tests;
* ``drift`` compares the installed versions with a lock and reads a pytest JUnit file: one screen
  of what moved and what broke, each failure put on the package whose code raised it.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata as metadata
import platform
import re
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterable
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
PROJECT = "hf-unified-embed"
#: Packages whose version comes from the machine rather than from the resolve (see the Makefile).
MACHINE_PINNED = {"torch": "2.13.0"}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    if match is None:
        raise ValueError(f"not a requirement: {requirement!r}")
    return canonical(match.group(1))


def declared(extras: Iterable[str] = ()) -> list[str]:
    """The project's requirement strings, then those of ``extras``."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    requirements = list(project["dependencies"])
    for extra in extras:
        requirements += project["optional-dependencies"][extra]
    return requirements


def read_lock(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[canonical(name)] = version.strip()
    return pins


def installed() -> dict[str, str]:
    """Installed versions without local labels (torch's ``+cpu``), as the locks write them."""
    return {canonical(dist.metadata["Name"]): dist.version.split("+", 1)[0] for dist in metadata.distributions()}


#: torch's CUDA runtime packages: a resolver that reads the registry's metadata lists them, but the CPU
#: build installed here needs none of them.
CUDA_ONLY = re.compile(r"^(nvidia-|cuda-|triton$)")


def cmd_freeze(args: argparse.Namespace) -> int:
    if args.resolved is not None:
        frozen = args.resolved.read_text(encoding="utf-8")
    else:
        frozen = subprocess.run(
            [sys.executable, "-m", "pip", "freeze", "--all", "--exclude-editable"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    lines = []
    for line in sorted(frozen.splitlines(), key=str.lower):
        name, sep, version = line.split("#", 1)[0].strip().partition("==")
        if not sep or canonical(name) == PROJECT or CUDA_ONLY.match(canonical(name)):
            continue
        version = version.split("+", 1)[0]  # torch 2.13.0+cpu: the same line fits the CUDA build
        lines.append(f"{canonical(name)}=={version}")
    made_with = f"pip {metadata.version('pip')}" if args.resolved is None else "a resolver's output"
    header = [
        f"# {args.title}",
        f"# Python {platform.python_version()} on {platform.system()} {platform.machine()}, {made_with};"
        f" written {datetime.date.today().isoformat()} by `{args.by}`.",
        "# torch is pinned without its local label (+cpu): the Makefile installs torch==2.13.0 first.",
    ]
    if args.junit is not None:
        header.append(f"# The suite with exactly these versions: {suite_summary(read_junit(args.junit))}.")
    args.output.write_text("\n".join(header + lines) + "\n", encoding="utf-8")
    print(f"wrote {args.output} ({len(lines)} packages)")
    return 0


def cmd_latest(args: argparse.Namespace) -> int:
    names = dict.fromkeys(requirement_name(r) for r in declared(args.extra))
    print(" ".join(name for name in names if name not in MACHINE_PINNED))
    return 0


def lower_bound(requirement: str) -> str | None:
    match = re.search(r">=\s*([0-9][0-9A-Za-z.]*)", requirement)
    return match.group(1) if match else None


def same_release(a: str, b: str) -> bool:
    """``6.2`` and ``6.2.0`` name one release (PEP 440 pads with zeros)."""

    def release(version: str) -> tuple[str, ...]:
        parts = version.split(".")
        while len(parts) > 1 and parts[-1] == "0":
            parts.pop()
        return tuple(parts)

    return release(a) == release(b)


def cmd_bounds(args: argparse.Namespace) -> int:
    """Every declared lower bound must equal the oldest lock's version (so the bound was tested)."""
    pins = read_lock(args.lock)
    problems = []
    for requirement in declared(args.extra):
        name, bound = requirement_name(requirement), lower_bound(requirement)
        if name in MACHINE_PINNED or bound is None:
            continue
        if name not in pins or not same_release(pins[name], bound):
            problems.append(f"{name}: declared >={bound}, {args.lock.name} tests {pins.get(name, 'nothing')}")
    for problem in problems:
        print(problem)
    return 1 if problems else 0


def read_junit(path: Path) -> ElementTree.Element:
    return ElementTree.parse(path).getroot()


def suite_summary(tree: ElementTree.Element) -> str:
    suites = [tree] if tree.tag == "testsuite" else list(tree)
    total = {key: sum(int(s.get(key, 0)) for s in suites) for key in ("tests", "failures", "errors", "skipped")}
    seconds = sum(float(s.get("time", 0)) for s in suites)
    passed = total["tests"] - total["failures"] - total["errors"] - total["skipped"]
    return (
        f"{passed} passed, {total['failures']} failed, {total['errors']} errors, {total['skipped']} skipped"
        f" in {seconds:.0f} s"
    )


def _origin(text: str, packages: dict[str, list[str]]) -> str | None:
    """The package to blame: the one the project's stack check names, else the innermost ``site-packages`` frame's."""
    # hf_unified_embed.utils.stack refuses a path before the neighbour fails: "... (transformers 5.24.0 requires it)".
    # A child process (an example, the CLI) prints it as its one "error:" line instead of a traceback.
    blamed = re.search(r"(?:IncompatibleStackError|error):[^\n]*?\(([A-Za-z0-9._-]+) [0-9][^ ]* requires it\)", text)
    if blamed is not None and canonical(blamed.group(1)) != PROJECT:
        return canonical(blamed.group(1))
    frames = re.findall(r"site-packages/([A-Za-z0-9_]+)", text)
    for module in reversed(frames):
        for distribution in packages.get(module, []):
            if canonical(distribution) != PROJECT:
                return canonical(distribution)
    return None


def _first_line(traceback: str) -> str:
    """The first line pytest marks with ``E`` (the exception), else the traceback's last line."""
    lines = [line.strip() for line in traceback.splitlines() if line.strip()]
    marked = [line[1:].strip() for line in lines if line.startswith("E ")]
    return marked[0] if marked else (lines[-1] if lines else "")


def cmd_drift(args: argparse.Namespace) -> int:
    lock, now = read_lock(args.lock), installed()
    moved = [(name, lock[name], now[name]) for name in sorted(lock) if name in now and now[name] != lock[name]]
    new = sorted(set(now) - set(lock) - {PROJECT})
    tree = read_junit(args.junit)
    packages = metadata.packages_distributions()
    broken: dict[str, list[tuple[str, str]]] = {}
    for case in tree.iter("testcase"):
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        if problem is None:
            continue
        text = (problem.text or "") + (problem.get("message") or "")
        test = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
        origin = _origin(text, packages) or "the project or an unknown package"
        broken.setdefault(origin, []).append((test, _first_line(problem.text or "") or problem.get("message", "")))
    print(f"Drift check {datetime.date.today().isoformat()}: newest releases against {args.lock.name}")
    print(f"moved ({len(moved)}): " + (", ".join(f"{n} {a} -> {b}" for n, a, b in moved) or "nothing"))
    if new:
        print(f"not in the lock ({len(new)}): " + ", ".join(f"{n} {now[n]}" for n in new))
    print(f"suite: {suite_summary(tree)}")
    if not broken:
        print("breaks: nothing")
        return 0
    print("breaks (package whose code raised, its version; tests; the first one and its error):")
    for origin, cases in sorted(broken.items(), key=lambda item: -len(item[1])):
        version = f" {now[origin]} (lock {lock.get(origin, '-')})" if origin in now else ""
        test, message = cases[0]
        print(f"- {origin}{version}: {len(cases)} test(s); first {test}")
        print(f"    {message[:200]}")
    return 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    freeze = commands.add_parser("freeze", help="write a constraints file from this interpreter's packages")
    freeze.add_argument("output", type=Path)
    freeze.add_argument("--title", required=True)
    freeze.add_argument("--by", required=True, help="the command that wrote it, for the header")
    freeze.add_argument("--junit", type=Path, help="the JUnit file of the suite run in this environment")
    freeze.add_argument("--resolved", type=Path, help="pins from this file (a resolver's output), not pip freeze")
    latest = commands.add_parser("latest", help="requirement names without specifiers")
    latest.add_argument("--extra", action="append", default=[])
    bounds = commands.add_parser("bounds", help="declared lower bounds equal the oldest lock's versions")
    bounds.add_argument("lock", type=Path)
    bounds.add_argument("--extra", action="append", default=[])
    drift = commands.add_parser("drift", help="report what moved against a lock and what broke")
    drift.add_argument("lock", type=Path)
    drift.add_argument("junit", type=Path)
    args = parser.parse_args()
    return {"freeze": cmd_freeze, "latest": cmd_latest, "bounds": cmd_bounds, "drift": cmd_drift}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
