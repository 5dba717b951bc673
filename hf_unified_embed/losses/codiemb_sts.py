"""CoDiEmb's STS objective: weighted Pearson, rank-KL, PRO and in-batch InfoNCE terms."""

from __future__ import annotations

from typing import Any, Literal

from sentence_transformers.util import all_gather, pairwise_cos_sim
from torch import Tensor, nn

from hf_unified_embed.losses.columns import ColumnLayout
from hf_unified_embed.losses.common.citations import CODIEMB
from hf_unified_embed.losses.common.distributed import all_gather_with_grad
from hf_unified_embed.losses.common.hidden_states import embed_columns_with_layer
from hf_unified_embed.losses.common.input_checks import as_float, require_labels, require_pairs
from hf_unified_embed.losses.common.text_identity import gather_ids, text_ids_of
from hf_unified_embed.losses.embedding_loss import (
    FINAL,
    Embedded,
    EmbeddingLoss,
    MemoryBudget,
    MiniBatchOption,
    NonNegative,
    Positive,
)
from hf_unified_embed.losses.learns_from import LearnsFrom
from hf_unified_embed.losses.mid_layer_infonce import thresholded_infonce
from hf_unified_embed.losses.parts import LossParts
from hf_unified_embed.losses.pearson import PearsonLoss
from hf_unified_embed.losses.pro import PROLoss
from hf_unified_embed.losses.rank_kl import RankKLLoss


class CoDiEmbSTSLoss(EmbeddingLoss):
    #: What it learns from (:mod:`hf_unified_embed.losses.learns_from`). Its list-wise terms read every graded score.
    learns_from = LearnsFrom(recommended_for=("sts", "pair_classification"))

    def __init__(
        self,
        model: nn.Module,
        pearson_weight: NonNegative = 2.0,
        rank_kl_weight: NonNegative = 5.0,
        pro_weight: NonNegative = 0.5,
        mid_layer_weight: NonNegative = 1.0,
        infonce_weight: NonNegative = 0.0,
        temperature: Positive = 0.05,
        infonce_temperature: Positive = 0.02,
        positive_threshold: float = 0.8,
        layer: int | None = None,
        rank_kl_reduction: Literal["batchmean", "sum"] = "batchmean",
        gather_across_devices: bool = False,
        mask_false_negatives: bool = True,
        mini_batch_size: MiniBatchOption = None,
        mini_batch_num_tokens: MiniBatchOption = None,
        mini_batch_memory_budget: MemoryBudget = None,
    ) -> None:
        r"""The STS objective of CoDiEmb: a weighted sum of list-wise and contrastive terms on sentence pairs::

            loss = 2·Pearson + 5·RankKL + 0.5·PRO + 1·InfoNCE(middle layer) [+ w·InfoNCE(last layer)]

        - ``pearson``: :class:`PearsonLoss`, ``1 − r`` of predicted and gold scores (Eq. 4);
        - ``rank_kl``: :class:`RankKLLoss`, KL from the rank-based target to the predicted softmax (Eq. 6);
        - ``pro``: :class:`PROLoss`, gap-weighted preference ranking (Eq. 8);
        - ``mid_layer_infonce``: :class:`MidLayerInfoNCELoss`, in-batch InfoNCE on the sentence embeddings
          of the middle Transformer layer over pairs at or above ``positive_threshold`` (Eq. 9);
        - ``infonce``: the same thresholded in-batch InfoNCE on the final embeddings (the "InfoNCE"
          baseline of the paper's Eq. 13), off by default.

        The defaults are those of the official CoDiEmb code, whose "InfoNCE, weight 1" STS term is computed
        on ``hidden_states[n // 2]``: that is ``mid_layer_weight=1``, and the final-layer term stays off.
        The official code uses two temperatures: 0.05, hard-coded for rank-KL and PRO (``temperature``),
        and the training run's ``--temperature`` for the InfoNCE term, 0.02 in all four released scripts
        (``infonce_temperature``).
        Every weight can be changed and 0 disables a part (a disabled part is not computed; with
        ``mid_layer_weight=0`` no hidden states are requested). Each enabled part is returned under its
        name, already weighted, so the trainer logs them separately and sums them.

        Args:
            model: The SentenceTransformer model (its first module must be a ``Transformer`` while
                ``mid_layer_weight > 0``).
            pearson_weight: Weight of the Pearson term (official: 2).
            rank_kl_weight: Weight of the rank-KL term (official: 5).
            pro_weight: Weight of the PRO term (official: 0.5).
            mid_layer_weight: Weight of the intermediate-layer InfoNCE term (official: 1).
            infonce_weight: Weight of the final-layer in-batch InfoNCE term (official: not used, 0).
            temperature: ``τ`` of the rank-KL and PRO terms (official: 0.05).
            infonce_temperature: ``τ`` of the mid-layer and final-layer InfoNCE terms (official: the run's
                ``--temperature``, 0.02 in every released script).
            positive_threshold: Minimum gold score for a pair to be an InfoNCE positive (labels in [0, 1];
                the official code uses 1.0, i.e. only pairs scored as identical in meaning).
            layer: Hidden-state index of the intermediate layer; ``None`` = ``len(hidden_states) // 2``.
            rank_kl_reduction: See :class:`RankKLLoss`; ``"batchmean"`` is the official scale.
            gather_across_devices: Compute every term on the batch gathered from all processes (with
                gradients). CoDiEmb disables this for STS (large batches mean many tied labels), hence the
                default; when enabled, the loss equals the single-process loss on the concatenated batch.
                Needs the same batch size on every process.
            mask_false_negatives: In the InfoNCE terms, leave a second sentence identical to the anchor's own
                second sentence out of its denominator (identity read from the token ids in ``forward``).
            mini_batch_size: Embed in mini-batches of this many rows with gradient caching (GradCache): the
                list-wise terms still rank the whole batch, with the same value and gradients. ``None``
                embeds the whole batch at once.
            mini_batch_num_tokens: Instead of ``mini_batch_size``, a token budget per mini-batch (rows sorted
                by length, the padded tokens of all columns counted). Either may be ``"auto"``: sized to the
                memory at the first step (see :class:`EmbeddingLoss`).
            mini_batch_memory_budget: Bytes one mini-batch's activations may take, for ``"auto"``.

        References:
            - CoDiEmb, Section 2.2 (Equations 4, 6, 8, 9): https://github.com/TencentCloudADP/youtu-embedding

        Requirements:
            1. Sentence pairs with float similarity labels in [0, 1] (``positive_threshold`` is on that scale).
            2. Batches from one STS dataset at a time; CoDiEmb uses 32 pairs per batch for BERT-size models.

        Inputs:
            +-----------------------------+-------------------------------+
            | Texts                       | Labels                        |
            +=============================+===============================+
            | (sentence1, sentence2)      | float similarity score        |
            +-----------------------------+-------------------------------+

        Relations:
            - :class:`MultiPositiveInfoNCELoss` is CoDiEmb's loss for the retrieval batches of the same run.

        Example:
            ::

                from datasets import Dataset
                from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer

                from hf_unified_embed.losses import CoDiEmbSTSLoss

                model = SentenceTransformer("sentence-transformers/all-MiniLM-L6-v2")
                train_dataset = Dataset.from_dict({
                    "sentence1": ["A man is playing a guitar.", "A woman is slicing onions.", "Kids play soccer."],
                    "sentence2": ["A man plays the guitar.", "A man is eating pasta.", "Children are playing football."],
                    "score": [0.96, 0.04, 0.84],
                })
                loss = CoDiEmbSTSLoss(model)
                trainer = SentenceTransformerTrainer(model=model, train_dataset=train_dataset, loss=loss)
                trainer.train()
        """
        super().__init__(model, mini_batch_size, mini_batch_num_tokens, mini_batch_memory_budget)
        weights = {
            "pearson_weight": pearson_weight,
            "rank_kl_weight": rank_kl_weight,
            "pro_weight": pro_weight,
            "mid_layer_weight": mid_layer_weight,
            "infonce_weight": infonce_weight,
        }
        for name, weight in weights.items():
            if weight < 0:
                raise ValueError(f"{name} must be non-negative, got {weight}.")
        if not any(weights.values()):
            raise ValueError("CoDiEmbSTSLoss needs at least one positive weight.")
        for name, value in {"temperature": temperature, "infonce_temperature": infonce_temperature}.items():
            if not value > 0:
                raise ValueError(f"{name} must be positive, got {value}.")
        self.pearson_weight = pearson_weight
        self.rank_kl_weight = rank_kl_weight
        self.pro_weight = pro_weight
        self.mid_layer_weight = mid_layer_weight
        self.infonce_weight = infonce_weight
        self.temperature = temperature
        self.infonce_temperature = infonce_temperature
        self.positive_threshold = positive_threshold
        self.layer = layer
        self.rank_kl_reduction = rank_kl_reduction
        self.gather_across_devices = gather_across_devices
        self.mask_false_negatives = mask_false_negatives
        self.pearson = PearsonLoss(model)
        self.rank_kl = RankKLLoss(model, temperature=temperature, reduction=rank_kl_reduction)
        self.pro = PROLoss(model, temperature=temperature)

    def embed(self, sentence_features: list[dict[str, Any]], context: Any, rows: slice | Tensor) -> Embedded:
        """Final embeddings and, while ``mid_layer_weight > 0``, the intermediate layer's, from one forward pass."""
        if not self.mid_layer_weight:
            return super().embed(sentence_features, context, rows)
        final, intermediate = embed_columns_with_layer(self.model, sentence_features, self.layer)
        return Embedded({FINAL: final, "mid_layer_embeddings": intermediate})

    def loss_inputs(self, sentence_features: list[dict[str, Any]]) -> dict[str, Any]:
        if not (self.mask_false_negatives and (self.mid_layer_weight or self.infonce_weight)):
            return {}
        return {"text_ids": text_ids_of(sentence_features, gather=self.gather_across_devices)}

    def compute_loss_from_embeddings(
        self,
        embeddings: list[Tensor],
        labels: Tensor | None,
        mid_layer_embeddings: list[Tensor] | None = None,
        text_ids: list[Tensor] | None = None,
    ) -> dict[str, Tensor]:
        """The weighted parts, from the final embeddings of the two columns and, while ``mid_layer_weight > 0``,
        the intermediate-layer embeddings of the same columns. ``text_ids`` (one id per row and column, equal
        ids = identical texts) enables the false-negative mask of the InfoNCE terms."""
        name = type(self).__name__
        require_pairs(name, embeddings)
        labels = require_labels(name, labels, embeddings[0].size(0), "a similarity score per pair")
        if self.mid_layer_weight:
            if mid_layer_embeddings is None:
                raise ValueError(
                    "CoDiEmbSTSLoss with mid_layer_weight > 0 needs mid_layer_embeddings (forward computes them)."
                )
            require_pairs(name, mid_layer_embeddings)
        if self.gather_across_devices:
            # Every process computes the loss of the whole gathered batch; the all-gather's backward sums the
            # gradient of all copies, so after DDP's average each embedding gets the global-batch gradient.
            embeddings = [all_gather_with_grad(column) for column in embeddings]
            if mid_layer_embeddings is not None:
                mid_layer_embeddings = [all_gather_with_grad(column) for column in mid_layer_embeddings]
            labels = all_gather(labels)
        second_ids = None
        if text_ids is not None and self.mask_false_negatives:
            second_ids = gather_ids(text_ids[1], self.gather_across_devices)

        sentences1, sentences2 = (as_float(column) for column in embeddings)
        scores = pairwise_cos_sim(sentences1, sentences2)
        labels = labels.to(scores.dtype)
        parts = LossParts()
        if self.pearson_weight:
            parts["pearson"] = self.pearson_weight * self.pearson.loss_from_scores(scores, labels)
        if self.rank_kl_weight:
            parts["rank_kl"] = self.rank_kl_weight * self.rank_kl.loss_from_scores(scores, labels)
        if self.pro_weight:
            parts["pro"] = self.pro_weight * self.pro.loss_from_scores(scores, labels)
        if self.mid_layer_weight and mid_layer_embeddings is not None:
            parts["mid_layer_infonce"] = self.mid_layer_weight * thresholded_infonce(
                mid_layer_embeddings[0],
                mid_layer_embeddings[1],
                labels,
                self.infonce_temperature,
                self.positive_threshold,
                second_ids,
            )
        if self.infonce_weight:
            parts["infonce"] = self.infonce_weight * thresholded_infonce(
                sentences1, sentences2, labels, self.infonce_temperature, self.positive_threshold, second_ids
            )
        return parts

    def column_layout(self, task_type: str, negatives_per_query: int) -> ColumnLayout:
        """Sentence pairs with the gold score as label, whatever the task type."""
        return ColumnLayout.scored_pair()

    def get_config_dict(self) -> dict[str, Any]:
        return {
            "pearson_weight": self.pearson_weight,
            "rank_kl_weight": self.rank_kl_weight,
            "pro_weight": self.pro_weight,
            "mid_layer_weight": self.mid_layer_weight,
            "infonce_weight": self.infonce_weight,
            "temperature": self.temperature,
            "infonce_temperature": self.infonce_temperature,
            "positive_threshold": self.positive_threshold,
            "layer": self.layer,
            "rank_kl_reduction": self.rank_kl_reduction,
            "gather_across_devices": self.gather_across_devices,
            "mask_false_negatives": self.mask_false_negatives,
            **super().get_config_dict(),
        }

    @property
    def citation(self) -> str:
        return CODIEMB
