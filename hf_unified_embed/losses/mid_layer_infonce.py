"""CoDiEmb's auxiliary in-batch InfoNCE on an intermediate Transformer layer (Eq. 9)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from sentence_transformers.util import cos_sim
from torch import Tensor, nn

from hf_unified_embed.losses.columns import ColumnLayout
from hf_unified_embed.losses.common.citations import CODIEMB
from hf_unified_embed.losses.common.hidden_states import embed_columns_with_layer
from hf_unified_embed.losses.common.input_checks import as_float, masked_mean, require_labels, require_pairs
from hf_unified_embed.losses.common.text_identity import copies_elsewhere, text_ids_of
from hf_unified_embed.losses.embedding_loss import (
    FINAL,
    Embedded,
    EmbeddingLoss,
    MemoryBudget,
    MiniBatchOption,
    Positive,
)
from hf_unified_embed.losses.learns_from import LearnsFrom


def thresholded_infonce(
    sentences1: Tensor,
    sentences2: Tensor,
    labels: Tensor,
    temperature: float,
    positive_threshold: float,
    second_ids: Tensor | None = None,
) -> Tensor:
    """In-batch InfoNCE over pairs whose label reaches ``positive_threshold`` (CoDiEmb Eq. 9 / Eq. 13).

    Row ``i`` with ``labels[i] >= positive_threshold`` scores ``sentences1[i]`` against every
    ``sentences2[j]`` of the batch, ``j = i`` being the target; rows below the threshold are not anchors but
    their second sentences stay in every denominator. Mean over the anchors; 0 when there are none.
    With ``second_ids`` (equal ids = identical texts of ``sentences2``), a candidate identical to the row's
    own second sentence is left out of its denominator (a false negative).
    """
    anchors = labels >= positive_threshold
    logits = cos_sim(as_float(sentences1), as_float(sentences2)) / temperature
    if second_ids is not None:
        logits = logits.masked_fill(copies_elsewhere(second_ids), float("-inf"))
    # Every row's loss, then the mean over the anchors: selecting the anchors first would read them on the host.
    per_row = F.cross_entropy(logits, torch.arange(len(logits), device=logits.device), reduction="none")
    return masked_mean(per_row, anchors)


class MidLayerInfoNCELoss(EmbeddingLoss):
    def __init__(
        self,
        model: nn.Module,
        layer: int | None = None,
        temperature: Positive = 0.02,
        positive_threshold: float = 0.8,
        mask_false_negatives: bool = True,
        mini_batch_size: MiniBatchOption = None,
        mini_batch_num_tokens: MiniBatchOption = None,
        mini_batch_memory_budget: MemoryBudget = None,
    ) -> None:
        r"""In-batch InfoNCE on the sentence embeddings of an *intermediate* Transformer layer (CoDiEmb Eq. 9).

        For the pairs whose gold score reaches ``positive_threshold`` (the indicator ``1_label``)::

            loss = −mean_{i: y_i ≥ threshold} log( e^{cos(g(x1_i), g(x2_i))/τ} / Σ_j e^{cos(g(x1_i), g(x2_j))/τ} )

        where ``g`` is the model with its pooling (and any later modules) applied to the hidden states of
        layer ``layer`` instead of the last one. Pairs below the threshold are not positives, but their
        sentences still serve as in-batch negatives. The idea: shallow layers first learn pair-level
        distinctions, the list-wise STS losses then refine the deep layers, and the extra loss shortens the
        gradient path to the lower layers. A batch without any pair at or above the threshold gives 0.

        The model need not be loaded with ``output_hidden_states=True``: the flag is switched on for the
        forward pass of this loss only, and the final embeddings come from the same pass.

        Args:
            model: A SentenceTransformer whose first module is a ``Transformer``.
            layer: Index into the hidden states (0 = embedding layer, ``n_layers`` = last layer, negative
                values count from the end). ``None`` (default) takes ``len(hidden_states) // 2``, the
                official CoDiEmb choice (layer 3 of a 6-layer MiniLM).
            temperature: ``τ``. The official CoDiEmb code runs its STS InfoNCE at the training run's
                ``--temperature``, 0.02 in all four released scripts (0.05 is only for PRO and rank-KL).
            positive_threshold: Minimum gold score of a positive pair, on the labels' scale (the package's
                STS labels are in ``[0, 1]``; 0.8 is 4/5 on the STS Benchmark scale).
            mask_false_negatives: Leave a second sentence identical to the anchor's own second sentence out of
                its denominator (identity read from the token ids in ``forward``).
            mini_batch_size: Embed in mini-batches of this many rows with gradient caching (GradCache); the
                loss still sees the whole batch. ``None`` embeds the whole batch at once.
            mini_batch_num_tokens: Instead of ``mini_batch_size``, a token budget per mini-batch (rows sorted
                by length, the padded tokens of all columns counted). Either may be ``"auto"``: sized to the
                memory at the first step (see :class:`EmbeddingLoss`).
            mini_batch_memory_budget: Bytes one mini-batch's activations may take, for ``"auto"``.

        References:
            - CoDiEmb, Section 2.2, Equation 9: https://github.com/TencentCloudADP/youtu-embedding

        Requirements:
            1. Sentence pairs with float similarity labels, some at or above ``positive_threshold``.
            2. A model whose first module is a Hugging Face ``Transformer`` that can return hidden states.

        Inputs:
            +-----------------------------+-------------------------------+
            | Texts                       | Labels                        |
            +=============================+===============================+
            | (sentence1, sentence2)      | float similarity score        |
            +-----------------------------+-------------------------------+

        Relations:
            - :class:`CoDiEmbSTSLoss` adds this loss to the list-wise STS losses (default weight 1).
            - sentence-transformers' ``AdaptiveLayerLoss`` applies a loss at *every* layer instead.

        Example:
            ::

                from datasets import Dataset
                from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer

                from hf_unified_embed.losses import MidLayerInfoNCELoss

                model = SentenceTransformer("sentence-transformers/all-MiniLM-L6-v2")
                train_dataset = Dataset.from_dict({
                    "sentence1": ["A man is playing a guitar.", "A woman is slicing onions.", "Kids play soccer."],
                    "sentence2": ["A man plays the guitar.", "A man is eating pasta.", "Children are playing football."],
                    "score": [0.96, 0.04, 0.84],
                })
                loss = MidLayerInfoNCELoss(model)
                trainer = SentenceTransformerTrainer(model=model, train_dataset=train_dataset, loss=loss)
                trainer.train()
        """
        super().__init__(model, mini_batch_size, mini_batch_num_tokens, mini_batch_memory_budget)
        if not temperature > 0:
            raise ValueError(f"temperature must be positive, got {temperature}.")
        self.layer = layer
        self.temperature = temperature
        self.positive_threshold = positive_threshold
        self.mask_false_negatives = mask_false_negatives

    def embed(self, sentence_features: list[dict[str, Any]], context: Any, rows: slice | Tensor) -> Embedded:
        """The intermediate-layer sentence embeddings (this loss's ``embeddings``)."""
        _, intermediate = embed_columns_with_layer(self.model, sentence_features, self.layer)
        return Embedded({FINAL: intermediate})

    def loss_inputs(self, sentence_features: list[dict[str, Any]]) -> dict[str, Any]:
        return {"text_ids": text_ids_of(sentence_features)} if self.mask_false_negatives else {}

    def compute_loss_from_embeddings(
        self, embeddings: list[Tensor], labels: Tensor | None, text_ids: list[Tensor] | None = None
    ) -> Tensor:
        """The loss on the intermediate-layer sentence embeddings of the two columns; ``text_ids`` (one id
        per row and column, equal = identical texts) enables the false-negative mask."""
        name = type(self).__name__
        require_pairs(name, embeddings)
        labels = require_labels(name, labels, embeddings[0].size(0), "a similarity score per pair")
        second_ids = text_ids[1] if text_ids is not None and self.mask_false_negatives else None
        return thresholded_infonce(
            embeddings[0], embeddings[1], labels, self.temperature, self.positive_threshold, second_ids
        )

    @property
    def learns_from(self) -> LearnsFrom:
        """Only the pairs scored ``positive_threshold`` or more are anchors (:mod:`~hf_unified_embed.losses.learns_from`)."""
        return LearnsFrom(min_label=self.positive_threshold)

    def column_layout(self, task_type: str, negatives_per_query: int) -> ColumnLayout:
        """Sentence pairs with the gold score as label, whatever the task type."""
        return ColumnLayout.scored_pair()

    def get_config_dict(self) -> dict[str, Any]:
        return {
            "layer": self.layer,
            "temperature": self.temperature,
            "positive_threshold": self.positive_threshold,
            "mask_false_negatives": self.mask_false_negatives,
            **super().get_config_dict(),
        }

    @property
    def citation(self) -> str:
        return CODIEMB
