"""CurriculumBatchSampler in a real 2-process run: torchrun, gloo on CPU, tiny model, gathering on."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests import _processes as processes

SCRIPT = Path(__file__).parent / "_dist" / "sampling_steps.py"


@pytest.fixture(scope="module")
def rank_batches(tiny_model_path: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[list]]:
    """One torchrun launch runs every scenario; returns ``{scenario: [rank0 batches, rank1 batches]}``."""
    out = tmp_path_factory.mktemp("sampling-dist")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    # Three one-epoch trainings of about 10 steps on a tiny BERT: 10 s measured.
    result = processes.run(
        [*command, str(SCRIPT), tiny_model_path, str(out)], expected=processes.Expected(processes=2, steps=30), env=env
    )
    assert result.returncode == 0, processes.failure(result)
    return {
        scenario: [json.loads((out / f"{scenario}.rank{rank}.json").read_text()) for rank in (0, 1)]
        for scenario in ("curriculum_g1", "curriculum_g2", "proportional")
    }


def _assert_task_pure_steps(ranks: list[list], accumulation: int) -> None:
    rank0, rank1 = ranks
    assert len(rank0) == len(rank1) > 0
    assert len(rank0) % accumulation == 0
    for start in range(0, len(rank0), accumulation):
        step = rank0[start : start + accumulation] + rank1[start : start + accumulation]
        tasks = {task for task, _ in step}
        assert len(tasks) == 1, f"optimizer step {start // accumulation} mixes tasks {tasks}"
        rows = [row for _, batch in step for row in batch]
        assert len(rows) == len(set(rows)), f"optimizer step {start // accumulation} repeats rows: {step}"
        for micro in range(accumulation):
            assert len(rank0[start + micro][1]) == len(rank1[start + micro][1]), "unequal per-device batch sizes"


@pytest.mark.multiprocess
def test_every_device_trains_on_the_same_task_at_every_step(rank_batches: dict[str, list[list]]) -> None:
    _assert_task_pure_steps(rank_batches["curriculum_g1"], accumulation=1)
    # pairs: 24 rows in steps of 2 devices × 2 rows; triplets (batch size 3): 18 rows in steps of 6
    assert sum(task == "pairs" for task, _ in rank_batches["curriculum_g1"][0]) == 6
    assert sum(task == "triplets" for task, _ in rank_batches["curriculum_g1"][0]) == 3
    assert all(len(rows) == 3 for task, rows in rank_batches["curriculum_g1"][0] if task == "triplets")


@pytest.mark.multiprocess
def test_with_gradient_accumulation_every_micro_batch_of_a_step_is_the_same_task(
    rank_batches: dict[str, list[list]],
) -> None:
    _assert_task_pure_steps(rank_batches["curriculum_g2"], accumulation=2)
    # triplets: one full step of 2 × 2 × 3 rows, then the 6 remaining rows padded to 2 × 2 × 2
    triplet_sizes = [len(rows) for task, rows in rank_batches["curriculum_g2"][0] if task == "triplets"]
    assert triplet_sizes == [3, 3, 2, 2]
    seen = {
        row for ranks in rank_batches["curriculum_g2"] for task, rows in ranks if task == "triplets" for row in rows
    }
    assert seen == set(range(18))


@pytest.mark.multiprocess
def test_stock_proportional_sampler_mixes_tasks_across_devices(rank_batches: dict[str, list[list]]) -> None:
    rank0, rank1 = rank_batches["proportional"]
    mixed = [step for step, (a, b) in enumerate(zip(rank0, rank1)) if a[0] != b[0]]
    assert mixed, "expected the proportional sampler to put different tasks on the two devices in some step"
