"""GradCache (Gao et al., 2021) for every loss of the package, on top of its ``embed`` / ``calculate_loss`` split.

The design of sentence-transformers' ``CachedMultipleNegativesRankingLoss`` (``CachedLossMixin``),
generalised to what this package's losses need:

1. every mini-batch of rows is embedded without a graph — all input columns of the mini-batch in one
   call of the loss's ``embed`` (merged forward passes, intermediate-layer views, per-token parts), with
   the random state snapshotted before each call (sentence-transformers' ``RandContext``);
2. the loss is computed on the whole batch from those embeddings (``calculate_loss``, which also
   gathers across devices), back-propagated to the embeddings only, and their gradients cached;
3. when the trainer back-propagates the returned loss, each mini-batch is embedded again with its
   random state (same dropout masks) and autocast state replayed, and the cached gradients are pushed
   into the model through the surrogate ``Σ ⟨embedding, cached gradient⟩``. Under DDP every mini-batch
   but the last runs inside ``no_sync``, so the gradients are all-reduced once.

Differences from sentence-transformers' mixin: a multi-part loss returns its named parts (all of them
tied to one replay, which needs the trainer's equal weighting of the parts, checked); parts that are a
mean over items of the rows (GUR's masked-LM loss) are computed per mini-batch in the replay itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import nullcontext
from functools import partial
from typing import TYPE_CHECKING, Any

import torch
from sentence_transformers.base.losses.gradcache import RandContext, _create_minibatch, _get_batch_size
from torch import Tensor
from torch.nn.parallel import DistributedDataParallel

from hf_unified_embed.losses.parts import LossOutput, LossParts, with_means

if TYPE_CHECKING:
    from hf_unified_embed.losses.base import EmbeddingLoss


class _ReplayOnBackward(torch.autograd.Function):
    """Identity on the (detached) loss parts whose backward runs step 3 with the incoming gradient."""

    @staticmethod
    def forward(ctx: Any, anchor: Tensor, replay: Callable[[Tensor], None], *values: Tensor) -> tuple[Tensor, ...]:
        ctx.replay = replay
        return tuple(value.detach().clone() for value in values)

    @staticmethod
    def backward(ctx: Any, *grads: Tensor) -> tuple[None, ...]:
        first = grads[0]
        if any(not torch.equal(grad, first) for grad in grads[1:]):
            raise RuntimeError(
                "A gradient-cached loss caches the gradient of the *sum* of its parts, but its parts were "
                "back-propagated with different weights. Sum the parts unweighted (as the trainer does), "
                "weight the loss as a whole, or leave mini_batch_size unset."
            )
        ctx.replay(first)
        return (None, None, *(None for _ in grads))


def _minibatch(features: list[dict[str, Any]], begin: int, end: int) -> list[dict[str, Any]]:
    return [_create_minibatch(column, begin, end) for column in features]


def _tensors(features: list[dict[str, Any]]) -> list[Tensor]:
    return [value for column in features for value in column.values() if isinstance(value, Tensor)]


def _autocast_state(features: list[dict[str, Any]]) -> dict[str, Any]:
    """The autocast setting of the forward pass, to re-enter it in the backward pass (as checkpointing does)."""
    device_type = next((tensor.device.type for tensor in _tensors(features)), "cpu")
    return {
        "device_type": device_type,
        "enabled": torch.is_autocast_enabled(device_type),
        "dtype": torch.get_autocast_dtype(device_type),
    }


def _flat_views(views: Mapping[str, list[Tensor]]) -> list[Tensor]:
    return [tensor for columns in views.values() for tensor in columns]


def cached_loss(
    loss: EmbeddingLoss,
    sentence_features: list[dict[str, Any]],
    labels: Tensor | None,
    inputs: Mapping[str, Any],
    context: Any,
) -> LossOutput:
    """Steps 1 and 2; returns the loss, whose backward runs step 3."""
    assert loss.mini_batch_size is not None
    rows = _get_batch_size(sentence_features[0])
    ranges = [(begin, min(begin + loss.mini_batch_size, rows)) for begin in range(0, rows, loss.mini_batch_size)]
    grad_enabled = torch.is_grad_enabled()

    view_names: tuple[str, ...] = ()
    reps: list[list[Tensor]] = []
    mean_sums: dict[str, list[Tensor]] = {}
    mean_counts: dict[str, int] = {}
    random_states: list[RandContext] = []
    for begin, end in ranges:
        features = _minibatch(sentence_features, begin, end)
        if grad_enabled:
            random_states.append(RandContext(*_tensors(features)))
        with torch.no_grad():
            embedded = loss.embed(features, context, slice(begin, end))
        if not reps:
            view_names = tuple(embedded.views)
            reps = [[] for _ in _flat_views(embedded.views)]
        for column, tensor in zip(reps, _flat_views(embedded.views)):
            column.append(tensor.detach().requires_grad_(grad_enabled))
        for name, (total, count) in embedded.means.items():
            mean_sums.setdefault(name, []).append(total.detach())
            mean_counts[name] = mean_counts.get(name, 0) + count
    means = {name: torch.stack(sums).sum() / max(mean_counts[name], 1) for name, sums in mean_sums.items()}

    # `calculate_loss` is looked up on the loss: MatryoshkaLoss replaces it with its truncating decorator.
    output = loss.calculate_loss(reps, labels, with_backward=grad_enabled, views=view_names, loss_inputs=inputs)
    output = with_means(output, means)
    if not grad_enabled:
        return output

    caches = [[rep.grad for rep in column] for column in reps]
    replay = partial(
        _replay,
        loss=loss,
        sentence_features=sentence_features,
        context=context,
        ranges=ranges,
        random_states=random_states,
        caches=caches,
        mean_counts=mean_counts,
        autocast=_autocast_state(sentence_features),
    )
    names = list(output) if isinstance(output, dict) else []
    values = list(output.values()) if isinstance(output, dict) else [output]
    anchor = torch.zeros((), device=values[0].device, requires_grad=True)
    replayed = _ReplayOnBackward.apply(anchor, replay, *values)
    return LossParts(zip(names, replayed)) if names else replayed[0]


def _replay(
    grad_output: Tensor,
    *,
    loss: EmbeddingLoss,
    sentence_features: list[dict[str, Any]],
    context: Any,
    ranges: list[tuple[int, int]],
    random_states: list[RandContext],
    caches: list[list[Tensor | None]],
    mean_counts: dict[str, int],
    autocast: dict[str, Any],
) -> None:
    """Step 3: re-embed every mini-batch with its random state and back-propagate the cached gradients."""
    model = getattr(loss.model, "_orig_mod", loss.model)
    ddp = model if isinstance(model, DistributedDataParallel) else None
    with torch.enable_grad():
        for index, ((begin, end), random_state) in enumerate(zip(ranges, random_states)):
            # The last mini-batch synchronises DDP's gradients (unless an outer no_sync defers it further).
            last = index == len(ranges) - 1
            with nullcontext() if ddp is None or last else ddp.no_sync():
                with random_state, torch.autocast(**autocast):
                    embedded = loss.embed(_minibatch(sentence_features, begin, end), context, slice(begin, end))
                terms = []
                for tensor, column in zip(_flat_views(embedded.views), caches):
                    cached = column[index]
                    if tensor.requires_grad and cached is not None:
                        dtype = torch.promote_types(torch.promote_types(tensor.dtype, cached.dtype), torch.float32)
                        terms.append(torch.dot(tensor.flatten().to(dtype), cached.flatten().to(dtype)))
                for name, (total, _) in embedded.means.items():
                    if total.requires_grad:
                        terms.append(total / max(mean_counts[name], 1))
                if terms:
                    surrogate = torch.stack([term.to(terms[0].dtype) for term in terms]).sum()
                    (surrogate * grad_output.to(surrogate.dtype)).backward()
