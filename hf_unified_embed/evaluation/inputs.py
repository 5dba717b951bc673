"""Unified rows → the inputs of each sentence-transformers evaluator.

The unified schema (:mod:`hf_unified_embed.schema`) stores every evaluation set the same way: a
``query``, its ``positives`` / ``negatives`` and optional normalised scores. These functions turn a
task's rows into what each evaluator kind reads. Scores stay as the adapters normalised them
(Spearman, Pearson and average precision do not depend on a linear rescaling, nor does nDCG on a
common scale of the gains).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from datasets import Dataset

from hf_unified_embed.data.adapters.beir_records import duplicate_id_error
from hf_unified_embed.errors import EvaluationDataError, InputNotFoundError, SourceFormatError, shown
from hf_unified_embed.utils.readers import iter_json_records, require_text, resolve_files


def _rows(dataset: Dataset | Iterable[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
    if isinstance(dataset, Dataset):
        for batch in dataset.iter(batch_size=1_000):
            columns = list(batch)
            for values in zip(*(batch[c] for c in columns)):  # type: ignore[call-overload]
                yield dict(zip(columns, values))
    else:
        yield from dataset


@dataclass
class ScoredPairs:
    """Sentence pairs with one gold value each (STS scores or 0/1 paraphrase labels)."""

    sentences1: list[str] = field(default_factory=list)
    sentences2: list[str] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)

    def texts(self) -> list[str]:
        return list(dict.fromkeys([*self.sentences1, *self.sentences2]))


def sts_pairs(dataset: Dataset | Iterable[Mapping[str, Any]], evaluation: str) -> ScoredPairs:
    """Every (query, text, score) of positives and of scored negatives; each text needs a score."""
    pairs = ScoredPairs()
    for index, row in enumerate(_rows(dataset)):
        for side in ("positives", "negatives"):
            texts, scores = row[side], row[f"{side[:-1]}_scores"]
            if texts and len(scores) != len(texts):
                raise EvaluationDataError(
                    f"{len(texts)} {side} but {len(scores)} scores; STS evaluation needs a score per text",
                    evaluation=evaluation,
                    row=index,
                    field=f"{side[:-1]}_scores",
                )
            for text, score in zip(texts, scores):
                pairs.sentences1.append(row["query"])
                pairs.sentences2.append(text)
                pairs.scores.append(float(score))
    if len(set(pairs.scores)) < 2:
        raise EvaluationDataError(
            f"needs at least two distinct gold scores for a correlation, got {sorted(set(pairs.scores))}",
            evaluation=evaluation,
        )
    return pairs


def labelled_pairs(
    dataset: Dataset | Iterable[Mapping[str, Any]], evaluation: str, label_threshold: float = 0.5
) -> ScoredPairs:
    """Binary-labelled pairs: a scored text is a paraphrase when its score ≥ ``label_threshold``;
    unscored positives are label 1 and unscored negatives label 0."""
    pairs = ScoredPairs()
    for row in _rows(dataset):
        for side, default in (("positives", 1), ("negatives", 0)):
            texts, scores = row[side], row[f"{side[:-1]}_scores"]
            labels = [int(score >= label_threshold) for score in scores] if scores else [default] * len(texts)
            for text, label in zip(texts, labels):
                pairs.sentences1.append(row["query"])
                pairs.sentences2.append(text)
                pairs.scores.append(label)
    if len(set(pairs.scores)) < 2:
        raise EvaluationDataError(
            f"needs pairs of both labels for average precision, got only label {pairs.scores[:1]}",
            evaluation=evaluation,
        )
    return pairs


def pair_key(text1: str, text2: str) -> frozenset[str]:
    """Two texts as an unordered pair, case and whitespace folded: how a pair seen in training is recognised."""
    return frozenset(" ".join(text.casefold().split()) for text in (text1, text2))


def row_pairs(dataset: Dataset | Iterable[Mapping[str, Any]]) -> set[frozenset[str]]:
    r"""Every (query, positive) and (query, negative) of the rows, as :func:`pair_key`\ s."""
    return {pair_key(row["query"], text) for row in _rows(dataset) for text in (*row["positives"], *row["negatives"])}


def drop_seen_pairs(dataset: Dataset, seen: set[frozenset[str]], evaluation: str) -> tuple[Dataset, int]:
    """``dataset`` without the (query, text) pairs in ``seen`` (with their scores), and how many were dropped.

    A row left with no pair is dropped. Evaluating on what remains measures a model on pairs it was not
    trained on: STS Benchmark's train split, for one, holds about four in ten of the SemEval STS
    2012–2015 test pairs.
    """
    dropped = 0

    def keep_unseen(row: dict[str, Any]) -> dict[str, Any]:
        nonlocal dropped
        for side in ("positives", "negatives"):
            scores_field = f"{side[:-1]}_scores"
            texts, scores = row[side], row[scores_field]
            kept = [index for index, text in enumerate(texts) if pair_key(row["query"], text) not in seen]
            dropped += len(texts) - len(kept)
            row[side] = [texts[index] for index in kept]
            # Scores go with their texts; an unscored side stays unscored.
            row[scores_field] = [scores[index] for index in kept] if scores else scores
        return row

    kept_rows = dataset.map(keep_unseen, features=dataset.features, load_from_cache_file=False)
    kept_rows = kept_rows.filter(lambda row: bool(row["positives"] or row["negatives"]), load_from_cache_file=False)
    if len(kept_rows) == 0:
        raise EvaluationDataError(
            f"all {dropped} pairs are in the excluded sources; nothing is left to evaluate",
            evaluation=evaluation,
            field="exclude_seen",
        )
    return kept_rows, dropped


def reranking_samples(dataset: Dataset | Iterable[Mapping[str, Any]], evaluation: str) -> list[dict[str, Any]]:
    """One ``{"query", "positive", "negative"}`` sample per row, as :class:`RerankingEvaluator` reads.

    Rows without a negative cannot be ranked; the evaluator leaves them out (as TrecQA's "clean"
    test set does) and the count is in the results as ``num_examples``.
    """
    samples = [
        {"query": row["query"], "positive": list(row["positives"]), "negative": list(row["negatives"])}
        for row in _rows(dataset)
    ]
    if not any(sample["positive"] and sample["negative"] for sample in samples):
        raise EvaluationDataError("no row has both a positive and a negative to rank", evaluation=evaluation)
    return samples


@dataclass
class RetrievalInputs:
    """Queries, a corpus and graded judgements, keyed as sentence-transformers' evaluator keys them.

    A document of a corpus file is keyed by its ``_id``, so identical texts under two ids stay two documents
    (as ``InformationRetrievalEvaluator`` built from the same files ranks them); a text only the rows hold
    is its own key, and a query text is its own key (identical query texts are one query).
    """

    queries: dict[str, str]
    corpus: dict[str, str]
    relevance: dict[str, dict[str, float]]

    def texts(self) -> list[str]:
        return list(dict.fromkeys([*self.queries.values(), *self.corpus.values()]))


def entry_files(patterns: str | Sequence[str], base_dir: Path | None, *, evaluation: str, field: str) -> list[Path]:
    """The files an entry's ``field`` names (paths or globs, relative to ``base_dir``); each must match one."""
    files: list[Path] = []
    for pattern in [patterns] if isinstance(patterns, str) else patterns:
        try:
            files += resolve_files(pattern, base_dir)
        except SourceFormatError:
            anchor = f" (relative paths resolve in {base_dir})" if base_dir is not None else ""
            raise InputNotFoundError(
                f"evaluation {shown(evaluation)}, field {shown(field)}: nothing matches {pattern}{anchor}"
            ) from None
    return files


def _free_key(text: str, taken: Mapping[str, str]) -> str:
    """``text`` as a document's key, made distinct from every key in ``taken`` (a text may equal an ``_id``)."""
    key = text
    while key in taken:
        key += "\0"
    return key


def read_corpus_files(
    data_files: str | Sequence[str], base_dir: Path | None, *, evaluation: str, include_title: bool = True
) -> dict[str, str]:
    """Documents of BEIR-style ``corpus.jsonl`` files (``{"_id", "title", "text"}`` records): key → text.

    The title is prefixed to the text as BEIR and the ``beir`` source format do. The key is the record's
    ``_id`` (prefixed with ``<n>:`` when the entry reads several files, whose ids may overlap), or its text
    where the record has no ``_id``. An ``_id`` twice in one file is an error naming the file and its lines.
    """
    files = entry_files(data_files, base_dir, evaluation=evaluation, field="corpus_files")
    documents: dict[str, str] = {}
    texts: set[str] = set()  # a record without an ``_id`` adds its text once, and only if no document has it
    for position, path in enumerate(files):
        ids: set[str] = set()
        for line, record in iter_json_records(path):
            if not isinstance(record, dict):
                raise SourceFormatError(f"got {type(record).__name__}", file=path, line=line, expected="a JSON object")
            text = require_text(record.get("text"), file=path, line=line, field="text")
            title = record.get("title")
            if include_title and isinstance(title, str) and title.strip():
                text = f"{title.strip()} {text}"
            if record.get("_id") is None:
                if text not in texts:
                    texts.add(text)
                    documents[_free_key(text, documents)] = text
                continue
            document_id = str(record["_id"])
            if document_id in ids:
                raise duplicate_id_error(path, document_id)
            ids.add(document_id)
            documents[f"{position}:{document_id}" if len(files) > 1 else document_id] = text
            texts.add(text)
    return documents


def retrieval_inputs(
    dataset: Dataset | Iterable[Mapping[str, Any]], evaluation: str, extra_corpus: Mapping[str, str] | None = None
) -> RetrievalInputs:
    """Each row's query against the corpus of every row's positives and negatives plus ``extra_corpus``.

    ``extra_corpus`` (key → text, :func:`read_corpus_files`) keeps its keys; a row's text names every
    document of it with that text — a positive makes each of them relevant, as a judgement of each id in
    the BEIR files that hold the text twice does — and a text no corpus file holds is its own document.
    A positive's grade is its score (1.0 when the row has no scores); negatives and unjudged documents have
    grade 0. A query appearing in several rows collects all their judgements.
    """
    corpus: dict[str, str] = dict(extra_corpus or {})
    keys_by_text: dict[str, list[str]] = {}
    for key, text in corpus.items():
        keys_by_text.setdefault(text, []).append(key)

    def keys(text: str) -> list[str]:
        if text not in keys_by_text:
            key = _free_key(text, corpus)
            corpus[key] = text
            keys_by_text[text] = [key]
        return keys_by_text[text]

    queries: dict[str, str] = {}
    relevance: dict[str, dict[str, float]] = {}
    for index, row in enumerate(_rows(dataset)):
        query = row["query"]
        queries[query] = query
        scores = row["positive_scores"] or [1.0] * len(row["positives"])
        grades = relevance.setdefault(query, {})
        for text, score in zip(row["positives"], scores):
            if score <= 0:
                raise EvaluationDataError(
                    f"positive with score {score}; a relevant document needs a grade > 0",
                    evaluation=evaluation,
                    row=index,
                    field="positive_scores",
                )
            for key in keys(text):
                grades[key] = max(grades.get(key, 0.0), float(score))
        for text in row["negatives"]:
            keys(text)
    if not relevance:
        raise EvaluationDataError("no queries with a relevant document", evaluation=evaluation)
    return RetrievalInputs(queries, corpus, relevance)
