"""Data-CUBE's contrastive loss with the difficulty mask on too-difficult instances (Eq. 3 and Eq. 9)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hf_unified_embed.losses.columns import ColumnLayout
from hf_unified_embed.losses.common.citations import DATA_CUBE
from hf_unified_embed.losses.common.input_checks import as_float, masked_mean, require_columns, require_labels
from hf_unified_embed.losses.common.text_identity import same_text, text_ids_of
from hf_unified_embed.losses.embedding_loss import EmbeddingLoss, MemoryBudget, MiniBatchOption, Positive
from hf_unified_embed.losses.learns_from import CONTRASTIVE_TASK_TYPES, LearnsFrom


class CurriculumInfoNCELoss(EmbeddingLoss):
    #: What it learns from (:mod:`hf_unified_embed.losses.learns_from`). Every row is an anchor against the batch's documents.
    learns_from = LearnsFrom(recommended_for=CONTRASTIVE_TASK_TYPES)

    def __init__(
        self,
        model: nn.Module,
        temperature: Positive = 0.01,
        difficulty_threshold: float | None = None,
        in_batch_negatives: bool = True,
        mask_false_negatives: bool = True,
        mini_batch_size: MiniBatchOption = None,
        mini_batch_num_tokens: MiniBatchOption = None,
        mini_batch_memory_budget: MemoryBudget = None,
    ) -> None:
        r"""In-batch InfoNCE of Data-CUBE (Eq. 3) with its binary mask on too-difficult instances (Eq. 9).

        Each row is an instance ``(q_j, s+_j, s-_j1..s-_jK)`` with a difficulty score precomputed by a
        teacher model (Eq. 8, larger = easier)::

            φ_j = sim(q_j, s+_j) − sim(q_j, s-_j)

        The loss of row ``j`` is InfoNCE against every sentence of the batch (all positives and all hard
        negatives; ``j``'s own positive is the target)::

            ℓ_j = −log( e^{sim(q_j, s+_j)/τ} / (Σ_k e^{sim(q_j, s+_k)/τ} + Σ_k Σ_m e^{sim(q_j, s-_km)/τ}) )
            loss = Σ_j α_j ℓ_j / Σ_j α_j,    α_j = 1 if φ_j ≥ δ else 0

        so an instance whose positive the teacher could not tell from its negative (``φ_j < δ``, likely
        noisy) is not learned, **but its sentences still serve as in-batch negatives** of the other rows.
        Without ``difficulty_threshold`` no row is masked and this is plain in-batch InfoNCE.

        False negatives (``mask_false_negatives``, identity read from the token ids in ``forward``): a
        sentence of the batch identical to ``s+_j`` (other than ``s+_j`` itself) is left out of row ``j``'s
        denominator. ``in_batch_negatives=False`` keeps only the row's own hard negatives
        (FlagEmbedding's ``no_in_batch_neg``).

        **Where φ comes from:** the per-row difficulty travels as the batch *labels*. The training bridge's
        collator puts the unified dataset's ``difficulty`` column (written by the curriculum planner) in
        the label slot for this loss; with a plain ``datasets.Dataset``, name the column ``label``.

        Decisions (see ``docs/losses.md``): Eq. 9 as printed sets ``α = 0`` for ``φ ≥ δ``, which would drop
        the *easy* instances; the text says the mask removes the too *difficult* ones, which is what is
        implemented. Eq. 3 as printed omits the ``−log`` and the positive term of the denominator; the
        standard InfoNCE form above is used, averaged over the unmasked rows of the batch.

        Args:
            model: The SentenceTransformer model.
            temperature: ``τ``. Data-CUBE (like INSTRUCTOR) uses 0.01.
            difficulty_threshold: ``δ``; rows with ``φ < δ`` are masked. ``None`` disables the mask (labels
                are then ignored).
            in_batch_negatives: Score each query against every sentence of the batch (``True``) or only
                against its own positive and hard negatives.
            mask_false_negatives: Leave sentences identical to the row's positive out of its denominator.
            mini_batch_size: Embed in mini-batches of this many rows with gradient caching (GradCache): the
                loss of a large batch on the memory of a small one, same value and gradients. ``None``
                embeds the whole batch at once.
            mini_batch_num_tokens: Instead of ``mini_batch_size``, a token budget per mini-batch (rows sorted
                by length, the padded tokens of all columns counted). Either may be ``"auto"``: sized to the
                memory at the first step (see :class:`EmbeddingLoss`).
            mini_batch_memory_budget: Bytes one mini-batch's activations may take, for ``"auto"``.

        References:
            - Data-CUBE: Data Curriculum for Instruction-based Sentence Representation Learning, Eq. 3, 8, 9
              (Findings of ACL 2024).

        Requirements:
            1. Task-homogeneous batches of (query, positive[, negatives]) rows.
            2. With ``difficulty_threshold``: a float difficulty ``φ`` per row as the label.

        Inputs:
            +-------------------------------------------------------+-----------------------------------+
            | Texts                                                 | Labels                            |
            +=======================================================+===================================+
            | (query, positive, negative_1, ..., negative_K−)       | float difficulty φ (or none       |
            |                                                       | without ``difficulty_threshold``) |
            +-------------------------------------------------------+-----------------------------------+

        Relations:
            - Without a threshold this is sentence-transformers' ``MultipleNegativesRankingLoss`` with
              ``scale = 1/τ``.

        Example:
            ::

                from datasets import Dataset
                from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer

                from hf_unified_embed.losses import CurriculumInfoNCELoss

                model = SentenceTransformer("sentence-transformers/all-MiniLM-L6-v2")
                train_dataset = Dataset.from_dict({
                    "query": ["what is the capital of france", "who wrote hamlet", "tallest mountain"],
                    "positive": ["Paris is the capital of France.", "Hamlet is by Shakespeare.", "Everest is 8,849 m."],
                    "negative": ["Lyon is in France.", "Macbeth is by Shakespeare.", "K2 is 8,611 m high."],
                    "label": [0.41, 0.22, -0.03],  # φ from a teacher model; the last row gets masked
                })
                loss = CurriculumInfoNCELoss(model, difficulty_threshold=0.0)
                trainer = SentenceTransformerTrainer(model=model, train_dataset=train_dataset, loss=loss)
                trainer.train()
        """
        super().__init__(model, mini_batch_size, mini_batch_num_tokens, mini_batch_memory_budget)
        if not temperature > 0:
            raise ValueError(f"temperature must be positive, got {temperature}.")
        self.temperature = temperature
        self.difficulty_threshold = difficulty_threshold
        self.in_batch_negatives = in_batch_negatives
        self.mask_false_negatives = mask_false_negatives

    def loss_inputs(self, sentence_features: list[dict[str, Any]]) -> dict[str, Any]:
        return {"text_ids": text_ids_of(sentence_features)} if self.mask_false_negatives else {}

    def compute_loss_from_embeddings(
        self, embeddings: list[Tensor], labels: Tensor | None, text_ids: list[Tensor] | None = None
    ) -> Tensor:
        """The loss on the columns' embeddings; ``text_ids`` (one id per row and column, equal ids = identical
        texts, as :meth:`forward` derives them) enables the false-negative mask."""
        name = type(self).__name__
        require_columns(name, embeddings, 2, "query, positive, then any hard negatives")
        ids = text_ids if self.mask_false_negatives else None
        queries = F.normalize(as_float(embeddings[0]), dim=-1)
        rows = torch.arange(len(queries), device=queries.device)
        if self.in_batch_negatives:
            # Every sentence of the batch; row i's target is its positive, column i.
            documents = F.normalize(as_float(torch.cat(embeddings[1:])), dim=-1)
            logits = queries @ documents.T / self.temperature
            targets = rows
            if ids is not None:
                duplicates = same_text(ids[1], torch.cat(ids[1:]))
                duplicates[rows, rows] = False
                logits = logits.masked_fill(duplicates, float("-inf"))
        else:
            # The row's own positive (target 0) and hard negatives.
            documents = F.normalize(as_float(torch.stack(embeddings[1:], dim=1)), dim=-1)
            logits = (queries.unsqueeze(1) * documents).sum(dim=-1) / self.temperature
            targets = torch.zeros_like(rows)
            if ids is not None:
                duplicates = torch.stack(ids[1:], dim=1) == ids[1].unsqueeze(1)
                duplicates[:, 0] = False
                logits = logits.masked_fill(duplicates, float("-inf"))
        if self.difficulty_threshold is None:
            return F.cross_entropy(logits, targets)
        difficulty = require_labels(name, labels, len(queries), "the difficulty φ of each row")
        # The mean over the rows kept (0 without any), each row's own target never masked.
        return masked_mean(F.cross_entropy(logits, targets, reduction="none"), difficulty >= self.difficulty_threshold)

    def column_layout(self, task_type: str, negatives_per_query: int) -> ColumnLayout:
        """The query, its positive, ``negatives_per_query`` hard negatives and the row's φ as label."""
        return ColumnLayout(positives=1, negatives=negatives_per_query, label="difficulty")

    def get_config_dict(self) -> dict[str, Any]:
        return {
            "temperature": self.temperature,
            "difficulty_threshold": self.difficulty_threshold,
            "in_batch_negatives": self.in_batch_negatives,
            "mask_false_negatives": self.mask_false_negatives,
            **super().get_config_dict(),
        }

    @property
    def citation(self) -> str:
        return DATA_CUBE
