"""``kind: forgetting``: how much of a reference (base) model's behaviour a trained model kept, without labels.

Fine-tuning for one thing makes embedding models worse at what they could do before. This kind
measures it on texts the run did not train on (a corpus held aside) and needs no relevance labels:
both models embed the same texts and the kind compares the two geometries.

* ``neighbour_overlap@k`` (primary): for every text, the share of its ``k`` nearest neighbours
  (cosine, the text itself excluded) under the reference model that are also among its ``k``
  nearest under the evaluated model, averaged over texts. 1 means every neighbourhood is intact;
  an unrelated model scores about ``k / (N − 1)``.
* ``similarity_spearman``: Spearman correlation of the two models' cosine similarities over pairs
  of texts (all pairs up to ``max_pairs``, else a seeded sample), the reference's pair similarities
  acting as the gold scores. 1 means the same ranking of every pair.

Higher is better for both, so a suite, ``merge search`` and the quality report read them like any
other metric: "worse than the base by more than ε" works unchanged (the base itself scores 1).
Both models embed at the evaluated model's ``max_seq_length``, so only the weights differ. The
reference's embeddings are cached per process (by model, length and texts), so a merge search
embeds them once however many candidates it scores.

A suite entry::

    - name: forgetting-msmarco
      kind: forgetting
      source: beir                      # the rows' texts plus the folder's corpus.jsonl
      data_files: ir/msmarco-dl-subset
      evaluator: {reference: sentence-transformers/all-MiniLM-L6-v2, k: 10, max_texts: 2000}

``reference`` may be left out where the caller knows the base (``hf-unified-embed train`` fills
in the recipe's base model, ``merge search`` the merge's ``base``; see
:func:`hf_unified_embed.evaluation.suite.set_reference_model`).
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from datasets import Dataset
from scipy.stats import spearmanr
from sentence_transformers.base.evaluation.evaluator import BaseEvaluator

from hf_unified_embed.errors import SuiteError, shown
from hf_unified_embed.evaluation.inputs import read_corpus_files
from hf_unified_embed.evaluation.kinds.evaluation_kind import EvaluationKind, register_evaluation_kind
from hf_unified_embed.utils.encoding_progress import encode_with_progress

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

    from hf_unified_embed.evaluation.kinds.evaluation_kind import SuiteEntry

#: Reference embeddings kept per process: (reference, max_seq_length, texts) → normalised embeddings.
_REFERENCE_CACHE: OrderedDict[tuple[Any, ...], torch.Tensor] = OrderedDict()
_REFERENCE_CACHE_SIZE = 4
#: Rows of the similarity matrix scored at once in the neighbour search (bounds its memory).
_BLOCK = 1024


def nearest_neighbours(embeddings: torch.Tensor, k: int) -> torch.Tensor:
    """``(N, k)`` indices of each row's ``k`` most cosine-similar other rows (normalised input), blockwise."""
    count = embeddings.size(0)
    rows = []
    for begin in range(0, count, _BLOCK):
        scores = embeddings[begin : begin + _BLOCK] @ embeddings.T
        own = torch.arange(begin, begin + scores.size(0), device=scores.device)
        scores[torch.arange(scores.size(0), device=scores.device), own] = float("-inf")
        rows.append(scores.topk(k, dim=1).indices)
    return torch.cat(rows)


def neighbour_overlap(reference: torch.Tensor, trained: torch.Tensor, k: int) -> float:
    """Mean over rows of |top-k under ``reference`` ∩ top-k under ``trained``| / k (normalised embeddings)."""
    before, after = nearest_neighbours(reference, k), nearest_neighbours(trained, k)
    shared = (before.unsqueeze(-1) == after.unsqueeze(-2)).any(dim=-1).sum(dim=-1)
    return float(shared.double().mean() / k)


def sample_pairs(count: int, max_pairs: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Index pairs ``i < j``: all of them when there are at most ``max_pairs``, else a seeded sample of distinct pairs."""
    total = count * (count - 1) // 2
    if total <= max_pairs:
        first, second = np.triu_indices(count, k=1)
        return first, second
    generator = np.random.default_rng(seed)
    chosen: set[tuple[int, int]] = set()
    while len(chosen) < max_pairs:
        first = generator.integers(0, count, size=max_pairs)
        second = generator.integers(0, count, size=max_pairs)
        for a, b in zip(first.tolist(), second.tolist()):
            if a != b and len(chosen) < max_pairs:
                chosen.add((min(a, b), max(a, b)))
    pairs = np.array(sorted(chosen))
    return pairs[:, 0], pairs[:, 1]


def similarity_spearman(reference: torch.Tensor, trained: torch.Tensor, max_pairs: int, seed: int) -> float:
    """Spearman correlation of the two models' cosine similarities over :func:`sample_pairs`."""
    first, second = sample_pairs(reference.size(0), max_pairs, seed)
    index_a, index_b = torch.from_numpy(first), torch.from_numpy(second)
    before = (reference[index_a] * reference[index_b]).sum(-1).double().cpu().numpy()
    after = (trained[index_a] * trained[index_b]).sum(-1).double().cpu().numpy()
    return float(spearmanr(before, after).statistic)


class ForgettingEvaluator(BaseEvaluator):
    """Compares a model's embedding geometry on ``texts`` with a reference model's (see :mod:`.forgetting`).

    Args:
        texts: distinct texts held aside from training.
        reference: the reference (base) model: a path or Hub id, or a loaded ``SentenceTransformer``.
        k: neighbours per text for ``neighbour_overlap@k``.
        max_pairs: pairs of texts for ``similarity_spearman`` (all pairs when there are fewer).
        batch_size: encoding batch size.
        seed: seeds the pair sample.
        name: prefixes the metric keys.

    Attributes:
        show_encoding_progress: a bar counting the texts each model encodes (``run_suite`` sets it).
    """

    show_encoding_progress: bool = False

    def __init__(
        self,
        texts: Sequence[str],
        reference: str | SentenceTransformer | None = None,
        k: int = 10,
        max_pairs: int = 100_000,
        batch_size: int = 32,
        seed: int = 0,
        name: str = "",
    ) -> None:
        super().__init__()
        if reference is None:
            raise ValueError(
                "needs 'reference', the model to compare with (the base); set evaluator: {reference: PATH_OR_ID}"
            )
        texts = list(dict.fromkeys(texts))
        if not 1 <= k < len(texts):
            raise ValueError(f"k must be between 1 and the number of distinct texts − 1 ({len(texts) - 1}), got {k}")
        if max_pairs < 1:
            raise ValueError(f"max_pairs must be positive, got {max_pairs}")
        self.texts, self.reference, self.k = texts, reference, k
        self.max_pairs, self.batch_size, self.seed, self.name = max_pairs, batch_size, seed, name
        self.primary_metric = f"neighbour_overlap@{k}"

    @property
    def description(self) -> str:
        return "Forgetting"

    def __call__(
        self, model: Any, output_path: str | None = None, epoch: int = -1, steps: int = -1
    ) -> dict[str, float]:
        trained = self._embed(model)
        reference = self._reference_embeddings(model)
        metrics = {
            f"neighbour_overlap@{self.k}": neighbour_overlap(reference, trained, self.k),
            "similarity_spearman": similarity_spearman(reference, trained, self.max_pairs, self.seed),
        }
        metrics = self.prefix_name_to_metrics(metrics, self.name)
        self.store_metrics_in_model_card_data(model, metrics, epoch, steps)
        return metrics

    def _embed(self, model: Any, texts: Sequence[str] | None = None) -> torch.Tensor:
        embeddings = encode_with_progress(
            lambda part: model.encode(
                list(part), batch_size=self.batch_size, convert_to_tensor=True, show_progress_bar=False
            ),
            list(self.texts if texts is None else texts),
            batch_size=self.batch_size,
            show_progress_bar=self.show_encoding_progress,
        )
        return F.normalize(embeddings.float().cpu(), dim=-1)

    def _reference_embeddings(self, model: Any) -> torch.Tensor:
        """The reference's embeddings at ``model``'s sequence length, from the process cache when there."""
        from hf_unified_embed.training.bidirectional_transformer import load_sentence_transformer

        length = getattr(model, "max_seq_length", None)
        reference_id = self.reference if isinstance(self.reference, str) else id(self.reference)
        key = (reference_id, length, hash(tuple(self.texts)))
        if key in _REFERENCE_CACHE:
            _REFERENCE_CACHE.move_to_end(key)
            return _REFERENCE_CACHE[key]
        reference = (
            load_sentence_transformer(self.reference, device=str(model.device))
            if isinstance(self.reference, str)
            else self.reference
        )
        kept = reference.max_seq_length
        if length is not None:
            reference.max_seq_length = length
        try:
            embeddings = self._embed(reference)
        finally:
            reference.max_seq_length = kept
        _REFERENCE_CACHE[key] = embeddings
        while len(_REFERENCE_CACHE) > _REFERENCE_CACHE_SIZE:
            _REFERENCE_CACHE.popitem(last=False)
        return embeddings

    def get_config_dict(self) -> dict[str, Any]:
        reference = self.reference if isinstance(self.reference, str) else type(self.reference).__name__
        return {"reference": reference, "k": self.k, "max_pairs": self.max_pairs, "texts": len(self.texts)}


@register_evaluation_kind
class ForgettingKind(EvaluationKind):
    """The distinct texts of the rows (plus ``corpus_files``; a ``beir`` source adds its ``corpus.jsonl``),
    at most ``max_texts`` of them (a seeded sample); :class:`ForgettingEvaluator` against ``reference``."""

    name = "forgetting"
    task_type = "retrieval"
    evaluator_class = ForgettingEvaluator
    primary_metric = "neighbour_overlap@10"
    reported_metrics = (r"neighbour_overlap@\d+", r"similarity_spearman")
    kind_options: ClassVar[Mapping[str, Any]] = {"max_texts": int}
    set_by_kind = ("name", "texts")
    takes_corpus_files = True
    uses_reference_model = True

    def primary_metric_for(self, options: Mapping[str, Any]) -> str:
        return f"neighbour_overlap@{options.get('k', 10)}"

    def build_evaluator(
        self, entry: SuiteEntry, rows: Dataset, options: dict[str, Any], data_root: Path | None
    ) -> BaseEvaluator:
        max_texts = options.pop("max_texts", 2000)
        if isinstance(max_texts, bool) or max_texts < 2:
            raise SuiteError(
                f"entry {shown(entry.name)}, field 'evaluator': max_texts must be at least 2, got {max_texts}"
            )
        if options.get("reference") is None:
            raise SuiteError(
                f"entry {shown(entry.name)}, field 'evaluator': kind 'forgetting' needs 'reference' (the base model "
                "to compare with: a path or Hub id)"
            )
        corpus_files = entry.corpus_files
        if corpus_files is None and entry.source == "beir":
            data_files = [entry.data_files] if isinstance(entry.data_files, str) else list(entry.data_files or [])
            corpus_files = [str(Path(folder) / "corpus.jsonl") for folder in data_files]
        corpus = read_corpus_files(corpus_files, data_root, evaluation=entry.name).values() if corpus_files else []
        texts = list(dict.fromkeys([*EvaluationKind.texts(self, None, rows), *corpus]))  # type: ignore[arg-type]
        if len(texts) > max_texts:
            texts = random.Random(options.get("seed", 0)).sample(texts, max_texts)
        return self.make(entry, options, texts=texts)

    def texts(self, evaluator: BaseEvaluator, rows: Dataset) -> list[str]:
        assert isinstance(evaluator, ForgettingEvaluator)
        return list(evaluator.texts)

    def num_examples(self, evaluator: BaseEvaluator, rows: Dataset) -> int:
        assert isinstance(evaluator, ForgettingEvaluator)
        return len(evaluator.texts)
