"""AnglE's joint objective: CoSENT on cosine + in-batch negatives + angle difference in complex space."""

from __future__ import annotations

from typing import Any

import torch
from sentence_transformers.util import cos_sim, pairwise_angle_sim, pairwise_cos_sim
from torch import Tensor, nn

from hf_unified_embed.losses.columns import ColumnLayout
from hf_unified_embed.losses.common.citations import ANGLE
from hf_unified_embed.losses.common.input_checks import as_float, masked_mean, require_labels, require_pairs
from hf_unified_embed.losses.common.text_identity import text_ids_of
from hf_unified_embed.losses.embedding_loss import EmbeddingLoss, MemoryBudget, MiniBatchOption, NonNegative, Positive
from hf_unified_embed.losses.learns_from import LearnsFrom
from hf_unified_embed.losses.parts import LossParts


def cosent(scores: Tensor, labels: Tensor) -> Tensor:
    """``log(1 + Σ_{y_i > y_j} e^{s_j − s_i})`` over every ordered pair of rows (AnglE Eq. 1 and Eq. 7)."""
    inverted = scores.unsqueeze(0) - scores.unsqueeze(1)  # inverted[i, j] = s_j - s_i
    ordered = labels.unsqueeze(1) > labels.unsqueeze(0)
    terms = inverted.masked_fill(~ordered, float("-inf")).flatten()
    return torch.logsumexp(torch.cat([terms.new_zeros(1), terms]), dim=0)


class AnglEJointLoss(EmbeddingLoss):
    #: What it learns from (:mod:`hf_unified_embed.losses.learns_from`). Its cosine term reads every graded score.
    learns_from = LearnsFrom(recommended_for=("sts", "pair_classification"))

    def __init__(
        self,
        model: nn.Module,
        cosine_weight: NonNegative = 1.0,
        ibn_weight: NonNegative = 1.0,
        angle_weight: NonNegative = 1.0,
        cosine_scale: Positive = 20.0,
        ibn_scale: Positive = 20.0,
        angle_scale: Positive = 1.0,
        positive_threshold: float = 0.8,
        mask_false_negatives: bool = True,
        mini_batch_size: MiniBatchOption = None,
        mini_batch_num_tokens: MiniBatchOption = None,
        mini_batch_memory_budget: MemoryBudget = None,
    ) -> None:
        r"""The full AnglE objective (Eq. 8): ``w1·L_cos + w2·L_ibn + w3·L_angle`` on scored sentence pairs.

        - ``cosine`` (Eq. 1, CoSENT): ``log(1 + Σ_{y_i > y_j} e^{(cos_j − cos_i)·cosine_scale})`` over all
          ordered pairs of rows of the batch, where ``cos_i = cos(f(x1_i), f(x2_i))``.
        - ``ibn`` (Eq. 2, in-batch negatives): for each row whose label reaches ``positive_threshold``,
          ``−log( Σ_{j ∈ P_i} e^{cos(x1_i, x2_j)·ibn_scale} / Σ_j e^{cos(x1_i, x2_j)·ibn_scale} )``, averaged
          over those rows. ``P_i`` holds the row's own second sentence and every second sentence of the
          batch whose text is identical to ``x1_i`` or ``x2_i``, or that is a labelled positive of an
          identical ``x1`` (identical-sentence detection: duplicates are positives, not negatives).
        - ``angle`` (Eq. 7): CoSENT on the normalised angle score of the pair in complex space (each
          embedding split into real and imaginary halves, Eq. 3-6), scaled by ``angle_scale = 1/τ``.

        Decisions where the official code (angle-emb) differs from the paper, all documented in
        ``docs/losses.md``: graded labels are **binarised with an explicit threshold** for the in-batch
        term (the official code casts them to ``int``, so 0.9 becomes a negative and 3.0 on a 0-5 scale a
        positive); identical texts are detected on the token ids and **kept as positives** (the official
        code drops such examples); the angle score follows the authors' code and sentence-transformers'
        ``pairwise_angle_sim`` (a similarity, higher = closer), which reverses the subtraction as printed
        in Eq. 7. Scales follow the paper: ``τ = 0.05`` (scale 20) for the cosine and in-batch terms,
        ``τ = 1`` for the angle term.

        Args:
            model: The SentenceTransformer model.
            cosine_weight: ``w1``; 0 disables the cosine term.
            ibn_weight: ``w2``; 0 disables the in-batch negative term.
            angle_weight: ``w3``; 0 disables the angle term.
            cosine_scale: ``1/τ`` of the cosine term.
            ibn_scale: ``1/τ`` of the in-batch negative term.
            angle_scale: ``1/τ`` of the angle term.
            positive_threshold: Labels at or above this value make a row a positive pair for the in-batch
                term (labels in [0, 1]; binary 0/1 labels work unchanged).
            mask_false_negatives: Identical-sentence detection in the in-batch term (read from the token ids
                in ``forward``): identical texts count as positives, not negatives. ``False`` scores every
                other row's second sentence as a negative.
            mini_batch_size: Embed in mini-batches of this many rows with gradient caching (GradCache): the
                batch-wide terms see the whole batch, with the same value and gradients. ``None`` embeds the
                whole batch at once.
            mini_batch_num_tokens: Instead of ``mini_batch_size``, a token budget per mini-batch (rows sorted
                by length, the padded tokens of all columns counted). Either may be ``"auto"``: sized to the
                memory at the first step (see :class:`EmbeddingLoss`).
            mini_batch_memory_budget: Bytes one mini-batch's activations may take, for ``"auto"``.

        References:
            - AnglE-optimized Text Embeddings, Section 3, Equations 1-8: https://arxiv.org/abs/2309.12871

        Requirements:
            1. Sentence pairs with float similarity labels; the in-batch term needs some pairs at or above
               ``positive_threshold`` in a batch, otherwise it contributes 0 for that batch.

        Inputs:
            +-----------------------------+-------------------------------+
            | Texts                       | Labels                        |
            +=============================+===============================+
            | (sentence1, sentence2)      | float similarity score        |
            +-----------------------------+-------------------------------+

        Relations:
            - sentence-transformers' ``AnglELoss`` is the angle term alone, ``CoSENTLoss`` the cosine term.

        Example:
            ::

                from datasets import Dataset
                from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer

                from hf_unified_embed.losses import AnglEJointLoss

                model = SentenceTransformer("sentence-transformers/all-MiniLM-L6-v2")
                train_dataset = Dataset.from_dict({
                    "sentence1": ["A man is playing a guitar.", "A woman is slicing onions.", "Kids play soccer."],
                    "sentence2": ["A man plays the guitar.", "A man is eating pasta.", "Children are playing football."],
                    "score": [0.96, 0.04, 0.84],
                })
                loss = AnglEJointLoss(model)
                trainer = SentenceTransformerTrainer(model=model, train_dataset=train_dataset, loss=loss)
                trainer.train()
        """
        super().__init__(model, mini_batch_size, mini_batch_num_tokens, mini_batch_memory_budget)
        weights = {"cosine_weight": cosine_weight, "ibn_weight": ibn_weight, "angle_weight": angle_weight}
        for name, weight in weights.items():
            if weight < 0:
                raise ValueError(f"{name} must be non-negative, got {weight}.")
        if not any(weights.values()):
            raise ValueError("AnglEJointLoss needs at least one positive weight.")
        for name, scale in {"cosine_scale": cosine_scale, "ibn_scale": ibn_scale, "angle_scale": angle_scale}.items():
            if not scale > 0:
                raise ValueError(f"{name} must be positive, got {scale}.")
        self.cosine_weight = cosine_weight
        self.ibn_weight = ibn_weight
        self.angle_weight = angle_weight
        self.cosine_scale = cosine_scale
        self.ibn_scale = ibn_scale
        self.angle_scale = angle_scale
        self.positive_threshold = positive_threshold
        self.mask_false_negatives = mask_false_negatives

    def loss_inputs(self, sentence_features: list[dict[str, Any]]) -> dict[str, Any]:
        if not (self.ibn_weight and self.mask_false_negatives):
            return {}
        return {"text_ids": text_ids_of(sentence_features)}

    def compute_loss_from_embeddings(
        self, embeddings: list[Tensor], labels: Tensor | None, text_ids: list[Tensor] | None = None
    ) -> dict[str, Tensor]:
        """The weighted parts. ``text_ids`` (one integer tensor per column, equal ids = identical texts, as
        :meth:`forward` derives from the token ids) enables identical-sentence detection in the in-batch term."""
        name = type(self).__name__
        require_pairs(name, embeddings)
        labels = require_labels(name, labels, embeddings[0].size(0), "a similarity score per pair")
        sentences1, sentences2 = (as_float(column) for column in embeddings)
        labels = labels.to(sentences1.dtype)
        parts = LossParts()
        if self.cosine_weight:
            cosine = pairwise_cos_sim(sentences1, sentences2) * self.cosine_scale
            parts["cosine"] = self.cosine_weight * cosent(cosine, labels)
        if self.ibn_weight:
            parts["ibn"] = self.ibn_weight * self._in_batch_negatives(sentences1, sentences2, labels, text_ids)
        if self.angle_weight:
            angle = pairwise_angle_sim(sentences1, sentences2) * self.angle_scale
            parts["angle"] = self.angle_weight * cosent(angle, labels)
        return parts

    def _in_batch_negatives(
        self, sentences1: Tensor, sentences2: Tensor, labels: Tensor, text_ids: list[Tensor] | None
    ) -> Tensor:
        anchors = labels >= self.positive_threshold
        logits = cos_sim(sentences1, sentences2) * self.ibn_scale
        positives = torch.eye(len(labels), dtype=torch.bool, device=logits.device)
        if text_ids is not None and self.mask_false_negatives:
            ids1, ids2 = (ids.to(logits.device) for ids in text_ids)
            positives |= ids2.unsqueeze(0) == ids2.unsqueeze(1)  # candidate identical to the row's own x2
            positives |= ids2.unsqueeze(0) == ids1.unsqueeze(1)  # candidate identical to the anchor x1
            positives |= (ids1.unsqueeze(0) == ids1.unsqueeze(1)) & anchors.unsqueeze(0)  # positive of the same x1
        log_positive = torch.logsumexp(logits.masked_fill(~positives, float("-inf")), dim=1)
        # The mean over the anchors (0 without any), each row's positive set holding at least its own pair.
        return masked_mean(torch.logsumexp(logits, dim=1) - log_positive, anchors)

    def column_layout(self, task_type: str, negatives_per_query: int) -> ColumnLayout:
        """Sentence pairs with the gold score as label, whatever the task type."""
        return ColumnLayout.scored_pair()

    def get_config_dict(self) -> dict[str, Any]:
        return {
            "cosine_weight": self.cosine_weight,
            "ibn_weight": self.ibn_weight,
            "angle_weight": self.angle_weight,
            "cosine_scale": self.cosine_scale,
            "ibn_scale": self.ibn_scale,
            "angle_scale": self.angle_scale,
            "positive_threshold": self.positive_threshold,
            "mask_false_negatives": self.mask_false_negatives,
            **super().get_config_dict(),
        }

    @property
    def citation(self) -> str:
        return ANGLE
