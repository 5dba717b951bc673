"""Embedding-space diagnostics of CoDiEmb §4 (Eq. 14–16) on each text's token-embedding matrix.

For a text whose model output is the token matrix ``X ∈ R^{n×d}`` (one row per token the model
attends to) with singular values ``σ_1 ≥ … ≥ σ_k``, ``k = min(n, d)``:

* **token similarity** (Eq. 14, over-smoothing): mean cosine similarity over all ordered pairs of
  distinct tokens, ``1/(n(n−1)) Σ_{i≠j} cos(x_i, x_j)``;
* **rank** (anisotropy): the number of singular values above the tolerance
  ``σ_1 · rtol`` with ``rtol = max(n, d) · ε`` by default (the convention of
  ``numpy.linalg.matrix_rank`` and ``torch.linalg.matrix_rank``), where ``ε`` is the machine epsilon
  of the dtype the model produced (float32 for ordinary models: the spectrum is computed in float64,
  but the matrix only carries float32 precision, so float64's ε would count noise as rank);
* **condition number** (Eq. 15): ``σ_1 / σ_k``, the 2-norm condition number of ``numpy.linalg.cond``
  (``inf`` for an exactly singular matrix);
* **SVD entropy** (Eq. 16): ``H = −Σ p_i log p_i`` with ``p_i = σ_i² / Σ_j σ_j²`` (natural log,
  ``0 log 0 = 0``).

Lower token similarity and condition number, higher rank and entropy mean a less over-smoothed,
more isotropic space. CoDiEmb reports the mean of each metric over the texts of an evaluation set;
:func:`embedding_space_diagnostics` does the same. Which tokens form ``X`` is the model's choice:
every position under the attention mask, special tokens ([CLS], [SEP]) included, as the paper's
"token embedding matrix" output by the model.

The matrices of a batch are zero-padded to a common length and decomposed together with
:func:`torch.linalg.svdvals`: zero rows leave the non-zero singular values unchanged and only add
zeros, so the first ``min(n, d)`` values of each padded matrix are exactly those of ``X``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import torch
from torch.nn.utils.rnn import pad_sequence
from tqdm.auto import tqdm

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

#: The four metrics, in the order of CoDiEmb's Table 4 (with the direction that is better).
DIAGNOSTIC_METRICS: dict[str, str] = {
    "token_similarity": "lower is better",
    "rank": "higher is better",
    "condition_number": "lower is better",
    "svd_entropy": "higher is better",
}


@dataclass(frozen=True)
class EmbeddingSpaceDiagnostics:
    """Means of the CoDiEmb §4 metrics over the texts of one evaluation set.

    ``token_similarity`` averages only texts with at least two tokens (Eq. 14 is undefined for one).
    """

    token_similarity: float
    rank: float
    condition_number: float
    svd_entropy: float
    num_texts: int

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)


def token_matrix_diagnostics(
    token_embeddings: torch.Tensor, attention_mask: torch.Tensor, rtol: float | None = None, eps: float | None = None
) -> dict[str, torch.Tensor]:
    """Per-text metrics of a zero-padded batch of token matrices.

    Args:
        token_embeddings: ``(batch, length, dim)`` token embeddings; padded positions may hold anything.
        attention_mask: ``(batch, length)``, 1 for the tokens of each text and 0 for padding.
        rtol: relative rank tolerance; default ``max(n, d) · eps`` per text.
        eps: machine epsilon behind the default ``rtol``; default that of ``token_embeddings.dtype``.

    Returns:
        ``token_similarity`` (NaN for one-token texts), ``rank``, ``condition_number`` and
        ``svd_entropy``, each a float64 tensor of shape ``(batch,)``.
    """
    if token_embeddings.dim() != 3 or attention_mask.shape != token_embeddings.shape[:2]:
        raise ValueError(
            f"expected token_embeddings (batch, length, dim) and attention_mask (batch, length), got "
            f"{tuple(token_embeddings.shape)} and {tuple(attention_mask.shape)}"
        )
    if eps is None:
        eps = torch.finfo(token_embeddings.dtype).eps
    mask = attention_mask.to(torch.float64).unsqueeze(-1)
    matrices = token_embeddings.to(torch.float64) * mask
    lengths = attention_mask.sum(dim=1).to(torch.float64)
    dim = token_embeddings.shape[-1]

    # Σ_{i≠j} cos(x_i, x_j) = ‖Σ_i x̂_i‖² − Σ_i ‖x̂_i‖²: linear in n instead of the n×n Gram matrix.
    unit = torch.nn.functional.normalize(matrices, dim=-1)
    pair_sum = unit.sum(dim=1).pow(2).sum(dim=-1) - unit.pow(2).sum(dim=(1, 2))
    pairs = lengths * (lengths - 1)
    token_similarity = torch.where(pairs > 0, pair_sum / pairs.clamp_min(1), torch.nan)

    singular_values = torch.linalg.svdvals(matrices)  # (batch, min(length, dim)), descending
    k = torch.minimum(lengths, torch.tensor(float(dim), dtype=torch.float64))
    positions = torch.arange(singular_values.shape[-1], dtype=torch.float64)
    in_spectrum = positions.unsqueeze(0) < k.unsqueeze(1)
    sigma = singular_values * in_spectrum
    sigma_max = sigma[:, 0]
    relative = rtol if rtol is not None else torch.maximum(lengths, torch.full_like(lengths, dim)) * eps
    rank = (sigma > (sigma_max * relative).unsqueeze(1)).sum(dim=1).to(torch.float64)
    sigma_min = singular_values.gather(1, (k.long() - 1).clamp_min(0).unsqueeze(1)).squeeze(1)
    condition_number = sigma_max / sigma_min  # σ_k = 0 gives inf, as numpy.linalg.cond does
    energy = sigma.pow(2)
    p = energy / energy.sum(dim=1, keepdim=True)
    svd_entropy = -torch.special.xlogy(p, p).sum(dim=1)
    return {
        "token_similarity": token_similarity,
        "rank": rank,
        "condition_number": condition_number,
        "svd_entropy": svd_entropy,
    }


def embedding_space_diagnostics(
    model: SentenceTransformer,
    texts: Sequence[str],
    batch_size: int = 32,
    rtol: float | None = None,
    show_progress_bar: bool = False,
) -> EmbeddingSpaceDiagnostics:
    """Encode ``texts`` to token matrices and average the per-text metrics (CoDiEmb Table 4).

    Texts are decomposed in batches of similar length to keep padding, and so SVD work, small.

    Example::

        from sentence_transformers import SentenceTransformer
        from hf_unified_embed.evaluation import embedding_space_diagnostics

        model = SentenceTransformer("sentence-transformers/all-MiniLM-L6-v2")
        print(embedding_space_diagnostics(model, ["A man is playing a guitar.", "A cat sleeps."]))
    """
    if not texts:
        raise ValueError("embedding_space_diagnostics needs at least one text")
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    totals = dict.fromkeys(DIAGNOSTIC_METRICS, 0.0)
    counts = dict.fromkeys(DIAGNOSTIC_METRICS, 0)
    for start in tqdm(range(0, len(order), batch_size), desc="Diagnostics", disable=not show_progress_bar):
        batch = [texts[i] for i in order[start : start + batch_size]]
        matrices = model.encode(batch, batch_size=batch_size, output_value="token_embeddings", show_progress_bar=False)
        padded = pad_sequence([m.cpu() for m in matrices], batch_first=True)
        mask = pad_sequence([torch.ones(len(m), dtype=torch.long) for m in matrices], batch_first=True)
        for name, values in token_matrix_diagnostics(padded, mask, rtol=rtol).items():
            defined = values[~torch.isnan(values)]
            totals[name] += float(defined.sum())
            counts[name] += int(defined.numel())
    means = {name: totals[name] / counts[name] if counts[name] else math.nan for name in DIAGNOSTIC_METRICS}
    return EmbeddingSpaceDiagnostics(**means, num_texts=len(texts))
