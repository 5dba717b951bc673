"""What a build loads and changes in its own process: the serial part every build pays before and after its
workers (docs/benchmarks.md, "Build")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SAMPLE_RECIPE = REPO / "examples" / "recipes" / "sample.yaml"


def test_a_build_leaves_its_builder_module_and_imports_only_what_it_reads(tmp_path: Path) -> None:
    """datasets swaps ``open`` and ``Path`` in a builder's module for streaming versions unless the module says
    it is done (``builder._patched_for_streaming``); the build's module reads only local scratch files, so it is
    left as written and scipy.io (which that patching imports) is not loaded, nor numba (the raw-text miner's)
    for a recipe without raw text. A fresh interpreter: other tests load both."""
    script = f"""
import pathlib, sys
from hf_unified_embed.cli.main import main
assert main(["build", {str(SAMPLE_RECIPE)!r}, "-o", {str(tmp_path / "out")!r}, "--num-proc", "1"]) == 0
from hf_unified_embed.data import builder
assert "open" not in vars(builder) and builder.Path is pathlib.Path, vars(builder).get("open")
assert "scipy.io" not in sys.modules and "numba" not in sys.modules, [m for m in sys.modules if m.startswith(("scipy.io", "numba"))][:3]
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
