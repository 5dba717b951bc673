"""GradCache (Gao et al., 2021) for every loss of the package, on top of its ``embed`` / ``calculate_loss`` split.

The design of sentence-transformers' ``CachedMultipleNegativesRankingLoss`` (``CachedLossMixin``),
generalised to what this package's losses need:

1. the batch is cut into mini-batches (``minibatches.py``: rows sorted by length, cut by rows or by
   a token budget) and every mini-batch is embedded without a graph — all input columns of the mini-batch
   in one call of the loss's ``embed`` (merged forward passes, intermediate-layer views, per-token parts),
   with the random state snapshotted before each call (sentence-transformers' ``RandContext``);
2. the loss is computed on the whole batch, in batch order, from those embeddings (``calculate_loss``,
   which also gathers across devices), back-propagated to the embeddings only, and their gradients cached;
3. when the trainer back-propagates the returned loss, each mini-batch is embedded again with its
   random state (same dropout masks) and autocast state replayed, and the cached gradients are pushed
   into the model (``torch.autograd.backward`` on the embeddings). Under DDP every mini-batch but the last
   runs inside ``no_sync``, so the gradients are all-reduced once.

The last mini-batch of step 1 (the largest) is embedded with its graph and kept: step 3 back-propagates
it first, without recomputing it, then recomputes the others one at a time, so one forward pass of the
recomputation is saved at the same peak memory (one mini-batch of activations). A batch that fits in one
mini-batch therefore costs what the uncached loss costs.

On the CPU, every backward pass but the last sends the embedding layers' gradients as sparse tensors: a
dense one zero-fills a vocabulary × hidden tensor per pass (47 MB for MiniLM, page-faulted in afresh each
time), which took 10 % of a cached MiniLM step at 64 rows (``torch.profiler``). The last pass is dense, so
the parameters' gradients end dense, as the optimiser and DDP expect.

Differences from sentence-transformers' mixin: the mini-batches of a row hold all its columns and are cut
over length-sorted rows (see ``minibatches.py``); the kept last mini-batch; a multi-part loss returns its
named parts (all of them tied to one replay, which needs the trainer's equal weighting of the parts,
checked); parts that are a mean over items of the rows (GUR's masked-LM loss) are computed per mini-batch
in the replay itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from functools import partial
from typing import Any

import torch
from sentence_transformers.base.losses.gradcache import RandContext
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel

from hf_unified_embed.losses.gradcache.minibatches import MiniBatchPlan, plan_minibatches
from hf_unified_embed.losses.gradcache.protocol import CachedLoss, Embedded
from hf_unified_embed.losses.parts import LossOutput, LossParts, with_means


class _ReplayOnBackward(torch.autograd.Function):
    """Identity on the (detached) loss parts whose backward runs step 3 with the incoming gradient."""

    @staticmethod
    def forward(ctx: Any, anchor: Tensor, replay: Callable[[Tensor], None], *values: Tensor) -> tuple[Tensor, ...]:
        ctx.replay = replay
        return tuple(value.detach() for value in values)

    @staticmethod
    def backward(ctx: Any, *grads: Tensor) -> tuple[None, ...]:
        first = grads[0]
        if len(grads) > 1 and not bool(torch.stack(grads).eq(first).all()):  # one host sync for all parts
            raise RuntimeError(
                "A gradient-cached loss caches the gradient of the *sum* of its parts, but its parts were "
                "back-propagated with different weights. Sum the parts unweighted (as the trainer does), "
                "weight the loss as a whole, or leave mini_batch_size and mini_batch_num_tokens unset."
            )
        ctx.replay(first)
        return (None, None, *(None for _ in grads))


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


def _ddp(loss: CachedLoss) -> DistributedDataParallel | None:
    model = getattr(loss.model, "_orig_mod", loss.model)
    return model if isinstance(model, DistributedDataParallel) else None


@contextmanager
def _sparse_embedding_gradients(model: nn.Module) -> Iterator[None]:
    """While active, the trainable ``nn.Embedding`` layers of ``model`` give sparse gradients (read by the
    forward pass: it records which backward pass runs)."""
    layers = [
        module
        for module in model.modules()
        if isinstance(module, nn.Embedding) and not module.sparse and module.weight.requires_grad
    ]
    for layer in layers:
        layer.sparse = True
    try:
        yield
    finally:
        for layer in layers:
            layer.sparse = False


def _sparse_unless(last: bool, loss: CachedLoss, features: list[dict[str, Any]]) -> AbstractContextManager[None]:
    """Sparse embedding gradients for a backward pass that is not the ``last``, on the CPU (see the module notes)."""
    tensors = _tensors(features)
    if last or not tensors or tensors[0].device.type != "cpu":
        return nullcontext()
    return _sparse_embedding_gradients(loss.model)


def cached_loss(
    loss: CachedLoss,
    sentence_features: list[dict[str, Any]],
    labels: Tensor | None,
    inputs: Mapping[str, Any],
    context: Any,
) -> LossOutput:
    """Steps 1 and 2; returns the loss, whose backward runs step 3."""
    mini_batch_size, mini_batch_num_tokens = loss.mini_batch_sizes(sentence_features, context)
    plan = plan_minibatches(sentence_features, mini_batch_size, mini_batch_num_tokens)
    grad_enabled = torch.is_grad_enabled()
    ddp = _ddp(loss)
    last = len(plan) - 1

    view_names: tuple[str, ...] = ()
    reps: list[list[Tensor]] = []
    mean_sums: dict[str, list[Tensor]] = {}
    mean_counts: dict[str, int] = {}
    random_states: list[RandContext] = []
    kept: Embedded | None = None
    for index in range(len(plan)):
        features = plan.features(sentence_features, index)
        keep = grad_enabled and index == last
        context_manager: AbstractContextManager[Any]
        if keep:
            # Embedded with its graph and back-propagated first in step 3; under DDP it must not synchronise
            # then unless it is the only mini-batch (the last recomputed one synchronises).
            context_manager = ddp.no_sync() if ddp is not None and last > 0 else nullcontext()
        else:
            if grad_enabled:
                random_states.append(RandContext(*_tensors(features)))
            context_manager = torch.no_grad()
        with context_manager, _sparse_unless(not keep or last == 0, loss, features):
            embedded = loss.embed(features, context, plan.batch_rows(index))
        if keep:
            kept = embedded
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
    output = loss.calculate_loss(
        reps,
        labels,
        with_backward=grad_enabled,
        views=view_names,
        loss_inputs=inputs,
        batch_order=plan.batch_order(),
    )
    output = with_means(output, means)
    if not grad_enabled:
        return output

    caches = [[rep.grad for rep in column] for column in reps]
    replay = partial(
        _replay,
        loss=loss,
        sentence_features=sentence_features,
        context=context,
        plan=plan,
        random_states=random_states,
        kept=kept,
        caches=caches,
        mean_counts=mean_counts,
        autocast=_autocast_state(sentence_features),
    )
    names = list(output) if isinstance(output, dict) else []
    values = list(output.values()) if isinstance(output, dict) else [output]
    anchor = torch.zeros((), device=values[0].device, requires_grad=True)
    replayed = _ReplayOnBackward.apply(anchor, replay, *values)
    return LossParts(zip(names, replayed)) if names else replayed[0]


def _push(
    embedded: Embedded,
    caches: list[list[Tensor | None]],
    index: int,
    mean_counts: dict[str, int],
    grad_output: Tensor,
) -> None:
    """Back-propagate mini-batch ``index``'s cached embedding gradients (and its mean parts) into the model."""
    tensors: list[Tensor] = []
    gradients: list[Tensor] = []
    for tensor, column in zip(_flat_views(embedded.views), caches):
        cached = column[index]
        if tensor.requires_grad and cached is not None:
            # Scaled in at least float32 (fp16 loss scaling), then cast to the embedding's (autocast) dtype.
            dtype = torch.promote_types(torch.promote_types(tensor.dtype, cached.dtype), torch.float32)
            tensors.append(tensor)
            gradients.append((cached.to(dtype) * grad_output.to(dtype)).to(tensor.dtype))
    for name, (total, _) in embedded.means.items():
        if total.requires_grad:
            tensors.append(total)
            gradients.append((grad_output / max(mean_counts[name], 1)).to(total.dtype))
    if tensors:
        torch.autograd.backward(tensors, gradients)


def _replay(
    grad_output: Tensor,
    *,
    loss: CachedLoss,
    sentence_features: list[dict[str, Any]],
    context: Any,
    plan: MiniBatchPlan,
    random_states: list[RandContext],
    kept: Embedded | None,
    caches: list[list[Tensor | None]],
    mean_counts: dict[str, int],
    autocast: dict[str, Any],
) -> None:
    """Step 3: back-propagate the kept mini-batch, then re-embed every other one with its random state."""
    ddp = _ddp(loss)
    with torch.enable_grad():
        if kept is not None:
            _push(kept, caches, len(plan) - 1, mean_counts, grad_output)
        for index, random_state in enumerate(random_states):
            # The last recomputed mini-batch synchronises DDP's gradients (unless an outer no_sync defers it)
            # and leaves the embedding gradients dense.
            last = index == len(random_states) - 1
            features = plan.features(sentence_features, index)
            with nullcontext() if ddp is None or last else ddp.no_sync():
                with random_state, torch.autocast(**autocast), _sparse_unless(last, loss, features):
                    embedded = loss.embed(features, context, plan.batch_rows(index))
                _push(embedded, caches, index, mean_counts, grad_output)
