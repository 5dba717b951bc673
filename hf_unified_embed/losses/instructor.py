"""INSTRUCTOR's bidirectional in-batch contrastive loss (§2.2)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hf_unified_embed.losses.columns import ColumnLayout
from hf_unified_embed.losses.common.citations import INSTRUCTOR
from hf_unified_embed.losses.common.input_checks import as_float, require_columns
from hf_unified_embed.losses.common.text_identity import copies_elsewhere, same_text, text_ids_of
from hf_unified_embed.losses.embedding_loss import EmbeddingLoss, MemoryBudget, MiniBatchOption, Positive
from hf_unified_embed.losses.parts import LossParts


class InstructorLoss(EmbeddingLoss):
    def __init__(
        self,
        model: nn.Module,
        temperature: Positive = 0.01,
        bidirectional: bool = True,
        in_batch_negatives: bool = True,
        mask_false_negatives: bool = True,
        mini_batch_size: MiniBatchOption = None,
        mini_batch_num_tokens: MiniBatchOption = None,
        mini_batch_memory_budget: MemoryBudget = None,
    ) -> None:
        r"""The training objective of INSTRUCTOR (§2.2): a softmax over good and bad candidates, in both directions.

        With ``s(x, y) = cos(E(I_x ⊕ x), E(I_y ⊕ y))`` and ``γ = temperature``:

        - ``query_to_document``: each query ``x_i`` scores its own positive ``y+_i`` against the hard
          negatives of **every** row of the batch::

              −mean_i log( e^{s(x_i, y+_i)/γ} / (e^{s(x_i, y+_i)/γ} + Σ_j Σ_k e^{s(x_i, y-_jk)/γ}) )

        - ``document_to_query`` (the "bidirectional in-batch sampled loss", with ``x`` and ``y`` swapped):
          each positive ``y+_i`` scores its own query against **all** queries of the batch::

              −mean_i log( e^{s(y+_i, x_i)/γ} / Σ_j e^{s(y+_i, x_j)/γ} )

        False negatives (``mask_false_negatives``, identity read from the token ids in ``forward``): a hard
        negative of another row identical to ``y+_i`` is left out of the first direction's denominator; in the
        second, a query ``x_j`` is left out when it is identical to ``x_i`` or when its positive ``y+_j`` is
        identical to ``y+_i`` (two questions answered by one passage: ``y+_i`` answers ``x_j`` too). ``in_batch_negatives=False`` scores each query
        against its own hard negatives only (FlagEmbedding's ``no_in_batch_neg``); the second direction has
        only in-batch candidates, so it needs ``bidirectional=False`` then.

        The two directions are summed (returned as two named parts). The other queries' positives are not
        candidates of the first direction, as in the INSTRUCTOR training code; so without hard-negative
        columns that direction is constant 0 and only the second one trains. Instructions are not part of
        the loss: give them to the trainer as ``prompts`` and keep them out of pooling with
        ``Pooling(include_prompt=False)`` (see the training bridge).

        Args:
            model: The SentenceTransformer model.
            temperature: ``γ``. INSTRUCTOR uses 0.01.
            bidirectional: Add the ``document_to_query`` direction (INSTRUCTOR does).
            in_batch_negatives: Score each query against the hard negatives of every row (``True``) or of
                its own row only.
            mask_false_negatives: Leave candidates identical to the row's own target text out of its
                denominators, and queries whose positive is the row's positive out of the second direction's.
            mini_batch_size: Embed in mini-batches of this many rows with gradient caching (GradCache): the
                loss of a large batch on the memory of a small one, same value and gradients. ``None``
                embeds the whole batch at once.
            mini_batch_num_tokens: Instead of ``mini_batch_size``, a token budget per mini-batch (rows sorted
                by length, the padded tokens of all columns counted). Either may be ``"auto"``: sized to the
                memory at the first step (see :class:`EmbeddingLoss`).
            mini_batch_memory_budget: Bytes one mini-batch's activations may take, for ``"auto"``.

        References:
            - One Embedder, Any Task: Instruction-Finetuned Text Embeddings, §2.2: https://arxiv.org/abs/2212.09741

        Requirements:
            1. Task-homogeneous batches (all rows from one task, so the in-batch candidates are comparable).
            2. At least one hard-negative column for the ``query_to_document`` direction to be informative.

        Inputs:
            +-------------------------------------------------------+--------+
            | Texts                                                 | Labels |
            +=======================================================+========+
            | (query, positive, negative_1, ..., negative_K−)       | none   |
            +-------------------------------------------------------+--------+
            | (query, positive)                                     | none   |
            +-------------------------------------------------------+--------+

        Relations:
            - sentence-transformers' ``MultipleNegativesSymmetricRankingLoss`` also uses the other rows'
              positives as candidates of the first direction.
            - :class:`CurriculumInfoNCELoss` is the Data-CUBE loss trained on the same kind of data.

        Example:
            ::

                from datasets import Dataset
                from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer

                from hf_unified_embed.losses import InstructorLoss

                model = SentenceTransformer("sentence-transformers/all-MiniLM-L6-v2")
                train_dataset = Dataset.from_dict({
                    "query": ["what is the capital of france", "who wrote hamlet"],
                    "positive": ["Paris is the capital of France.", "Hamlet is a tragedy by Shakespeare."],
                    "negative": ["Lyon is a city in France.", "Macbeth is a play by Shakespeare."],
                })
                loss = InstructorLoss(model)
                trainer = SentenceTransformerTrainer(
                    model=model,
                    train_dataset=train_dataset,
                    loss=loss,
                    prompts={"query": "Represent the question for retrieving supporting documents: ",
                             "positive": "Represent the document for retrieval: ",
                             "negative": "Represent the document for retrieval: "},
                )
                trainer.train()
        """
        super().__init__(model, mini_batch_size, mini_batch_num_tokens, mini_batch_memory_budget)
        if not temperature > 0:
            raise ValueError(f"temperature must be positive, got {temperature}.")
        if bidirectional and not in_batch_negatives:
            raise ValueError(
                "the document_to_query direction scores a document against the other rows' queries only; "
                "set bidirectional=False together with in_batch_negatives=False."
            )
        self.temperature = temperature
        self.bidirectional = bidirectional
        self.in_batch_negatives = in_batch_negatives
        self.mask_false_negatives = mask_false_negatives

    def loss_inputs(self, sentence_features: list[dict[str, Any]]) -> dict[str, Any]:
        return {"text_ids": text_ids_of(sentence_features)} if self.mask_false_negatives else {}

    def compute_loss_from_embeddings(
        self, embeddings: list[Tensor], labels: Tensor | None = None, text_ids: list[Tensor] | None = None
    ) -> dict[str, Tensor]:
        """The two directions; ``text_ids`` (one id per row and column, equal ids = identical texts, as
        :meth:`forward` derives them) enables the false-negative mask."""
        require_columns(type(self).__name__, embeddings, 2, "query, positive, then any hard negatives")
        ids = text_ids if self.mask_false_negatives else None
        queries = F.normalize(as_float(embeddings[0]), dim=-1)
        positives = F.normalize(as_float(embeddings[1]), dim=-1)
        own = (queries * positives).sum(dim=-1, keepdim=True) / self.temperature
        candidates = [own]
        if len(embeddings) > 2 and self.in_batch_negatives:
            negatives = F.normalize(as_float(torch.cat(embeddings[2:])), dim=-1)
            scores = queries @ negatives.T / self.temperature
            if ids is not None:
                scores = scores.masked_fill(same_text(ids[1], torch.cat(ids[2:])), float("-inf"))
            candidates.append(scores)
        elif len(embeddings) > 2:
            negatives = F.normalize(as_float(torch.stack(embeddings[2:], dim=1)), dim=-1)  # (batch, K−, dim)
            scores = (queries.unsqueeze(1) * negatives).sum(dim=-1) / self.temperature
            if ids is not None:
                scores = scores.masked_fill(torch.stack(ids[2:], dim=1) == ids[1].unsqueeze(1), float("-inf"))
            candidates.append(scores)
        parts = LossParts(
            {"query_to_document": (torch.logsumexp(torch.cat(candidates, dim=1), dim=1) - own.squeeze(1)).mean()}
        )
        if self.bidirectional:
            logits = positives @ queries.T / self.temperature
            if ids is not None:
                logits = logits.masked_fill(copies_elsewhere(ids[0]) | copies_elsewhere(ids[1]), float("-inf"))
            targets = torch.arange(len(logits), device=logits.device)
            parts["document_to_query"] = F.cross_entropy(logits, targets)
        return parts

    def column_layout(self, task_type: str, negatives_per_query: int) -> ColumnLayout:
        """The query, its positive and ``negatives_per_query`` hard negatives per row."""
        return ColumnLayout(positives=1, negatives=negatives_per_query)

    def get_config_dict(self) -> dict[str, Any]:
        return {
            "temperature": self.temperature,
            "bidirectional": self.bidirectional,
            "in_batch_negatives": self.in_batch_negatives,
            "mask_false_negatives": self.mask_false_negatives,
            **super().get_config_dict(),
        }

    @property
    def citation(self) -> str:
        return INSTRUCTOR
