"""Cross-device gathering in a real 2-process torchrun (gloo, CPU): same loss and gradients as one process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("_loss_torchrun_script.py")
REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def torchrun_results(tmp_path_factory: pytest.TempPathFactory, tiny_model_path: str) -> dict[str, float]:
    output = tmp_path_factory.mktemp("torchrun") / "results.json"
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT)}
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        str(SCRIPT),
        str(output),
        tiny_model_path,
    ]
    completed = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-4000:]
    return json.loads(output.read_text())


@pytest.mark.multiprocess
@pytest.mark.parametrize("name", ["cached_multi_positive", "cached_codiemb_sts"])
def test_cached_gathered_loss_equals_single_process_loss(torchrun_results: dict[str, float], name: str) -> None:
    # Gradient caching (mini-batches of 3 of each process's 4 rows) + gathering + false negatives across
    # processes, on a DDP-wrapped tiny BERT: float32, so equal to rounding.
    assert torchrun_results[f"{name}_loss_gathered"] == pytest.approx(
        torchrun_results[f"{name}_loss_single"], rel=1e-5
    )
    scale = torchrun_results[f"{name}_grad_max_abs"]
    assert scale > 0
    assert torchrun_results[f"{name}_grad_max_abs_diff"] < 1e-4 * scale


@pytest.mark.multiprocess
@pytest.mark.parametrize("name", ["multi_positive", "codiemb_sts"])
def test_gathered_loss_equals_single_process_loss(torchrun_results: dict[str, float], name: str) -> None:
    gathered = torchrun_results[f"{name}_loss_gathered"]
    single = torchrun_results[f"{name}_loss_single"]
    assert gathered == pytest.approx(single, rel=1e-10)
    assert torchrun_results[f"{name}_grad_max_abs"] > 0
    assert torchrun_results[f"{name}_grad_max_abs_diff"] < 1e-10 * max(1.0, torchrun_results[f"{name}_grad_max_abs"])


@pytest.mark.multiprocess
def test_multi_positive_scores_only_local_queries(torchrun_results: dict[str, float]) -> None:
    # Rank 0's own loss covers its queries only, so it differs from the global mean.
    assert torchrun_results["multi_positive_local_loss_rank0"] != pytest.approx(
        torchrun_results["multi_positive_loss_single"], rel=1e-6
    )
