"""Cross-device gathering in a real 2-process torchrun (gloo, CPU): same loss and gradients as one process."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from tests import _processes as processes

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
    # Four uncached and cached cases of a few steps each, on a tiny BERT: 11-14 s measured.
    completed = processes.run(command, expected=processes.Expected(processes=2, steps=20), env=environment)
    assert completed.returncode == 0, processes.failure(completed)
    return json.loads(output.read_text())


@pytest.mark.multiprocess
@pytest.mark.parametrize(
    "name",
    [
        "cached_multi_positive",
        "cached_multi_positive_tokens",
        "cached_multi_positive_auto",
        "cached_codiemb_sts",
        "cached_codiemb_sts_tokens",
        "cached_keep_base",
        "cached_keep_base_auto",
    ],
)
def test_cached_gathered_loss_equals_single_process_loss(torchrun_results: dict[str, Any], name: str) -> None:
    # Gradient caching (mini-batches of 3 of each process's 4 rows; or a token budget, fixed or "auto", that
    # cuts the two processes' rows into different numbers of mini-batches) + gathering + false negatives
    # across processes, on a DDP-wrapped tiny BERT: float32, so equal to rounding.
    assert torchrun_results[f"{name}_loss_gathered"] == pytest.approx(
        torchrun_results[f"{name}_loss_single"], rel=1e-5
    )
    scale = torchrun_results[f"{name}_grad_max_abs"]
    assert scale > 0
    assert torchrun_results[f"{name}_grad_max_abs_diff"] < 1e-4 * scale
    assert torchrun_results[f"{name}_mini_batches_rank0"] > 1
    choices = torchrun_results[f"{name}_auto_choices"]
    if name.endswith("_auto"):  # probed on each rank's own shard, agreed on across the ranks
        assert choices[0] is not None and choices == [choices[0]] * 2
    else:
        assert choices == [None, None]


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


def test_multi_positive_gather_offset_on_a_fake_rank_1_matches_the_concatenated_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # One process plays rank 1 of 2: the "all-gather" puts rank 0's columns first. Rank 1's queries must
    # then find their own positives at rows batch..2·batch of the gathered batch, so its loss (the mean
    # over its queries) and their gradients equal those of the single-process loss on the concatenation.
    import torch
    from torch import nn

    import hf_unified_embed.losses.multi_positive_infonce as module
    from hf_unified_embed.losses import MultiPositiveInfoNCELoss

    batch, positives_per_query, dim = 3, 2, 8
    generator = torch.Generator().manual_seed(0)

    def columns() -> list[torch.Tensor]:  # query, 2 positives, 1 hard negative
        return [torch.randn(batch, dim, generator=generator, dtype=torch.float64).requires_grad_() for _ in range(4)]

    ranks = [columns(), columns()]

    def loss_on_rank(rank: int) -> torch.Tensor:
        local, other = ranks[rank], ranks[1 - rank]

        def fake_all_gather(tensor: torch.Tensor) -> torch.Tensor:
            # The loss gathers the stacked positives (3-D) and the negative column (2-D).
            remote = torch.stack(other[1:3], dim=1) if tensor.dim() == 3 else other[3]
            return torch.cat([tensor, remote] if rank == 0 else [remote, tensor])

        monkeypatch.setattr(module, "get_rank", lambda: rank)
        monkeypatch.setattr(module, "all_gather_with_grad", fake_all_gather)
        gathered = MultiPositiveInfoNCELoss(nn.Identity(), positives_per_query, gather_across_devices=True)
        return gathered.compute_loss_from_embeddings(local, None)

    single = MultiPositiveInfoNCELoss(nn.Identity(), positives_per_query)
    concatenated = single.compute_loss_from_embeddings([torch.cat([ranks[0][c], ranks[1][c]]) for c in range(4)], None)
    rank0, rank1 = loss_on_rank(0), loss_on_rank(1)
    # The global mean over 2·batch queries is the mean of the two ranks' means.
    torch.testing.assert_close(rank1, 2 * concatenated - rank0, rtol=1e-12, atol=1e-12)
    (expected,) = torch.autograd.grad(2 * concatenated, ranks[1][0], retain_graph=True)
    (actual,) = torch.autograd.grad(rank1, ranks[1][0])
    torch.testing.assert_close(actual, expected, rtol=1e-10, atol=1e-12)
