"""Run by ``torchrun --nproc_per_node=2`` from ``test_losses_distributed.py`` (gloo, CPU).

Each process embeds its shard of a global batch with a DDP-wrapped encoder and computes the loss with
``gather_across_devices=True``; rank 0 then computes the same loss single-process on the concatenated
global batch with an identical encoder, and writes both losses and both gradients (after DDP's average)
to ``<output>.json``.

With a model folder as second argument it also runs the gradient-cached cases: a DDP-wrapped
SentenceTransformer, ``mini_batch_size`` smaller than each process's shard, or a token budget that cuts
the two processes' shards into different numbers of mini-batches (fixed, or ``"auto"`` from a byte
budget), gathering and the false-negative mask on texts duplicated across the processes, against the
plain loss on the global batch in one process.
"""

from __future__ import annotations

import gc
import json
import sys
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel

from hf_unified_embed.losses import CoDiEmbSTSLoss, KeepBaseLoss, MultiPositiveInfoNCELoss
from hf_unified_embed.losses.gradcache.minibatches import plan_minibatches
from hf_unified_embed.losses.parts import total_loss

LOCAL_BATCH = 4
FEATURES = 6


class Encoder(nn.Module):
    """Two layers; the hidden layer plays the role of the intermediate Transformer layer."""

    def __init__(self) -> None:
        super().__init__()
        self.lower = nn.Linear(FEATURES, 10)
        self.upper = nn.Linear(10, 8)

    def forward(self, inputs: Tensor) -> tuple[Tensor, Tensor]:
        hidden = torch.tanh(self.lower(inputs))
        return self.upper(hidden), hidden


def make_encoder() -> Encoder:
    torch.manual_seed(0)
    return Encoder().double()


def embed(encoder: nn.Module, columns: list[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
    final, hidden = encoder(torch.cat(columns))
    return list(final.chunk(len(columns))), list(hidden.chunk(len(columns)))


def total(output: Tensor | dict[str, Tensor]) -> Tensor:
    return sum(output.values()) if isinstance(output, dict) else output  # type: ignore[return-value]


# Global batch of the cached cases: row 1's positive is also row 6's negative and row 5's positive (the
# latter two on the other process), row 2's query reappears as row 7's: false negatives across processes.
CACHED_QUERIES = [
    "capital of france",
    "who wrote hamlet",
    "tallest mountain",
    "fall of rome",
    "panda food",
    "mona lisa painter",
    "distance to the moon",
    "tallest mountain",
]
CACHED_POSITIVES = [
    "Paris.",
    "Shakespeare wrote Hamlet.",
    "Everest, 8,849 m.",
    "476 AD.",
    "Bamboo.",
    "Shakespeare wrote Hamlet.",
    "384,400 km.",
    "Everest is the tallest.",
]
CACHED_NEGATIVES = [
    "Lyon.",
    "Marlowe.",
    "K2.",
    "1453.",
    "Eucalyptus.",
    "Michelangelo.",
    "Shakespeare wrote Hamlet.",
    "Mars.",
]
CACHED_LABELS = [1.0, 0.9, 0.1, 0.85, 0.3, 0.95, 0.6, 0.2]


# Token budgets that cut rank 0's and rank 1's rows into 4 and 3 (four columns), 3 and 2 (two columns) mini-batches.
MULTI_POSITIVE_TOKENS, STS_TOKENS = 44, 28
# Bytes of activations per mini-batch for "auto": about 50 tokens of the tiny BERT (3.4 KiB saved per token).
AUTO_BUDGET = 250_000


def run_cached_case(
    name: str, model_path: str, columns: list[list[str]], labels: list[float] | None, factory, **cache
) -> dict[str, float]:
    from sentence_transformers import SentenceTransformer

    rank, world_size = dist.get_rank(), dist.get_world_size()
    rows = slice(rank * LOCAL_BATCH, (rank + 1) * LOCAL_BATCH)
    model = SentenceTransformer(model_path, device="cpu").eval()  # no dropout: the reference runs elsewhere
    # BERT's pooler is not used by sentence-transformers: DDP must be told some parameters get no gradient.
    wrapped = DistributedDataParallel(model, find_unused_parameters=True)
    loss = factory(wrapped, gather=True, **cache)
    features = [dict(model.preprocess(column[rows])) for column in columns]
    local_labels = torch.tensor(labels[rows]) if labels is not None else None
    local_value = total_loss(loss(features, local_labels))
    local_value.backward()  # the cached replay runs here, the last mini-batch synchronises DDP
    gathered_value = local_value.detach().clone()
    dist.all_reduce(gathered_value)
    gathered_value /= world_size
    gathered_grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    mini_batches = len(plan_minibatches(features, *loss.mini_batch_sizes(features, None)))
    # What "auto" chose on each rank (probed on different shards): the same everywhere.
    chosen = loss.auto_mini_batch
    choices: list[Any] = [None] * world_size
    dist.all_gather_object(choices, None if chosen is None else chosen.mini_batch_size or chosen.mini_batch_num_tokens)

    result: dict[str, float] = {}
    if rank == 0:
        single = SentenceTransformer(model_path, device="cpu").eval()
        loss = factory(single, gather=False)
        features = [dict(single.preprocess(column)) for column in columns]
        single_value = total_loss(loss(features, torch.tensor(labels) if labels is not None else None))
        single_value.backward()
        single_grads = torch.cat([p.grad.flatten() for p in single.parameters() if p.grad is not None])
        result = {
            f"{name}_loss_gathered": gathered_value.item(),
            f"{name}_loss_single": single_value.item(),
            f"{name}_grad_max_abs_diff": (gathered_grads - single_grads).abs().max().item(),
            f"{name}_grad_max_abs": single_grads.abs().max().item(),
            f"{name}_mini_batches_rank0": mini_batches,
            f"{name}_auto_choices": choices,
        }
    return result


def perturbed_base(model_path: str) -> nn.Module:
    """The same tiny BERT with seeded noise on every weight: a base that differs from the student (on every rank)."""
    from sentence_transformers import SentenceTransformer

    base = SentenceTransformer(model_path, device="cpu")
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in base.parameters():
            parameter.add_(0.05 * torch.randn(parameter.shape, generator=generator))
    return base


def run_cached_cases(model_path: str) -> dict[str, float]:
    retrieval = [CACHED_QUERIES, CACHED_POSITIVES, CACHED_POSITIVES[::-1], CACHED_NEGATIVES]

    def multi_positive(model, gather, **cache):
        return MultiPositiveInfoNCELoss(model, positives_per_query=2, gather_across_devices=gather, **cache)

    def codiemb_sts(model, gather, **cache):
        return CoDiEmbSTSLoss(model, infonce_weight=1.0, gather_across_devices=gather, **cache)

    results = run_cached_case("cached_multi_positive", model_path, retrieval, None, multi_positive, mini_batch_size=3)
    results |= run_cached_case(
        "cached_multi_positive_tokens",
        model_path,
        retrieval,
        None,
        multi_positive,
        mini_batch_num_tokens=MULTI_POSITIVE_TOKENS,
    )
    results |= run_cached_case(
        "cached_multi_positive_auto",
        model_path,
        retrieval,
        None,
        multi_positive,
        mini_batch_num_tokens="auto",
        mini_batch_memory_budget=AUTO_BUDGET,
    )

    def keep_base(model, gather, **cache):
        task = MultiPositiveInfoNCELoss(model, gather_across_devices=gather, **cache)
        return KeepBaseLoss(task, base=perturbed_base(model_path))

    pairs = [CACHED_QUERIES, CACHED_POSITIVES]
    results |= run_cached_case("cached_codiemb_sts", model_path, pairs, CACHED_LABELS, codiemb_sts, mini_batch_size=3)
    results |= run_cached_case(
        "cached_codiemb_sts_tokens", model_path, pairs, CACHED_LABELS, codiemb_sts, mini_batch_num_tokens=STS_TOKENS
    )
    # Self-distillation from a frozen base: the base's and the student's documents gathered alike.
    results |= run_cached_case(
        "cached_keep_base",
        model_path,
        [CACHED_QUERIES, CACHED_POSITIVES, CACHED_NEGATIVES],
        None,
        keep_base,
        mini_batch_size=3,
    )
    results |= run_cached_case(
        "cached_keep_base_auto",
        model_path,
        [CACHED_QUERIES, CACHED_POSITIVES, CACHED_NEGATIVES],
        None,
        keep_base,
        mini_batch_size="auto",
        mini_batch_memory_budget=AUTO_BUDGET,
    )
    return results


def run_case(name: str, columns: list[Tensor], labels: Tensor | None, loss_factory) -> dict[str, float]:
    rank, world_size = dist.get_rank(), dist.get_world_size()
    rows = slice(rank * LOCAL_BATCH, (rank + 1) * LOCAL_BATCH)

    encoder = DistributedDataParallel(make_encoder())
    final, hidden = embed(encoder, [column[rows] for column in columns])
    local_labels = labels[rows] if labels is not None else None
    loss = loss_factory(gather=True)
    if isinstance(loss, CoDiEmbSTSLoss):
        output = loss.compute_loss_from_embeddings(final, local_labels, mid_layer_embeddings=hidden)
    else:
        output = loss.compute_loss_from_embeddings(final, local_labels)
    local_value = total(output)
    local_value.backward()  # DDP averages the parameter gradients over the processes
    gathered_value = local_value.detach().clone()
    dist.all_reduce(gathered_value)
    gathered_value /= world_size
    gathered_grads = torch.cat([p.grad.flatten() for p in encoder.module.parameters()])

    result: dict[str, float] = {}
    if rank == 0:
        single = make_encoder()
        final, hidden = embed(single, columns)
        loss = loss_factory(gather=False)
        if isinstance(loss, CoDiEmbSTSLoss):
            output = loss.compute_loss_from_embeddings(final, labels, mid_layer_embeddings=hidden)
        else:
            output = loss.compute_loss_from_embeddings(final, labels)
        single_value = total(output)
        single_value.backward()
        single_grads = torch.cat([p.grad.flatten() for p in single.parameters()])
        result = {
            f"{name}_loss_gathered": gathered_value.item(),
            f"{name}_loss_single": single_value.item(),
            f"{name}_local_loss_rank0": local_value.item(),
            f"{name}_grad_max_abs_diff": (gathered_grads - single_grads).abs().max().item(),
            f"{name}_grad_max_abs": single_grads.abs().max().item(),
        }
    return result


def main(output: str, model_path: str | None) -> None:
    dist.init_process_group("gloo")
    generator = torch.Generator().manual_seed(1)
    global_batch = LOCAL_BATCH * dist.get_world_size()

    def inputs(count: int) -> list[Tensor]:
        return [torch.randn(global_batch, FEATURES, generator=generator, dtype=torch.float64) for _ in range(count)]

    results = run_case(
        "multi_positive",
        inputs(1 + 2 + 2),  # query, 2 positives, 2 hard negatives
        None,
        lambda gather: MultiPositiveInfoNCELoss(nn.Identity(), positives_per_query=2, gather_across_devices=gather),
    )
    sts_labels = torch.tensor([1.0, 0.8, 0.2, 0.8, 0.6, 0.0, 1.0, 0.4], dtype=torch.float64)
    results |= run_case(
        "codiemb_sts",
        inputs(2),
        sts_labels,
        lambda gather: CoDiEmbSTSLoss(
            nn.Identity(), infonce_weight=1.0, positive_threshold=0.7, gather_across_devices=gather
        ),
    )
    if model_path is not None:
        results |= run_cached_cases(model_path)
    if dist.get_rank() == 0:
        with open(output, "w") as handle:
            json.dump(results, handle)
    # DDP reducers must die while the process group is registered (see tests/_dist/sampling_steps.py).
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
