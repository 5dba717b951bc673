"""The ``train`` command and the training parts under ``accelerate launch`` with two CPU processes (gloo).

FSDP and DeepSpeed are GPU engines in accelerate; on CPU the command refuses their configs rather
than training silently with plain DDP (docs/training.md gives the GPU commands).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import _processes as processes

REPO = Path(__file__).resolve().parent.parent
CONFIGS = REPO / "examples" / "accelerate"
SCRIPT = Path(__file__).parent / "_dist" / "accelerate_run.py"
ACCELERATE = [sys.executable, "-m", "accelerate.commands.launch"]


@pytest.fixture(scope="module")
def unified_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from hf_unified_embed.data import build_unified, save_unified

    return save_unified(
        build_unified(REPO / "examples/recipes/sample.yaml", split="train"), tmp_path_factory.mktemp("u") / "data"
    )


def _recipe(unified_dir: Path, base: str, out: Path, **training_args: Any) -> dict[str, Any]:
    return {
        "base_model": base,
        "data": {"path": str(unified_dir), "tasks": ["stsb", "wikiqa"], "max_rows_per_task": 32},
        "losses": {
            "retrieval": {"name": "MultiPositiveInfoNCELoss", "gather_across_devices": True},
            "sts": {"name": "CoDiEmbSTSLoss", "gather_across_devices": True},
        },
        "negatives_per_query": 2,
        "training_args": {"max_steps": 2, "per_device_train_batch_size": 4, **training_args},
        "output_dir": str(out),
    }


def _launch(config: str, *arguments: str, steps: int) -> subprocess.CompletedProcess[str]:
    """``accelerate launch`` of two workers that take ``steps`` (micro-)steps each, in all."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    command = [*ACCELERATE, "--config_file", str(CONFIGS / config), *arguments]
    return processes.run(command, expected=processes.Expected(processes=3, steps=steps), env=env)


@pytest.mark.multiprocess
def test_gather_sampler_checkpoints_and_resume_under_accelerate(
    unified_dir: Path, tiny_model_path: str, tmp_path: Path
) -> None:
    recipe = _recipe(
        unified_dir, tiny_model_path, tmp_path / "model",
        max_steps=6, gradient_accumulation_steps=2, save_strategy="steps", save_steps=2,
        output_dir=str(tmp_path / "checkpoints"),
    )  # fmt: skip
    (tmp_path / "recipe.json").write_text(json.dumps(recipe))
    # 12 micro-steps, 8 more resumed, and the single-process comparison.
    completed = _launch("multi_cpu.yaml", str(SCRIPT), str(tmp_path / "recipe.json"), str(tmp_path), steps=24)
    assert completed.returncode == 0, processes.failure(completed)
    ranks = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1)]

    # 6 optimizer steps x 2 accumulation micro-batches on each process (accelerate's dataloader collates
    # one batch ahead, so a 13th may be recorded); every step is one task everywhere.
    full = [rank["full"][:12] for rank in ranks]
    assert len(full[0]) == len(full[1]) == 12
    for step in range(6):
        micro = [batch for rank in full for batch in rank[2 * step : 2 * step + 2]]
        assert len({task for task, _ in micro}) == 1, f"step {step} mixes tasks: {[t for t, _ in micro]}"
        queries = [query for _, batch in micro for query in batch]
        assert len(queries) == len(set(queries)), f"step {step} repeats rows"

    # The run resumed from checkpoint-2 sees exactly the batches of steps 3-6 of the uninterrupted run.
    for rank in ranks:
        assert rank["resumed"][:8] == rank["full"][4:12]
    checkpoint = tmp_path / "checkpoints" / "checkpoint-2"
    assert {"optimizer.pt", "scheduler.pt", "trainer_state.json"} <= {p.name for p in checkpoint.iterdir()}

    # Gathered across the two processes, the loss equals the loss of one process on both batches.
    assert ranks[0]["gathered_mean"] == pytest.approx(ranks[0]["single"], rel=1e-5)
    assert ranks[1]["gathered_mean"] == pytest.approx(ranks[0]["gathered_mean"], rel=1e-12)


@pytest.mark.multiprocess
def test_train_command_under_accelerate_launch(unified_dir: Path, tiny_model_path: str, tmp_path: Path) -> None:
    from sentence_transformers import SentenceTransformer

    out = tmp_path / "model"
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(_recipe(unified_dir, tiny_model_path, out)))
    completed = _launch("multi_cpu.yaml", "-m", "hf_unified_embed", "train", str(tmp_path / "recipe.yaml"), steps=2)
    assert completed.returncode == 0, processes.failure(completed)
    assert completed.stdout.count("trained model (mean training loss") == 1, "only rank 0 reports"
    assert SentenceTransformer(str(out)).encode(["a"]).shape == (1, 32)
    assert "| world_size | `2` |" in (out / "README.md").read_text()


@pytest.mark.multiprocess
@pytest.mark.parametrize(("config", "message"), [("fsdp.yaml", "FSDP, which accelerate runs on GPUs only")])
def test_gpu_engines_are_refused_on_cpu(
    config: str, message: str, unified_dir: Path, tiny_model_path: str, tmp_path: Path
) -> None:
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(_recipe(unified_dir, tiny_model_path, tmp_path / "out")))
    completed = _launch(
        config, "--num_processes", "2", "-m", "hf_unified_embed", "train", str(tmp_path / "recipe.yaml"), steps=0
    )
    assert completed.returncode != 0
    errors = [line for line in completed.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and message in errors[0], processes.failure(completed)
