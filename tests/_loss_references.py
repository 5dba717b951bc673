"""Slow reference transcriptions of the loss equations: plain loops over rows, written from the papers.

Each function takes float64 embeddings (requires_grad allowed) and returns a scalar tensor, so that the
tests can compare both the value and the gradient of the vectorised loss classes against them. Nothing
here is vectorised on purpose: every sum of an equation is a Python loop.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def cos(a: Tensor, b: Tensor) -> Tensor:
    return torch.dot(a, b) / (torch.linalg.norm(a) * torch.linalg.norm(b))


def log_softmax_first(logits: list[Tensor]) -> Tensor:
    """log( e^{l_0} / Σ_k e^{l_k} ), written as a loop with the max subtracted for stability."""
    top = max(float(value.detach()) for value in logits)
    total = sum(torch.exp(value - top) for value in logits)
    return logits[0] - top - torch.log(total)


def multi_positive_infonce(
    columns: list[Tensor],
    positives_per_query: int,
    temperature: float,
    texts: list[list[str]] | None = None,
    in_batch_negatives: bool = True,
) -> Tensor:
    """CoDiEmb Eq. 2: −E[Σ_i Σ_c log e^{cos(q_i,d+_ic)/τ} / (e^{cos(q_i,d+_ic)/τ} + Z+_i + Z-_i)].

    With ``texts`` (one list per column) a candidate whose text is one of row i's positives is not in Z_i;
    without in-batch negatives Z_i holds row i's own hard negatives only.
    """
    queries, positives, negatives = (
        columns[0],
        columns[1 : 1 + positives_per_query],
        columns[1 + positives_per_query :],
    )
    size = len(queries)
    terms = []
    for i in range(size):
        own_texts = {texts[1 + c][i] for c in range(positives_per_query)} if texts is not None else set()
        z_positive = [
            cos(queries[i], positives[k][j]) / temperature
            for j in range(size)
            if j != i and in_batch_negatives
            for k in range(positives_per_query)
            if texts is None or texts[1 + k][j] not in own_texts
        ]
        z_negative = [
            cos(queries[i], negatives[k][j]) / temperature
            for j in range(size)
            if in_batch_negatives or j == i
            for k in range(len(negatives))
            if texts is None or texts[1 + positives_per_query + k][j] not in own_texts
        ]
        for c in range(positives_per_query):
            own = cos(queries[i], positives[c][i]) / temperature
            terms.append(-log_softmax_first([own, *z_positive, *z_negative]))
    return torch.stack(terms).mean()


def pearson(first: Tensor, second: Tensor, labels: Tensor) -> Tensor:
    """CoDiEmb Eq. 4: 1 − r; 0 when every label is equal (the documented definition)."""
    size = len(labels)
    if all(float(labels[i]) == float(labels[0]) for i in range(size)):
        return sum(cos(first[i], second[i]) for i in range(size)) * 0.0
    x = [cos(first[i], second[i]) for i in range(size)]
    y = [float(labels[i]) for i in range(size)]
    x_mean = sum(x) / size
    y_mean = sum(y) / size
    covariance = sum((x[i] - x_mean) * (y[i] - y_mean) for i in range(size))
    x_spread = torch.sqrt(sum((x[i] - x_mean) ** 2 for i in range(size)))
    y_spread = math.sqrt(sum((y[i] - y_mean) ** 2 for i in range(size)))
    return 1 - covariance / (x_spread * y_spread)


def average_ranks_descending(values: list[float]) -> list[float]:
    """Sort descending; tied values share the average of the 0-based positions they occupy."""
    order = sorted(range(len(values)), key=lambda i: -values[i])
    ranks = [0.0] * len(values)
    position = 0
    while position < len(order):
        end = position
        while end + 1 < len(order) and values[order[end + 1]] == values[order[position]]:
            end += 1
        for k in range(position, end + 1):
            ranks[order[k]] = (position + end) / 2
        position = end + 1
    return ranks


def rank_kl(first: Tensor, second: Tensor, labels: Tensor, temperature: float) -> Tensor:
    """CoDiEmb Eq. 6 as printed (a sum over the batch): Σ_i p_i log(p_i / q_i)."""
    size = len(labels)
    predicted = [cos(first[i], second[i]) for i in range(size)]
    if size == 1:
        return predicted[0] * 0.0
    ranks = average_ranks_descending([float(value) for value in labels])
    targets = [((size - 1) - ranks[i]) / (size - 1) for i in range(size)]
    target_norm = sum(math.exp(targets[j] / temperature) for j in range(size))
    predicted_norm = sum(torch.exp(predicted[j] / temperature) for j in range(size))
    total = predicted[0] * 0.0
    for i in range(size):
        p = math.exp(targets[i] / temperature) / target_norm
        q = torch.exp(predicted[i] / temperature) / predicted_norm
        total = total + p * torch.log(p / q)
    return total


def pro(first: Tensor, second: Tensor, labels: Tensor, temperature: float) -> Tensor:
    """CoDiEmb Eq. 8 on the list sorted by gold score; tied pairs (undefined T = τ/0) are left out."""
    size = len(labels)
    predicted = [cos(first[i], second[i]) for i in range(size)]
    order = sorted(range(size), key=lambda i: -float(labels[i]))
    terms = []
    for position, i in enumerate(order):
        tail = [j for j in order[position + 1 :] if float(labels[j]) < float(labels[i])]
        if not tail:
            continue
        weights = {j: temperature / (float(labels[i]) - float(labels[j])) for j in tail}  # T_i^j
        own_weight = min(weights.values())  # T_i^i
        logits = [predicted[i] / own_weight] + [predicted[j] / weights[j] for j in tail]
        terms.append(-log_softmax_first(logits))
    if not terms:
        return sum(predicted) * 0.0
    return torch.stack(terms).mean()


def thresholded_infonce(
    first: Tensor,
    second: Tensor,
    labels: Tensor,
    temperature: float,
    threshold: float,
    second_texts: list[str] | None = None,
) -> Tensor:
    """CoDiEmb Eq. 9: −E[Σ_i 1_label log e^{cos(x1_i,x2_i)/τ} / Σ_j e^{cos(x1_i,x2_j)/τ}]; with ``second_texts``,
    a ``x2_j`` (j ≠ i) with the same text as ``x2_i`` is not in the denominator of row i."""
    size = len(labels)
    terms = []
    for i in range(size):
        if float(labels[i]) < threshold:
            continue
        logits = [cos(first[i], second[i]) / temperature] + [
            cos(first[i], second[j]) / temperature
            for j in range(size)
            if j != i and (second_texts is None or second_texts[j] != second_texts[i])
        ]
        terms.append(-log_softmax_first(logits))
    if not terms:
        return (first.sum() + second.sum()) * 0.0
    return torch.stack(terms).mean()


def cosent(scores: list[Tensor], labels: Tensor) -> Tensor:
    """AnglE Eq. 1 / Eq. 7: log(1 + Σ_{y_i > y_j} e^{s_j − s_i})."""
    total = scores[0] * 0.0 + 1.0
    for i in range(len(scores)):
        for j in range(len(scores)):
            if float(labels[i]) > float(labels[j]):
                total = total + torch.exp(scores[j] - scores[i])
    return torch.log(total)


def angle_score(x: Tensor, y: Tensor) -> Tensor:
    """AnglE Eq. 3-6, as the authors' code evaluates it: split into real/imaginary halves, divide z by w,
    normalise by the magnitudes, and take |Σ_k (Re_k + Im_k)| (a similarity, higher = closer)."""
    half = len(x) // 2
    a, b, c, d = x[:half], x[half:], y[:half], y[half:]
    magnitude_z = torch.sqrt(sum(a[k] ** 2 + b[k] ** 2 for k in range(half)))
    magnitude_w = torch.sqrt(sum(c[k] ** 2 + d[k] ** 2 for k in range(half)))
    total = x[0] * 0.0
    for k in range(half):
        real = (a[k] * c[k] + b[k] * d[k]) / (magnitude_w**2)
        imaginary = (b[k] * c[k] - a[k] * d[k]) / (magnitude_w**2)
        gamma = magnitude_z / magnitude_w
        total = total + real / gamma + imaginary / gamma
    return torch.abs(total)


def angle_ibn(
    first: Tensor,
    second: Tensor,
    labels: Tensor,
    scale: float,
    threshold: float,
    texts: tuple[list[str], list[str]] | None,
) -> Tensor:
    """AnglE Eq. 2 over the rows at or above the threshold; identical texts of the batch count as positives."""
    size = len(labels)
    terms = []
    for i in range(size):
        if float(labels[i]) < threshold:
            continue
        positives = []
        everything = []
        for j in range(size):
            logit = cos(first[i], second[j]) * scale
            everything.append(logit)
            is_positive = j == i
            if texts is not None:
                texts1, texts2 = texts
                is_positive = (
                    is_positive
                    or texts2[j] in (texts1[i], texts2[i])
                    or (texts1[j] == texts1[i] and float(labels[j]) >= threshold)
                )
            if is_positive:
                positives.append(logit)
        terms.append(torch.logsumexp(torch.stack(everything), 0) - torch.logsumexp(torch.stack(positives), 0))
    if not terms:
        return (first.sum() + second.sum()) * 0.0
    return torch.stack(terms).mean()


def instructor(
    columns: list[Tensor],
    temperature: float,
    bidirectional: bool,
    texts: list[list[str]] | None = None,
    in_batch_negatives: bool = True,
) -> Tensor:
    """INSTRUCTOR §2.2: query → [own positive, every hard negative]; positive → [every query]; summed.

    With ``texts``, a hard negative with the text of the row's positive is not a candidate of the first
    direction, and a query with the text of the row's query, or whose positive has the text of the row's
    positive, is not a candidate of the second; without in-batch negatives a query sees its own hard
    negatives only.
    """
    queries, positives, negatives = columns[0], columns[1], columns[2:]
    size = len(queries)
    forward_terms = []
    backward_terms = []
    for i in range(size):
        logits = [cos(queries[i], positives[i]) / temperature] + [
            cos(queries[i], negatives[k][j]) / temperature
            for j in range(size)
            if in_batch_negatives or j == i
            for k in range(len(negatives))
            if texts is None or texts[2 + k][j] != texts[1][i]
        ]
        forward_terms.append(-log_softmax_first(logits))
        reverse = [cos(positives[i], queries[i]) / temperature] + [
            cos(positives[i], queries[j]) / temperature
            for j in range(size)
            if j != i and (texts is None or (texts[0][j] != texts[0][i] and texts[1][j] != texts[1][i]))
        ]
        backward_terms.append(-log_softmax_first(reverse))
    loss = torch.stack(forward_terms).mean()
    if bidirectional:
        loss = loss + torch.stack(backward_terms).mean()
    return loss


def curriculum_infonce(
    columns: list[Tensor],
    difficulty: Tensor | None,
    temperature: float,
    threshold: float | None,
    texts: list[list[str]] | None = None,
    in_batch_negatives: bool = True,
) -> Tensor:
    """Data-CUBE Eq. 3 with the Eq. 9 mask on too-difficult rows (φ < δ); every sentence stays a negative.

    With ``texts``, sentences with the text of the row's positive are not candidates; without in-batch
    negatives a query sees its own positive and hard negatives only.
    """
    queries, documents = columns[0], columns[1:]
    size = len(queries)
    terms = []
    for i in range(size):
        if threshold is not None and difficulty is not None and float(difficulty[i]) < threshold:
            continue
        logits = [cos(queries[i], documents[0][i]) / temperature]
        for k, column in enumerate(documents):
            for j in range(size):
                if k == 0 and j == i:
                    continue
                if not in_batch_negatives and j != i:
                    continue
                if texts is not None and texts[1 + k][j] == texts[1][i]:
                    continue
                logits.append(cos(queries[i], column[j]) / temperature)
        terms.append(-log_softmax_first(logits))
    if not terms:
        return sum(column.sum() for column in columns) * 0.0
    return torch.stack(terms).mean()


def gur_contrastive(first: Tensor, second: Tensor, temperature: float, texts: list[list[str]] | None) -> Tensor:
    """GUR Eq. 2, CLIP's symmetric form; with ``texts``, a candidate with the text of the row's partner is
    not in the denominator."""
    size = len(first)
    terms = []
    for anchors, candidates, candidate_texts in ((first, second, 1), (second, first, 0)):
        for i in range(size):
            logits = [cos(anchors[i], candidates[i]) / temperature] + [
                cos(anchors[i], candidates[j]) / temperature
                for j in range(size)
                if j != i and (texts is None or texts[candidate_texts][j] != texts[candidate_texts][i])
            ]
            terms.append(-log_softmax_first(logits))
    return torch.stack(terms).mean()


def official_codiemb_sts(
    mid_first: Tensor, mid_second: Tensor, first: Tensor, second: Tensor, scores: Tensor
) -> tuple[Tensor, dict[str, Tensor]]:
    """The STS branch of the official CoDiEmb training code (youtu-embedding, ``train/model.py`` and
    ``train/loss.py``) with the settings of its four released scripts, transcribed from its logic:

    - embeddings mean-pooled and L2-normalised, the InfoNCE on ``hidden_states[n // 2]``, the list-wise
      losses on the last layer's cosine ``sim``;
    - ``InfoNCE``: cross-entropy of ``q_mid @ p_midᵀ / 0.02`` (``--temperature 0.02``) over the rows with
      score ≥ 1.0 (threshold 1.0), target the row's own pair;
    - ``2·Pearson``: 1 − mean((x−x̄)(y−ȳ)) / (std(x)·std(y)) with population variances, 0 for equal scores;
    - ``0.5·PRO``: sorted by score, for each k the log-softmax of [ŷ_k·max gap, ŷ_j·gap_j] over the lower-
      scored tail (gap > 1e-8), ŷ = sim / 0.05, mean over the k with a tail;
    - ``5·RankKL``: KL(softmax(((n−1−r)/(n−1)) / 0.05) ‖ softmax(sim / 0.05)), ranks r descending with ties
      averaged, ``reduction="batchmean"`` (÷ n).

    Returns the total and the weighted parts.
    """
    size = len(scores)
    normalise = [(column / torch.linalg.norm(column, dim=-1, keepdim=True)) for column in (mid_first, mid_second)]
    valid = [i for i in range(size) if float(scores[i]) >= 1.0]
    if valid:
        infonce = torch.stack(
            [-torch.log_softmax(normalise[0][i] @ normalise[1].T / 0.02, dim=0)[i] for i in valid]
        ).mean()
    else:
        infonce = first.sum() * 0.0
    sim = torch.stack([cos(first[i], second[i]) for i in range(size)])
    y = scores.to(sim.dtype)
    if float(y.min()) == float(y.max()):
        pearson = sim.sum() * 0.0
    else:
        covariance = ((sim - sim.mean()) * (y - y.mean())).mean()
        pearson = 1 - covariance / (
            torch.sqrt(((sim - sim.mean()) ** 2).mean()) * torch.sqrt(((y - y.mean()) ** 2).mean())
        )
    predicted = sim / 0.05
    order = sorted(range(size), key=lambda i: -float(y[i]))
    log_probs = []
    for position, k in enumerate(order[:-1]):
        tail = [j for j in order[position + 1 :] if float(y[k]) - float(y[j]) > 1e-8]
        if not tail:
            continue
        gaps = [float(y[k]) - float(y[j]) for j in tail]
        logits = torch.stack([predicted[k] * max(gaps)] + [predicted[j] * gap for j, gap in zip(tail, gaps)])
        log_probs.append(torch.log_softmax(logits, dim=0)[0])
    pro = -torch.stack(log_probs).mean() if log_probs else sim.sum() * 0.0
    ranks = average_ranks_descending([float(value) for value in y])
    ideal = torch.tensor([(size - 1 - r) / (size - 1) for r in ranks], dtype=sim.dtype)
    target = torch.softmax(ideal / 0.05, dim=0)
    log_predicted = torch.log_softmax(sim / 0.05, dim=0)
    rank_kl = (target * (torch.log(target) - log_predicted)).sum() / size
    parts = {"mid_layer_infonce": infonce, "pearson": 2 * pearson, "pro": 0.5 * pro, "rank_kl": 5 * rank_kl}
    return sum(parts.values()), parts  # type: ignore[return-value]
