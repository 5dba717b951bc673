"""Shared plumbing of the loss classes: the sentence-transformers split between embedding and maths.

``forward`` embeds the input columns and hands them to ``compute_loss_from_embeddings``, so every
loss can be checked on raw embedding tensors against a transcription of its paper's equation. The same
split gives every loss a gradient-cached mode (``mini_batch_size`` or ``mini_batch_num_tokens``): embed in
mini-batches, compute the loss once on the whole batch (see ``losses/gradcache/``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Literal

import torch
from annotated_types import Ge, Gt
from sentence_transformers.base.losses.gradcache import has_static_embedding_input
from sentence_transformers.base.losses.merged_forward import embed_columns
from sentence_transformers.base.model import BaseModel
from torch import Tensor, nn

from hf_unified_embed.errors import LossOptionError, shown
from hf_unified_embed.losses.columns import ColumnLayout
from hf_unified_embed.losses.common.label_values import labels_checked
from hf_unified_embed.losses.gradcache.auto_mini_batch import AUTO, AutoMiniBatch, choose_auto
from hf_unified_embed.losses.gradcache.cached_loss import cached_loss
from hf_unified_embed.losses.gradcache.protocol import FINAL, Embedded
from hf_unified_embed.losses.parts import LossOutput, LossParts, total_loss, with_means

#: A mini-batch size or token budget: a positive integer, ``"auto"`` (sized to memory) or ``None`` (off). The
#: bound is part of the annotation so that a recipe's preflight rejects 0 before any data are loaded.
MiniBatchOption = Annotated[int, Ge(1)] | Literal["auto"] | None
#: Bytes of activations one mini-batch may take, for ``"auto"`` (``None``: from the free memory).
MemoryBudget = Annotated[int, Ge(1)] | None
#: A temperature or scale (a number > 0), a loss weight (>= 0), a count of columns (>= 1): the constructors
#: check these too, but in the annotation a recipe's preflight refuses ``temperature: 0`` before the model loads.
Positive = Annotated[float, Gt(0)]
NonNegative = Annotated[float, Ge(0)]
AtLeastOne = Annotated[int, Ge(1)]


class EmbeddingLoss(nn.Module, ABC):
    """Base of the package's losses.

    Keeps the model in ``self.model`` (the trainer swaps in the DDP-wrapped one there) and returns
    either a scalar tensor or a :class:`LossParts` dict of named scalar tensors; the trainer sums a dict
    and logs each part.

    With ``mini_batch_size`` or ``mini_batch_num_tokens`` set, the loss runs in GradCache mode (Gao et al.,
    2021), the design of sentence-transformers' ``CachedMultipleNegativesRankingLoss``: (1) embed the
    batch in mini-batches without a graph, keeping each mini-batch's random state; (2) compute the loss on
    the whole batch and back-propagate it to the embeddings only, caching their gradients; (3) in the
    backward pass, re-embed each mini-batch with its random state replayed (same dropout) and push the
    cached gradients into the model. Loss value and gradients equal the uncached loss on the same batch,
    while only one mini-batch of activations is alive at a time.

    Args:
        model: The SentenceTransformer model.
        mini_batch_size: Rows (with all their columns) per mini-batch; ``"auto"``: the most that fit
            ``mini_batch_memory_budget`` with every column at the model's ``max_seq_length``.
        mini_batch_num_tokens: Instead of rows, a token budget per mini-batch: rows sorted by length are cut
            so that a mini-batch's padded tokens, summed over its columns, stay within it (as
            sentence-transformers' option of the same name, which counts real tokens of one column);
            ``"auto"``: the budget that fits ``mini_batch_memory_budget``.
        mini_batch_memory_budget: Bytes the activations of one mini-batch may take, for ``"auto"``. Default:
            80 % of the free CUDA memory (of the available RAM on other devices) less 3x the trainable
            parameters (their gradients and AdamW's moments). The size is measured and chosen once, at the
            first step, logged, and kept for the run.
    """

    def __init__(
        self,
        model: nn.Module,
        mini_batch_size: MiniBatchOption = None,
        mini_batch_num_tokens: MiniBatchOption = None,
        mini_batch_memory_budget: MemoryBudget = None,
    ) -> None:
        super().__init__()
        for name, value in {
            "mini_batch_size": mini_batch_size,
            "mini_batch_num_tokens": mini_batch_num_tokens,
        }.items():
            if value is not None and value != AUTO and not _positive_int(value):
                raise LossOptionError(
                    f"{type(self).__name__}: {name} must be a positive integer, 'auto' or None, got {shown(value)}."
                )
        if mini_batch_size is not None and mini_batch_num_tokens is not None:
            raise LossOptionError(
                f"{type(self).__name__}: give mini_batch_size or mini_batch_num_tokens, not both: a token budget replaces the row count "
                "(sentence-transformers' cached losses ignore mini_batch_size when mini_batch_num_tokens is set)."
            )
        if mini_batch_memory_budget is not None:
            if not _positive_int(mini_batch_memory_budget):
                raise LossOptionError(
                    f"{type(self).__name__}: mini_batch_memory_budget must be a positive number of bytes, got {shown(mini_batch_memory_budget)}."
                )
            if AUTO not in (mini_batch_size, mini_batch_num_tokens):
                raise LossOptionError(
                    f"{type(self).__name__}: mini_batch_memory_budget sizes an 'auto' mini_batch_size or "
                    "mini_batch_num_tokens; set one of them to 'auto'."
                )
        cached = mini_batch_size is not None or mini_batch_num_tokens is not None
        if cached and isinstance(model, BaseModel) and has_static_embedding_input(model):
            raise LossOptionError(
                f"{type(self).__name__} with mini-batches cannot run on a StaticEmbedding model, whose inputs "
                "have no batch axis to split into mini-batches; leave mini_batch_size and "
                "mini_batch_num_tokens unset."
            )
        self.model = model
        self.mini_batch_size = mini_batch_size
        self.mini_batch_num_tokens = mini_batch_num_tokens
        self.mini_batch_memory_budget = mini_batch_memory_budget
        #: What ``"auto"`` chose at the first step (``None`` before it, or without ``"auto"``).
        self.auto_mini_batch: AutoMiniBatch | None = None

    @property
    def uses_gradient_cache(self) -> bool:
        """Read by sentence-transformers' wrappers: ``MatryoshkaLoss`` then truncates inside
        :meth:`calculate_loss` instead of patching the model's forward pass."""
        return self.mini_batch_size is not None or self.mini_batch_num_tokens is not None

    def mini_batch_sizes(self, sentence_features: list[dict[str, Any]], context: Any) -> tuple[int | None, int | None]:
        """``(mini_batch_size, mini_batch_num_tokens)`` as integers, an ``"auto"`` one chosen at the first call."""
        if AUTO not in (self.mini_batch_size, self.mini_batch_num_tokens):
            return self.mini_batch_size, self.mini_batch_num_tokens  # type: ignore[return-value]
        if self.auto_mini_batch is None:
            self.auto_mini_batch = choose_auto(self, sentence_features, context, self.mini_batch_memory_budget)
        return self.auto_mini_batch.mini_batch_size, self.auto_mini_batch.mini_batch_num_tokens

    def embed_columns(self, sentence_features: Iterable[dict[str, Tensor]]) -> list[Tensor]:
        """One ``sentence_embedding`` tensor per input column (merged forward passes where possible)."""
        return embed_columns(self.model, sentence_features)

    def embed(self, sentence_features: list[dict[str, Any]], context: Any, rows: slice | Tensor) -> Embedded:
        """The embeddings of ``sentence_features``, which hold rows ``rows`` of the batch (a slice, or an index
        tensor where the gradient-cached mode sorted the rows by length).

        Override to compute more than the final sentence embeddings. ``context`` is whatever the loss
        handed to :meth:`loss_from_features` for the whole batch (e.g. GUR's masked-LM targets, indexed
        here with ``rows``). In the gradient-cached mode this runs once per mini-batch, twice.
        """
        return Embedded({FINAL: self.embed_columns(sentence_features)})

    def loss_inputs(self, sentence_features: list[dict[str, Any]]) -> dict[str, Any]:
        """Keyword arguments of ``compute_loss_from_embeddings`` read from the tokenised batch, not
        embedded (e.g. the text identity of every row); computed once for the whole batch."""
        return {}

    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None) -> LossOutput:
        features = list(sentence_features)
        # Labels and the inputs read from the tokens first: on a GPU, reading a value on the host after the
        # forward pass would wait for the whole pass (losses/common/label_values.py).
        with labels_checked(type(self).__name__, labels):
            return self.loss_from_features(features, labels, self.loss_inputs(features))

    def loss_from_features(
        self,
        sentence_features: list[dict[str, Any]],
        labels: Tensor | None,
        inputs: Mapping[str, Any],
        context: Any = None,
    ) -> LossOutput:
        """The loss of a tokenised batch: embedded at once, or in mini-batches (gradient-cached mode)."""
        if self.uses_gradient_cache:
            return cached_loss(self, sentence_features, labels, inputs, context)
        embedded = self.embed(sentence_features, context, slice(None))
        views = dict(embedded.views)
        output = self._loss_maths(views.pop(FINAL), labels, **views, **inputs)
        return with_means(output, {name: total / max(count, 1) for name, (total, count) in embedded.means.items()})

    def calculate_loss(
        self,
        reps: list[list[Tensor]],
        labels: Tensor | None = None,
        *,
        with_backward: bool = False,
        views: tuple[str, ...] = (FINAL,),
        loss_inputs: Mapping[str, Any] | None = None,
        batch_order: Tensor | None = None,
    ) -> LossOutput:
        """The loss from mini-batch embeddings, with the signature of sentence-transformers' cached losses.

        Args:
            reps: One list of mini-batch tensors per view and input column, view-major (all columns of
                ``views[0]``, then of ``views[1]``, ...).
            labels: The batch labels.
            with_backward: Back-propagate the loss to ``reps`` (filling their ``.grad``) and return it
                detached.
            views: The names of the views in ``reps``.
            loss_inputs: Further keyword arguments of ``compute_loss_from_embeddings``.
            batch_order: The index that puts the concatenated mini-batch rows back into batch order
                (``None``: they are in batch order).
        """
        columns = [torch.cat(minibatches) for minibatches in reps]
        if batch_order is not None:
            columns = [column.index_select(0, batch_order) for column in columns]
        per_view = len(columns) // len(views)
        embedded = {name: columns[i * per_view : (i + 1) * per_view] for i, name in enumerate(views)}
        output = self._loss_maths(embedded.pop(FINAL), labels, **embedded, **(loss_inputs or {}))
        if not with_backward:
            return output
        total_loss(output).backward()
        return output.detach() if isinstance(output, Tensor) else LossParts(output).detach()

    def _loss_maths(self, embeddings: list[Tensor], labels: Tensor | None, **inputs: Any) -> LossOutput:
        """:meth:`compute_loss_from_embeddings`, outside autocast on float32 embeddings when autocast is on.

        The losses score in float32 (``as_float``), but under autocast (``bf16``/``fp16`` training) every
        matmul would cast the scores back to half precision: a cosine to about 3 digits, divided by a
        temperature of 0.02, moved the loss by 2-3 % and the gradient by 6-15 % (relative L2) on one
        batch (``tests/test_device_defaults.py``). Only these small ``(batch, dim)`` maths leave autocast;
        the model's forward pass stays under it.
        """
        device_type = embeddings[0].device.type if embeddings else "cpu"
        if not (torch.amp.is_autocast_available(device_type) and torch.is_autocast_enabled(device_type)):
            return self.compute_loss_from_embeddings(embeddings, labels, **inputs)
        with torch.autocast(device_type, enabled=False):
            return self.compute_loss_from_embeddings(
                _float32(embeddings), labels, **{name: _float32(value) for name, value in inputs.items()}
            )

    @abstractmethod
    def compute_loss_from_embeddings(self, embeddings: list[Tensor], labels: Tensor | None) -> LossOutput:
        """The loss on already computed embeddings, one ``(batch, dim)`` tensor per column."""

    @abstractmethod
    def column_layout(self, task_type: str, negatives_per_query: int) -> ColumnLayout:
        """The columns (and label) this loss reads on a task of ``task_type``.

        Args:
            task_type: The unified ``task_type`` of the task the loss trains on.
            negatives_per_query: K−, the hard negatives the recipe asks for per row (losses that read
                hard negatives take it; losses on pairs ignore it).
        """

    def get_config_dict(self) -> dict[str, Any]:
        """Hyper-parameters shown in the model card (subclasses add theirs to these); the token budget, memory
        budget and what ``"auto"`` chose only where they are set."""
        config: dict[str, Any] = {"mini_batch_size": self.mini_batch_size}
        if self.mini_batch_num_tokens is not None:
            config["mini_batch_num_tokens"] = self.mini_batch_num_tokens
        if self.mini_batch_memory_budget is not None:
            config["mini_batch_memory_budget"] = self.mini_batch_memory_budget
        if self.auto_mini_batch is not None:
            chosen = self.auto_mini_batch
            config["mini_batch_chosen"] = chosen.mini_batch_size or chosen.mini_batch_num_tokens
        return config

    @property
    def citation(self) -> str:
        """BibTeX of the paper the loss implements (read by the model card)."""
        return ""


def _float32(value: Any) -> Any:
    """Half-precision tensors (alone, or in lists) as float32; anything else unchanged."""
    if isinstance(value, Tensor):
        return (
            value.float() if value.is_floating_point() and value.dtype not in (torch.float32, torch.float64) else value
        )
    if isinstance(value, list):
        return [_float32(item) for item in value]
    return value


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1
