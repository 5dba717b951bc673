"""``python -m hf_unified_embed.cli.launch``: torchrun for the package's commands that keeps an input error's exit code 2.

Plain torchrun turns a worker's exit code 2 into its own 1 and prints a ChildFailedError report of
some forty lines after the one ``error:`` line; the launcher runs torchrun's own ``run`` and exits 2
with nothing but that line, while a bug keeps torchrun's whole report and exit code 1. Ctrl-C and ``kill``
are ``interrupted`` and 130 / 143, not torchrun's ``SignalException`` traceback.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from _fault_runs import Fault, run_launched
from _processes import Expected, failure, launch_command, run

from hf_unified_embed.cli.launch import worker_command

REPO = Path(__file__).resolve().parent.parent
SAMPLE_RECIPE = REPO / "examples" / "recipes" / "sample.yaml"
#: Two processes start (interpreter, imports, gloo group), check the recipe and stop: ~12 s each on a quiet
#: 2-core machine; a run that reaches the trainer takes a few seconds more.
LAUNCH = Expected(startup_s=15, processes=2)

BUGGY_LOSS = """
from torch import nn


class BuggyLoss(nn.Module):
    def __init__(self, model) -> None:
        raise RuntimeError("a bug inside the loss")
"""


def _args(script: str, *rest: str, module: bool = False, no_python: bool = False) -> Any:
    return SimpleNamespace(training_script=script, training_script_args=list(rest), module=module, no_python=no_python)


def test_the_command_becomes_python_m_hf_unified_embed() -> None:
    args = _args("train", "r.yaml", "--max-steps", "3")
    assert worker_command(args) is None
    assert (args.module, args.training_script, args.training_script_args) == (
        True,
        "hf_unified_embed",
        ["train", "r.yaml", "--max-steps", "3"],
    )
    same = _args("hf_unified_embed.cli.main", "train", "r.yaml", module=True)
    assert worker_command(same) is None and same.training_script_args == ["train", "r.yaml"]
    for other in (_args("json.tool", module=True), _args("bash", "-c", "exit 2", no_python=True)):
        problem = worker_command(other)
        assert problem is not None and "this launcher runs hf_unified_embed's commands" in problem


@pytest.fixture(scope="module")
def unified_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from hf_unified_embed.data import build_unified, save_unified

    out = tmp_path_factory.mktemp("unified") / "data"
    save_unified(build_unified(SAMPLE_RECIPE, split="train"), out)
    return out


def _recipe(folder: Path, unified_dir: Path, model: str, **changes: Any) -> Path:
    raw: dict[str, Any] = {
        "base_model": model,
        "data": {"path": str(unified_dir), "tasks": ["stsb", "wikiqa"], "max_rows_per_task": 16},
        "losses": {"retrieval": "MultiPositiveInfoNCELoss", "sts": "CoDiEmbSTSLoss"},
        "negatives_per_query": 2,
        "training_args": {"max_steps": 2, "per_device_train_batch_size": 4},
        "output_dir": str(folder / "out"),
        **changes,
    }
    path = folder / "r.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _launch(*arguments: str, **env: str) -> Any:
    return run(launch_command(*arguments), expected=LAUNCH, env={**os.environ, "OMP_NUM_THREADS": "1", **env})


@pytest.mark.multiprocess
def test_an_input_error_exits_2_with_one_line(unified_dir: Path, tiny_model_path: str, tmp_path: Path) -> None:
    recipe = _recipe(tmp_path, unified_dir, tiny_model_path, training_args={"learning_rate": "fast"})
    completed = _launch("train", str(recipe))
    assert completed.returncode == 2, failure(completed)
    assert completed.stderr.strip() == (
        f"error: {recipe}: training_args.learning_rate: input should be a valid number, got 'fast'"
    ), failure(completed)
    assert completed.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.yaml"], "nothing written by any process"


@pytest.mark.multiprocess
def test_a_bug_keeps_torchruns_report_and_exit_1(unified_dir: Path, tiny_model_path: str, tmp_path: Path) -> None:
    (tmp_path / "userpkg").mkdir()
    (tmp_path / "userpkg" / "buggy.py").write_text(BUGGY_LOSS)
    losses = {"retrieval": "buggy:BuggyLoss", "sts": "CoDiEmbSTSLoss"}
    recipe = _recipe(tmp_path, unified_dir, tiny_model_path, losses=losses)
    completed = _launch("-m", "hf_unified_embed", "train", str(recipe), PYTHONPATH=str(tmp_path / "userpkg"))
    assert completed.returncode == 1, failure(completed)
    assert "RuntimeError: a bug inside the loss" in completed.stderr
    assert "ChildFailedError" in completed.stderr and "Root Cause" in completed.stderr, failure(completed)
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.*")), "no output, no staging left"


@pytest.mark.multiprocess
@pytest.mark.parametrize(("stop", "code"), [("SIGINT", 130), ("SIGTERM", 143)])
def test_ctrl_c_or_kill_is_interrupted_without_a_traceback(
    unified_dir: Path, tiny_model_path: str, tmp_path: Path, stop: str, code: int
) -> None:
    """torchrun's agent raises its ``SignalException`` (a traceback, exit 1); the launcher says ``interrupted``
    once (its workers leave the line to it) and exits as a shell reports the signal, its workers ended."""
    recipe = _recipe(tmp_path, unified_dir, tiny_model_path, training_args={"max_steps": 200})
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    outcome = run_launched([launch_command("train", str(recipe))], tmp_path, env, Fault(stop, 1.0))
    (err,) = outcome.errs
    assert outcome.codes == [code], err[-3000:]
    assert err.strip().splitlines() == ["interrupted"], err[-3000:]
    assert not outcome.leftovers
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.yaml"], "nothing written, no staging left"
