"""CoDiEmb's retrieval loss: InfoNCE with several positives and hard negatives per query (Eq. 2)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from sentence_transformers.util import get_rank
from torch import Tensor, nn

from hf_unified_embed.losses.columns import ColumnLayout
from hf_unified_embed.losses.common.citations import CODIEMB
from hf_unified_embed.losses.common.distributed import all_gather_with_grad
from hf_unified_embed.losses.common.input_checks import as_float, require_columns
from hf_unified_embed.losses.common.text_identity import gather_ids, same_text, text_ids_of
from hf_unified_embed.losses.embedding_loss import AtLeastOne, EmbeddingLoss, MemoryBudget, MiniBatchOption, Positive
from hf_unified_embed.losses.learns_from import CONTRASTIVE_TASK_TYPES, LearnsFrom


class MultiPositiveInfoNCELoss(EmbeddingLoss):
    #: What it learns from (:mod:`hf_unified_embed.losses.learns_from`). Every row is an anchor against the batch's documents.
    learns_from = LearnsFrom(recommended_for=CONTRASTIVE_TASK_TYPES)

    def __init__(
        self,
        model: nn.Module,
        positives_per_query: AtLeastOne = 1,
        temperature: Positive = 0.02,
        gather_across_devices: bool = False,
        in_batch_negatives: bool = True,
        mask_false_negatives: bool = True,
        mini_batch_size: MiniBatchOption = None,
        mini_batch_num_tokens: MiniBatchOption = None,
        mini_batch_memory_budget: MemoryBudget = None,
    ) -> None:
        r"""InfoNCE with K+ positives and K− hard negatives per query, the retrieval loss of CoDiEmb (Eq. 2).

        Each row holds a query ``q_i``, ``K+`` positive documents and ``K−`` hard negatives. Every positive
        ``d+_ic`` of query ``i`` is its own classification problem::

            loss = -mean_{i,c} log( e^{cos(q_i, d+_ic)/τ} / (e^{cos(q_i, d+_ic)/τ} + Z+_i + Z-_i) )
            Z+_i = Σ_{j≠i} Σ_k e^{cos(q_i, d+_jk)/τ}     (the positives of the *other* queries)
            Z-_i = Σ_j Σ_k e^{cos(q_i, d-_jk)/τ}          (the hard negatives of *every* query)

        A query's other positives are left out of its denominator: they are relevant documents, not
        negatives. With ``gather_across_devices=True`` the documents of all processes join every
        denominator (a differentiable all-gather, so gradients reach the process that embedded them);
        each process scores only its own queries, and the data-parallel gradient average then equals the
        gradient of the loss on the concatenated global batch.

        False negatives: a candidate whose text is identical to one of the query's own positives (the same
        answer listed for two questions, a duplicated passage) is left out of the query's denominator
        (``mask_false_negatives``); identity is read from the token ids in ``forward``. With
        ``in_batch_negatives=False`` the denominators hold only the row's own hard negatives (FlagEmbedding's
        ``no_in_batch_neg``), e.g. for a task whose rows share documents.

        Args:
            model: The SentenceTransformer model.
            positives_per_query: ``K+``, the number of positive columns after the query column. All
                remaining columns are hard negatives (``K−`` may be 0).
            temperature: ``τ``. CoDiEmb uses 0.02 for retrieval.
            gather_across_devices: Add the documents of every process to the denominators. Needs the same
                batch size and column count on every process in a step (a task-homogeneous sampler with
                ``drop_last``).
            in_batch_negatives: Score each query against the other rows' positives and every row's hard
                negatives. ``False`` keeps only its own hard negatives (then ``gather_across_devices`` has
                nothing to add and must stay off).
            mask_false_negatives: Leave candidates with the same text as one of the query's positives out
                of its denominator.
            mini_batch_size: Embed in mini-batches of this many rows with gradient caching (GradCache):
                the loss of a large batch on the memory of a small one, same value and gradients.
                ``None`` embeds the whole batch at once.
            mini_batch_num_tokens: Instead of ``mini_batch_size``, a token budget per mini-batch (rows sorted
                by length, the padded tokens of all columns counted). Either may be ``"auto"``: sized to the
                memory at the first step (see :class:`EmbeddingLoss`).
            mini_batch_memory_budget: Bytes one mini-batch's activations may take, for ``"auto"``.

        References:
            - CoDiEmb, Section 2.2, Equation 2: https://github.com/TencentCloudADP/youtu-embedding
            - ``docs/losses.md`` of this package for the decisions where the official code differs.

        Requirements:
            1. Rows of one query with ``K+`` positives and ``K−`` hard negatives (the training bridge's
               collator samples them with replacement when a row has fewer).
            2. Task-homogeneous batches: all documents of the batch come from the same corpus.

        Inputs:
            +--------------------------------------------------------------------------+--------+
            | Texts                                                                    | Labels |
            +==========================================================================+========+
            | (query, positive_1, ..., positive_K+, negative_1, ..., negative_K−)      | none   |
            +--------------------------------------------------------------------------+--------+

        Relations:
            - With ``positives_per_query=1`` this is sentence-transformers' ``MultipleNegativesRankingLoss``
              with ``scale = 1/τ``.

        Example:
            ::

                from datasets import Dataset
                from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer

                from hf_unified_embed.losses import MultiPositiveInfoNCELoss

                model = SentenceTransformer("sentence-transformers/all-MiniLM-L6-v2")
                train_dataset = Dataset.from_dict({
                    "query": ["what is the capital of france", "who wrote hamlet"],
                    "positive_1": ["Paris is the capital of France.", "Hamlet is a tragedy by Shakespeare."],
                    "positive_2": ["France's capital city is Paris.", "Shakespeare wrote Hamlet around 1600."],
                    "negative_1": ["Lyon is a city in France.", "Macbeth is a play by Shakespeare."],
                })
                loss = MultiPositiveInfoNCELoss(model, positives_per_query=2)
                trainer = SentenceTransformerTrainer(model=model, train_dataset=train_dataset, loss=loss)
                trainer.train()
        """
        super().__init__(model, mini_batch_size, mini_batch_num_tokens, mini_batch_memory_budget)
        if positives_per_query < 1:
            raise ValueError(f"positives_per_query must be at least 1, got {positives_per_query}.")
        if not temperature > 0:
            raise ValueError(f"temperature must be positive, got {temperature}.")
        if gather_across_devices and not in_batch_negatives:
            raise ValueError(
                "gather_across_devices needs in_batch_negatives: without them there is nothing to gather."
            )
        self.positives_per_query = positives_per_query
        self.temperature = temperature
        self.gather_across_devices = gather_across_devices
        self.in_batch_negatives = in_batch_negatives
        self.mask_false_negatives = mask_false_negatives

    def loss_inputs(self, sentence_features: list[dict[str, Any]]) -> dict[str, Any]:
        if not self.mask_false_negatives:
            return {}
        return {"text_ids": text_ids_of(sentence_features, gather=self.gather_across_devices)}

    def compute_loss_from_embeddings(
        self, embeddings: list[Tensor], labels: Tensor | None = None, text_ids: list[Tensor] | None = None
    ) -> Tensor:
        """The loss on the columns' embeddings; ``text_ids`` (one id per row and column, equal ids = identical
        texts, as :meth:`forward` derives them) enables the false-negative mask."""
        positives_per_query = self.positives_per_query
        require_columns(
            type(self).__name__,
            embeddings,
            1 + positives_per_query,
            f"query, {positives_per_query} positive(s), then any hard negatives",
        )
        queries = F.normalize(as_float(embeddings[0]), dim=-1)
        positives = torch.stack(embeddings[1 : 1 + positives_per_query], dim=1)  # (batch, K+, dim)
        negatives = embeddings[1 + positives_per_query :]
        positive_ids = negative_ids = None
        if text_ids is not None and self.mask_false_negatives:
            positive_ids = torch.stack(text_ids[1 : 1 + positives_per_query], dim=1)  # (batch, K+)
            negative_ids = text_ids[1 + positives_per_query :]
        if not self.in_batch_negatives:
            own, rest = self._own_group_scores(queries, positives, negatives, positive_ids, negative_ids)
        else:
            own, rest = self._in_batch_scores(queries, positives, negatives, positive_ids, negative_ids)

        # Each positive c of query i: own score against [own score, rest]; the own score keeps the
        # logsumexp finite (and its gradient defined) when `rest` is all -inf (one row, no negatives).
        logits = torch.cat([own.unsqueeze(-1), rest.unsqueeze(1).expand(-1, positives_per_query, -1)], dim=-1)
        return (torch.logsumexp(logits, dim=-1) - own).mean()

    def _in_batch_scores(
        self,
        queries: Tensor,
        positives: Tensor,
        negatives: list[Tensor],
        positive_ids: Tensor | None,
        negative_ids: list[Tensor] | None,
    ) -> tuple[Tensor, Tensor]:
        """``(batch, K+)`` own scores and ``(batch, M)`` scores of every other candidate of the (global) batch."""
        positives_per_query = self.positives_per_query
        batch_size = queries.size(0)
        offset = 0
        candidate_positive_ids = positive_ids
        if self.gather_across_devices:
            positives = all_gather_with_grad(positives)
            negatives = [all_gather_with_grad(negative) for negative in negatives]
            offset = get_rank() * batch_size
            if positive_ids is not None and negative_ids is not None:
                candidate_positive_ids = gather_ids(positive_ids, gather=True)
                negative_ids = [gather_ids(ids, gather=True) for ids in negative_ids]

        positives = F.normalize(as_float(positives), dim=-1)
        # (batch, global batch, K+): the score of query i against positive k of row j.
        positive_scores = (queries @ positives.flatten(0, 1).T).view(batch_size, -1, positives_per_query)
        positive_scores = positive_scores / self.temperature
        rows = torch.arange(batch_size, device=queries.device)
        own = positive_scores[rows, rows + offset]  # (batch, K+)
        is_own_row = torch.zeros(positive_scores.shape[:2], dtype=torch.bool, device=queries.device)
        is_own_row[rows, rows + offset] = True
        excluded = is_own_row.unsqueeze(-1).expand_as(positive_scores).flatten(1)
        others = [positive_scores.flatten(1)]
        if positive_ids is not None and candidate_positive_ids is not None:
            excluded = excluded | same_text(positive_ids, candidate_positive_ids)
        exclusions = [excluded]
        if negatives:
            negative_docs = F.normalize(as_float(torch.cat(negatives)), dim=-1)
            others.append(queries @ negative_docs.T / self.temperature)
            if positive_ids is not None and negative_ids is not None:
                exclusions.append(same_text(positive_ids, torch.cat(negative_ids)))
            else:
                exclusions.append(torch.zeros_like(others[-1], dtype=torch.bool))
        # (batch, M): the shared part of every denominator of query i
        return own, torch.cat(others, dim=1).masked_fill(torch.cat(exclusions, dim=1), float("-inf"))

    def _own_group_scores(
        self,
        queries: Tensor,
        positives: Tensor,
        negatives: list[Tensor],
        positive_ids: Tensor | None,
        negative_ids: list[Tensor] | None,
    ) -> tuple[Tensor, Tensor]:
        """``(batch, K+)`` own scores and ``(batch, K−)`` scores of the row's own hard negatives only."""
        own = (queries.unsqueeze(1) * F.normalize(as_float(positives), dim=-1)).sum(dim=-1) / self.temperature
        if not negatives:
            return own, own.new_empty(own.size(0), 0)
        documents = F.normalize(as_float(torch.stack(negatives, dim=1)), dim=-1)  # (batch, K−, dim)
        rest = (queries.unsqueeze(1) * documents).sum(dim=-1) / self.temperature
        if positive_ids is not None and negative_ids is not None:
            duplicates = (torch.stack(negative_ids, dim=1).unsqueeze(-1) == positive_ids.unsqueeze(1)).any(dim=-1)
            rest = rest.masked_fill(duplicates, float("-inf"))
        return own, rest

    def column_layout(self, task_type: str, negatives_per_query: int) -> ColumnLayout:
        """The query, ``positives_per_query`` positives and ``negatives_per_query`` hard negatives per row."""
        return ColumnLayout(positives=self.positives_per_query, negatives=negatives_per_query)

    def get_config_dict(self) -> dict[str, Any]:
        return {
            "positives_per_query": self.positives_per_query,
            "temperature": self.temperature,
            "gather_across_devices": self.gather_across_devices,
            "in_batch_negatives": self.in_batch_negatives,
            "mask_false_negatives": self.mask_false_negatives,
            **super().get_config_dict(),
        }

    @property
    def citation(self) -> str:
        return CODIEMB
