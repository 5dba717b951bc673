"""GUR pair mining: similar sentence pairs from raw documents by weighted longest common substring.

For each document (GUR §III-B): split into sentences, keep those within the length bounds, form
candidates — the title with every content sentence, and every content sentence with the next
``window`` ones — score each candidate by the weighted LCS of the normalised sentences, keep it
when the score reaches ``min_lcs`` (``short_min_lcs`` when either sentence is shorter than
``short_length`` characters), use every sentence in at most ``repeat`` kept pairs (heaviest
pairs first), and drop pairs seen before. Kept pairs become unified retrieval rows: query = the earlier sentence (the
title for title pairs), positives = [the later one].
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from datasets import Dataset, Features, Value

from hf_unified_embed.errors import shown
from hf_unified_embed.gur_pairs.documents import Document, iter_documents
from hf_unified_embed.gur_pairs.lcs import CharWeights, codes_of, score_pairs
from hf_unified_embed.gur_pairs.sentences import SentenceBounds, clean, normalize, split_sentences
from hf_unified_embed.schema import unified_features
from hf_unified_embed.utils.arguments import checked_arguments

__all__ = ["MinedPair", "PairMiningConfig", "mine_dataset", "mine_document", "mine_pairs", "pair_row"]

# Scores are float sums of weights such as 0.3: 14 × 0.3 is 4.199999…; compare with a tolerance.
_TOLERANCE = 1e-9


@dataclass(frozen=True)
class PairMiningConfig:
    """Settings of :func:`mine_document` (defaults: GUR's official code, see ``docs/gur.md``).

    Args:
        window: each content sentence is a candidate with the next ``window`` content sentences.
        title_pairs: also pair the title with every content sentence (GUR §III-B).
        min_lcs: weighted LCS needed to keep a pair.
        short_min_lcs: the threshold when either sentence is shorter than ``short_length`` characters.
        short_length: below this many characters (normalised) a sentence counts as short.
        repeat: the most kept pairs a sentence may take part in (1 = the paper's "unutilised" rule).
        lowercase: compare case-folded text.
        bounds: sentence length bounds in characters.
        weights: per-class character weights.
        task: the ``task`` name written to the rows.
    """

    window: int = 3
    title_pairs: bool = True
    min_lcs: float = 3.0
    short_min_lcs: float = 2.0
    short_length: int = 16
    repeat: int = 1
    lowercase: bool = True
    bounds: SentenceBounds = field(default_factory=SentenceBounds)
    weights: CharWeights = field(default_factory=CharWeights)
    task: str = "gur-pairs"

    def __post_init__(self) -> None:
        if self.window < 0:
            raise ValueError(f"window must be >= 0, got {self.window}")
        if self.repeat < 1:
            raise ValueError(f"repeat must be >= 1, got {self.repeat}")
        for name in ("min_lcs", "short_min_lcs"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive number, got {shown(value)}")
        if not self.task:
            raise ValueError("task must be a non-empty name")


@dataclass(frozen=True)
class MinedPair:
    """A kept pair: the two cleaned sentences and their weighted LCS."""

    query: str
    positive: str
    score: float

    @property
    def key(self) -> int:
        """Order-free 64-bit fingerprint of the normalised pair, for deduplication."""
        first, second = sorted((normalize(self.query), normalize(self.positive)))
        digest = hashlib.blake2b(f"{first}\x00{second}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "little", signed=True)


def _units(document: Document, config: PairMiningConfig) -> tuple[list[str], list[str], bool]:
    """Cleaned sentences (title first when present), their comparison keys, and whether a title leads."""
    texts: list[str] = []
    keys: list[str] = []
    seen: set[str] = set()
    has_title = False
    candidates = [(clean(document.title), True)] if document.title and config.title_pairs else []
    candidates += [(sentence, False) for sentence in split_sentences(document.text)]
    for text, is_title in candidates:
        key = normalize(text, config.lowercase)
        # A sentence repeated in a document would only pair with itself: keep its first occurrence.
        if not config.bounds.accepts(text) or key in seen:
            continue
        seen.add(key)
        texts.append(text)
        keys.append(key)
        has_title = has_title or is_title
    return texts, keys, has_title


def _candidates(count: int, has_title: bool, window: int) -> tuple[np.ndarray, np.ndarray]:
    first = 1 if has_title else 0
    left: list[int] = [0] * (count - 1) if has_title else []
    right: list[int] = list(range(1, count)) if has_title else []
    for i in range(first, count):
        for j in range(i + 1, min(count, i + window + 1)):
            left.append(i)
            right.append(j)
    return np.asarray(left, dtype=np.int64), np.asarray(right, dtype=np.int64)


def mine_document(document: Document, config: PairMiningConfig | None = None) -> list[MinedPair]:
    """The kept pairs of one document, in candidate order (title pairs first).

    Candidates that pass the threshold are taken heaviest first while both sentences still have
    ``repeat`` uses left.
    """
    config = config or PairMiningConfig()
    texts, keys, has_title = _units(document, config)
    left, right = _candidates(len(texts), has_title, config.window)
    if not len(left):
        return []
    codes = [codes_of(key) for key in keys]
    offsets = np.zeros(len(codes) + 1, dtype=np.int64)
    np.cumsum([len(c) for c in codes], out=offsets[1:])
    all_codes = np.concatenate(codes)
    scores = score_pairs(all_codes, config.weights.of(all_codes), offsets, left, right)

    lengths = np.array([len(key) for key in keys])
    short = np.minimum(lengths[left], lengths[right]) < config.short_length
    passed = scores + _TOLERANCE >= np.where(short, config.short_min_lcs, config.min_lcs)
    # Heaviest candidates claim their sentences first, so the `repeat` budget goes to the best pairs.
    uses = [0] * len(texts)
    kept: list[int] = []
    for k in np.argsort(-scores, kind="stable").tolist():
        i, j = int(left[k]), int(right[k])
        if passed[k] and uses[i] < config.repeat and uses[j] < config.repeat:
            uses[i] += 1
            uses[j] += 1
            kept.append(k)
    return [MinedPair(texts[left[k]], texts[right[k]], float(scores[k])) for k in sorted(kept)]


def pair_row(pair: MinedPair, task: str) -> dict[str, Any]:
    """The unified retrieval row of a mined pair."""
    return {
        "task": task,
        "task_type": "retrieval",
        "query_instruction": "",
        "document_instruction": "",
        "query": pair.query,
        "positives": [pair.positive],
        "negatives": [],
        "positive_scores": [],
        "negative_scores": [],
    }


@checked_arguments
def mine_pairs(
    documents: Iterable[Document], config: PairMiningConfig | None = None, *, seen: set[int] | None = None
) -> Iterator[MinedPair]:
    """Stream the kept pairs of many documents, skipping pairs already yielded (or already in ``seen``)."""
    config = config or PairMiningConfig()
    seen = set() if seen is None else seen
    for document in documents:
        for pair in mine_document(document, config):
            key = pair.key
            if key not in seen:
                seen.add(key)
                yield pair


_ORDER_COLUMNS = {"_document": Value("int64"), "_rank": Value("int32"), "_key": Value("int64")}


def _generate_shard(
    parts: list[int], paths: list[str], total_parts: int, config: PairMiningConfig, text_field: str, title_field: str
) -> Iterator[dict[str, Any]]:
    for part in parts:
        documents = iter_documents(paths, text_field=text_field, title_field=title_field, part=part, parts=total_parts)
        for number, document in documents:
            for rank, pair in enumerate(mine_document(document, config)):
                yield {**pair_row(pair, config.task), "_document": number, "_rank": rank, "_key": pair.key}


def _fingerprint(paths: Sequence[str | Path], config: PairMiningConfig, *fields: str) -> str:
    # datasets caches generator output by its arguments; the inputs' sizes and times make an edited
    # file a new dataset instead of a stale cache hit.
    files = [f for p in map(Path, paths) for f in (sorted(p.rglob("*.txt")) if p.is_dir() else [p])]
    stamps = [(str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns) for f in files if f.exists()]
    return hashlib.blake2b(repr((stamps, config, fields)).encode(), digest_size=16).hexdigest()


def mine_dataset(
    paths: Sequence[str | Path],
    config: PairMiningConfig | None = None,
    *,
    num_proc: int | None = None,
    text_field: str = "text",
    title_field: str = "title",
    cache_dir: str | None = None,
) -> Dataset:
    """Mine every document under ``paths`` into a unified :class:`~datasets.Dataset`.

    Documents are spread over ``num_proc`` processes by ``datasets``; rows come back in document
    order and duplicates across documents are dropped (first occurrence kept), so the result does not
    depend on ``num_proc``.
    """
    config = config or PairMiningConfig()
    workers = max(1, num_proc or 1)
    total_parts = workers * 4  # several shards per worker keep the progress bar moving
    features = Features({**unified_features(), **_ORDER_COLUMNS})
    dataset = Dataset.from_generator(
        _generate_shard,
        features=features,
        gen_kwargs={
            "parts": list(range(total_parts)),
            "paths": tuple(str(p) for p in paths),  # a tuple: datasets shards lists only
            "total_parts": total_parts,
            "config": config,
            "text_field": text_field,
            "title_field": title_field,
        },
        num_proc=workers if workers > 1 else None,
        cache_dir=cache_dir,
        split="train",
        fingerprint=_fingerprint(paths, config, text_field, title_field),
    )
    order_columns = dataset.select_columns(list(_ORDER_COLUMNS)).with_format("numpy")[:]
    order = np.lexsort((order_columns["_rank"], order_columns["_document"]))
    _, first = np.unique(order_columns["_key"][order], return_index=True)
    # The kept rows in document order (first occurrence of each pair wins), as a lazy index mapping.
    dataset = dataset.select(order[np.sort(first)])
    return dataset.remove_columns(list(_ORDER_COLUMNS))
