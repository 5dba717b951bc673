"""Hard-negative mining on unified retrieval tasks: exact search, positive-aware filters, teacher scores.

For each retrieval task the distinct queries and the distinct documents (an external corpus, then
the task's own positives and negatives) are embedded once into disk-backed files; every block of
queries is searched exactly over every block of documents (:mod:`hf_unified_embed.negatives.exact_search`);
the candidates are filtered as in sentence-transformers' ``mine_hard_negatives`` (the query's
positives, margins relative to its lowest positive score — NV-Retriever's positive-aware mining —
score bounds) and, unlike it, by identity with the query text; an optional cross-encoder rescoring
replaces the scores before filtering. Each row gets the mined ``negatives`` (hardest first, replacing
the source's own), ``negative_scores`` and ``positive_scores`` from the same teacher, mapped onto
[0, 1]: ``(cos + 1) / 2`` for the bi-encoder, the sigmoid of a cross-encoder's logit.

Several processes (a launched run, :func:`~hf_unified_embed.utils.distributed_encode.launched_processes`)
share the work: each encodes its contiguous slice of the documents and of the queries, the queries are
exchanged (each process holds every query's embedding, and only its slice of the documents: a corpus is
usually far larger than its queries), each searches every block of queries over its documents, and the
top-k of each block are merged; the blocks' filters and cross-encoder rescoring are spread over the
processes, and the results are exchanged so that every process ends with the same rows.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import torch
from datasets import Dataset, DatasetDict
from datasets.fingerprint import get_temporary_cache_files_directory
from tqdm.auto import tqdm

from hf_unified_embed.errors import UsageError, shown
from hf_unified_embed.negatives.candidates import ExternalCorpus, TaskDocuments
from hf_unified_embed.negatives.exact_search import Corpus, SearchResult, search
from hf_unified_embed.negatives.hard_negative_config import HardNegativeConfig, MiningReport
from hf_unified_embed.negatives.store import EmbeddingFile, Encoder
from hf_unified_embed.schema import check_columns, task_instruction
from hf_unified_embed.training.instruction_fit import check_instruction_room
from hf_unified_embed.utils.arguments import checked_arguments
from hf_unified_embed.utils.distributed_encode import ONE_PROCESS, EncodingProcesses
from hf_unified_embed.utils.locations import public_name

if TYPE_CHECKING:
    from sentence_transformers import CrossEncoder, SentenceTransformer

#: Task types whose rows are queries with relevant documents: the ones mined.
MINED_TASK_TYPES = ("retrieval",)


@dataclass
class MiningResult:
    """The tasks (mined ones with new negatives and scores, the others unchanged) and a report per mined task.

    Attributes:
        skipped: why each task in ``tasks`` was not mined: ``"sts task"`` (only :data:`MINED_TASK_TYPES`
            are), ``"no rows"``, ``"not chosen"`` (not among ``task_names``).
        left_out: tasks of the source that are not in ``tasks`` at all, and why (``"no train split; it has
            test"``, filled by :func:`~hf_unified_embed.negatives.folder.mine_negatives_folder`).
    """

    tasks: DatasetDict
    reports: dict[str, MiningReport]
    skipped: dict[str, str] = field(default_factory=dict)
    left_out: dict[str, str] = field(default_factory=dict)


def _list_parts(column: pa.ChunkedArray) -> tuple[np.ndarray, pa.Array]:
    array = column.combine_chunks()
    offsets = np.asarray(array.offsets, dtype=np.int64)
    return offsets - offsets[0], array.flatten()


def _teacher_to_unit(scores: np.ndarray, cross_encoder: bool) -> np.ndarray:
    # Cross-encoder scores are already sigmoids; cosines map linearly onto [0, 1].
    unit = scores if cross_encoder else (scores + 1.0) / 2.0
    return np.clip(unit, 0.0, 1.0).astype(np.float32)


def _encoder(
    encode: Callable[..., np.ndarray], prompt: str, batch_size: int, pool: dict[str, Any] | None = None
) -> Encoder:
    """``texts -> normalised embeddings`` with the task's instruction as prompt (none when empty), through
    sentence-transformers' multi-process ``pool`` when one is given."""
    return partial(
        encode,
        prompt=prompt or None,
        batch_size=batch_size,
        normalize_embeddings=True,
        convert_to_numpy=True,
        show_progress_bar=False,
        **({"pool": pool} if pool is not None else {}),
    )


def _padded_positives(pair_query: torch.Tensor, pair_doc: torch.Tensor, count: int) -> torch.Tensor:
    """``(count, most positives)`` document ids of each query's positives, padded with -2 (never an id)."""
    order = torch.argsort(pair_query, stable=True)
    queries, documents = pair_query[order], pair_doc[order]
    sizes = torch.bincount(queries, minlength=count)
    starts = torch.cumsum(sizes, 0) - sizes
    column = torch.arange(len(queries), device=queries.device) - starts[queries]
    padded = torch.full((count, int(sizes.max()) if len(queries) else 0), -2, dtype=torch.long, device=queries.device)
    padded[queries, column] = documents
    return padded


class _TaskMiner:
    """The state of mining one task: its distinct texts, embeddings, pairs and the per-query results."""

    def __init__(
        self,
        task: str,
        dataset: Dataset,
        model: SentenceTransformer,
        config: HardNegativeConfig,
        external: ExternalCorpus | None,
        scratch: Path,
        device: torch.device,
        show_progress_bar: bool | None,
        processes: EncodingProcesses = ONE_PROCESS,
        pool: dict[str, Any] | None = None,
    ) -> None:
        self.config, self.device, self.processes = config, device, processes
        table = dataset.select_columns(
            ["query_instruction", "document_instruction", "query", "positives", "negatives"]
        ).with_format("arrow")[:]
        self.query_prompt = task_instruction(table, "query_instruction", task)
        self.document_prompt = task_instruction(table, "document_instruction", task)
        for column, prompt in (
            ("query_instruction", self.query_prompt),
            ("document_instruction", self.document_prompt),
        ):
            # Before any text is embedded: an instruction as long as max_seq_length leaves nothing of the texts.
            check_instruction_room(
                model.tokenizer, prompt or "", model.max_seq_length, f"task {shown(task)}, field {shown(column)}"
            )
        encoded_queries = table.column("query").combine_chunks().dictionary_encode()
        self.query_texts: pa.Array = encoded_queries.dictionary
        self.row_query = np.asarray(encoded_queries.indices, dtype=np.int64)
        self.positive_offsets, positives = _list_parts(table.column("positives"))
        _, negatives = _list_parts(table.column("negatives"))
        shared = external.texts if external is not None else pa.array([], type=pa.string())
        self.documents = TaskDocuments.of_task(
            shared, pa.concat_arrays([positives.cast(pa.string()), negatives.cast(pa.string())])
        )
        self.pair_doc = self.documents.task_codes[: len(positives)]
        self.pair_query = np.repeat(self.row_query, np.diff(self.positive_offsets))
        self.query_doc = self.documents.ids_of(self.query_texts)

        # Each process encodes its slice of the queries and of the documents; every process searches all
        # the queries (exchanged: far fewer than documents) over its own documents.
        progress = processes.show_progress(show_progress_bar)
        start, stop = processes.bounds(len(self.query_texts))
        query_slice = EmbeddingFile.encode(
            scratch / f"{task}.queries-{processes.rank}",
            self.query_texts.slice(start, stop - start),
            _encoder(model.encode_query, self.query_prompt, config.batch_size, pool),
            dtype=config.dtype,
            description="Encoding queries",
            show_progress_bar=progress,
        )
        self.queries = query_slice.gather(scratch / f"{task}.queries", len(self.query_texts), processes)
        encode_documents = _encoder(model.encode_document, self.document_prompt, config.batch_size, pool)
        segments, first_ids = [], []
        if external is not None and len(shared):
            first, embedded = external.embedded(
                self.document_prompt, encode_documents, scratch, config.dtype, show_progress_bar, processes
            )
            segments.append(embedded)
            first_ids.append(first)
        start, stop = processes.bounds(len(self.documents.own))
        segments.append(
            EmbeddingFile.encode(
                scratch / f"{task}.documents",
                self.documents.own.slice(start, stop - start),
                encode_documents,
                dtype=config.dtype,
                description="Encoding documents",
                show_progress_bar=progress,
            )
        )
        first_ids.append(len(shared) + start)
        self.corpus = Corpus(segments, first_ids)

        unique_pairs = np.unique(self.pair_query * len(self.documents) + self.pair_doc)
        most_positives = int(np.bincount(unique_pairs // len(self.documents)).max()) if len(unique_pairs) else 0
        self.range_max = config.candidate_range(most_positives)
        self.k = self.range_max + most_positives
        count = len(self.query_texts)
        self.negative_ids = np.full((count, config.num_negatives), -1, dtype=np.int64)
        self.negative_scores = np.full((count, config.num_negatives), -np.inf, dtype=np.float32)
        self.pair_scores = np.full(len(self.pair_doc), np.nan, dtype=np.float32)

    def run(self, report: MiningReport, cross_encoder: CrossEncoder | None, show_progress_bar: bool | None) -> None:
        config, processes = self.config, self.processes
        order = np.argsort(self.pair_query, kind="stable")
        sorted_queries = self.pair_query[order]
        blocks = range(0, len(self.query_texts), config.query_block)
        progress = processes.show_progress(show_progress_bar)
        for number, start in enumerate(tqdm(blocks, desc="Searching", unit="block", disable=progress is False)):
            stop = min(start + config.query_block, len(self.query_texts))
            lo, hi = np.searchsorted(sorted_queries, [start, stop])
            chosen = order[lo:hi]
            pair_query = torch.from_numpy(self.pair_query[chosen] - start).to(self.device)
            pair_doc = torch.from_numpy(self.pair_doc[chosen]).to(self.device)
            queries = torch.from_numpy(self.queries.read(start, stop)).to(self.device)
            found = search(
                queries,
                self.corpus,
                self.k,
                pair_query=pair_query,
                pair_doc=pair_doc,
                corpus_block=config.corpus_block,
            )
            if processes.distributed:
                # Every process's best over its documents; then one process filters the block (round robin).
                parts = zip(*(processes.all_gather(tensor) for tensor in (found.scores, found.ids, found.pair_scores)))
                found = SearchResult.merged([SearchResult(*part) for part in parts], self.k)
                if number % processes.world_size != processes.rank:
                    continue
                found = SearchResult(
                    *(tensor.to(self.device) for tensor in (found.scores, found.ids, found.pair_scores))
                )
            scores, ids, positive_scores = found.scores, found.ids, found.pair_scores
            if cross_encoder is not None:
                scores, positive_scores = self._rescore(cross_encoder, start, ids, pair_query, pair_doc)
            self.pair_scores[chosen] = positive_scores.float().cpu().numpy()
            self._select(report, start, scores, ids, pair_query, pair_doc, positive_scores)
        if processes.distributed:
            self._share_results(report)

    def _share_results(self, report: MiningReport) -> None:
        """Give every process the rows and counts of the blocks the others filtered.

        A row not filtered here holds the fill values (-1, ``-inf``, ``nan`` read as ``-inf``), which every
        found value exceeds, so the maximum over the processes is the filtering process's value.
        """
        processes = self.processes
        self.negative_ids = processes.all_reduce(torch.from_numpy(self.negative_ids), "max").numpy()
        self.negative_scores = processes.all_reduce(torch.from_numpy(self.negative_scores), "max").numpy()
        local = torch.from_numpy(np.nan_to_num(self.pair_scores, nan=-np.inf))
        pair_scores = processes.all_reduce(local, "max").numpy()
        self.pair_scores = np.where(np.isneginf(pair_scores), np.nan, pair_scores).astype(np.float32)
        reasons = list(report.dropped)
        counts = torch.tensor([report.candidates, *(report.dropped[reason] for reason in reasons)], dtype=torch.long)
        totals = [int(count) for count in processes.all_reduce(counts, "sum").tolist()]
        report.candidates = totals[0]
        report.dropped = dict(zip(reasons, totals[1:]))

    def _rescore(
        self,
        cross_encoder: CrossEncoder,
        start: int,
        ids: torch.Tensor,
        pair_query: torch.Tensor,
        pair_doc: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        def predict(query_rows: np.ndarray, doc_ids: np.ndarray) -> torch.Tensor:
            if not len(doc_ids):
                return torch.zeros(0, device=self.device)
            queries = self.query_texts.take(pa.array(query_rows + start)).to_pylist()
            documents = self.documents.texts(doc_ids)
            scores = cross_encoder.predict(
                list(zip(queries, documents)),
                batch_size=self.config.batch_size,
                activation_fn=torch.nn.Sigmoid(),
                convert_to_numpy=True,
                show_progress_bar=False,
            )
            return torch.as_tensor(np.asarray(scores, dtype=np.float32), device=self.device)

        rows, columns = torch.nonzero(ids >= 0, as_tuple=True)
        rescored = torch.full(ids.shape, float("-inf"), device=self.device)
        rescored[rows, columns] = predict(rows.cpu().numpy(), ids[rows, columns].cpu().numpy())
        return rescored, predict(pair_query.cpu().numpy(), pair_doc.cpu().numpy())

    def _select(
        self,
        report: MiningReport,
        start: int,
        scores: torch.Tensor,
        ids: torch.Tensor,
        pair_query: torch.Tensor,
        pair_doc: torch.Tensor,
        positive_scores: torch.Tensor,
    ) -> None:
        config = self.config
        count = scores.size(0)
        valid = ids >= 0
        report.candidates += int(valid.sum())
        # The query's positives (by document id; identical texts share an id) and the query's own text.
        identical = (ids.unsqueeze(2) == _padded_positives(pair_query, pair_doc, count).unsqueeze(1)).any(dim=2)
        if config.drop_query_text:
            query_doc = torch.from_numpy(self.query_doc[start : start + count]).to(self.device).unsqueeze(1)
            identical |= (ids == query_doc) & (query_doc >= 0)
        report.dropped["identical_text"] += int((identical & valid).sum())
        scores = scores.masked_fill(identical | ~valid, float("-inf"))

        lowest_positive = torch.full((count,), float("inf"), device=self.device)
        lowest_positive = lowest_positive.scatter_reduce(0, pair_query, positive_scores.float(), "amin")
        lowest_positive = lowest_positive.unsqueeze(1)
        rules: list[tuple[str, torch.Tensor]] = []
        if config.absolute_margin is not None:
            rules.append(("margin", scores + config.absolute_margin > lowest_positive))
        if config.relative_margin is not None:
            rules.append(("margin", scores > lowest_positive - lowest_positive.abs() * config.relative_margin))
        if config.max_score is not None:
            rules.append(("score_bounds", scores > config.max_score))
        if config.min_score is not None:
            rules.append(("score_bounds", scores < config.min_score))
        for reason, removed in rules:
            removed &= torch.isfinite(scores)
            report.dropped[reason] += int(removed.sum())
            scores = scores.masked_fill(removed, float("-inf"))

        best, position = torch.topk(scores, self.range_max, dim=1)
        window = slice(config.range_min, config.range_min + config.num_negatives)
        best, chosen = best[:, window], ids.gather(1, position)[:, window]
        self.negative_scores[start : start + count, : best.size(1)] = best.float().cpu().numpy()
        self.negative_ids[start : start + count, : chosen.size(1)] = chosen.cpu().numpy()

    def rows(self, dataset: Dataset, cross_encoder: bool, cache_file: Path) -> Dataset:
        """``dataset`` with the mined negatives and the teacher's scores, written to ``cache_file``."""
        found = np.isfinite(self.negative_scores)
        unit_negative = _teacher_to_unit(self.negative_scores, cross_encoder)
        unit_positive = _teacher_to_unit(self.pair_scores, cross_encoder)

        def replace(batch: dict[str, list[Any]], indices: list[int]) -> dict[str, list[Any]]:
            queries = self.row_query[indices]
            keep = found[queries]
            ids = self.negative_ids[queries][keep]
            texts = self.documents.texts(ids)
            counts = keep.sum(axis=1)
            bounds = np.concatenate([[0], np.cumsum(counts)])
            scores = unit_negative[queries][keep]
            return {
                "negatives": [texts[bounds[i] : bounds[i + 1]] for i in range(len(indices))],
                "negative_scores": [scores[bounds[i] : bounds[i + 1]].tolist() for i in range(len(indices))],
                "positive_scores": [
                    unit_positive[self.positive_offsets[row] : self.positive_offsets[row + 1]].tolist()
                    for row in indices
                ],
            }

        return dataset.map(
            replace,
            with_indices=True,
            batched=True,
            batch_size=1_000,
            features=dataset.features,
            cache_file_name=str(cache_file),
            load_from_cache_file=False,
            desc="Writing negatives",
        )


def _why_not_mined(dataset: Dataset, chosen: bool) -> str:
    """Why a task passes through unmined: not among the chosen tasks, empty, or not a mined task type."""
    if chosen:
        return "not chosen"
    if not len(dataset):
        return "no rows"
    return f"{dataset[0]['task_type']} task"


@checked_arguments
def mine_hard_negatives(
    tasks: Mapping[str, Dataset],
    model: SentenceTransformer,
    config: HardNegativeConfig | None = None,
    *,
    corpus: ExternalCorpus | Sequence[str] | pa.Array | None = None,
    cross_encoder: CrossEncoder | None = None,
    task_names: Sequence[str] | None = None,
    teacher_name: str | None = None,
    cross_encoder_name: str | None = None,
    scratch_dir: str | Path | None = None,
    device: str | torch.device | None = None,
    show_progress_bar: bool | None = None,
    processes: EncodingProcesses = ONE_PROCESS,
    pool: dict[str, Any] | None = None,
) -> MiningResult:
    """Mine hard negatives for the retrieval tasks of a unified ``{task: Dataset}`` mapping.

    Args:
        tasks: unified tasks keyed by name (e.g. from :func:`~hf_unified_embed.data.load_unified`).
        model: the teacher that embeds queries (``encode_query``) and documents (``encode_document``),
            with each task's instructions as prompts.
        config: filters and sizes (:class:`HardNegativeConfig`).
        corpus: extra candidate documents for every mined task (e.g. a BEIR corpus); the task's own
            positives and negatives are always candidates.
        cross_encoder: rescore the candidates and positives with it (sigmoid of its logit) before filtering.
        task_names: the tasks to mine (default: every ``retrieval`` task); the others pass through unchanged,
            each with the reason in :attr:`MiningResult.skipped`.
        teacher_name: the teacher's name recorded in the reports (default: its path), written as
            :func:`~hf_unified_embed.utils.locations.public_name` gives it (a Hub id or a folder name).
        cross_encoder_name: the cross-encoder's name recorded in the reports, as ``teacher_name``.
        scratch_dir: where embeddings and the new Arrow files go (default: a fresh temporary folder).
        device: where the search runs (default: the model's device).
        show_progress_bar: ``False`` to hide the progress bars.
        processes: the processes of a launched run that share the work
            (:func:`~hf_unified_embed.utils.distributed_encode.launched_processes`); every one calls this function
            with the same arguments and gets the same result. Default: this process alone.
        pool: a sentence-transformers multi-process pool (``model.start_multi_process_pool(["cuda:0",
            "cuda:1"])``) that encodes the texts of this process; the search stays in this process.

    Returns:
        :class:`MiningResult`: every task (the mined ones with new ``negatives`` and scores) and a
        report per mined task.

    Raises:
        UsageError: a chosen task that is not in ``tasks`` or not a retrieval task, or no task to mine.
    """
    for name, dataset in tasks.items():  # the unified columns, before any row is read
        check_columns(dataset.column_names, task=name)
    config = config or HardNegativeConfig()
    external = (
        ExternalCorpus.from_texts(corpus) if corpus is not None and not isinstance(corpus, ExternalCorpus) else corpus
    )
    if task_names is None:
        selected = [
            name for name, dataset in tasks.items() if len(dataset) and dataset[0]["task_type"] in MINED_TASK_TYPES
        ]
    else:
        selected = list(task_names)
        for name in selected:
            if name not in tasks:
                raise UsageError(f"task {shown(name)} is not in the data; tasks are {sorted(tasks)}")
            task_type = tasks[name][0]["task_type"] if len(tasks[name]) else None
            if task_type not in MINED_TASK_TYPES:
                raise UsageError(
                    f"task {shown(name)} is a {task_type} task; only {list(MINED_TASK_TYPES)} tasks are mined"
                )
    if not selected:
        raise UsageError(f"no task to mine: none of {sorted(tasks)} is a {' or '.join(MINED_TASK_TYPES)} task")
    scratch = (
        Path(scratch_dir)
        if scratch_dir
        else Path(tempfile.mkdtemp(prefix="mine-", dir=get_temporary_cache_files_directory()))
    )
    scratch.mkdir(parents=True, exist_ok=True)
    search_device = torch.device(device) if device is not None else model.device
    # The reports go into the dataset card: models and corpus by Hub id or name, never by a local path.
    teacher = public_name(teacher_name or str(getattr(model, "name_or_path", None) or type(model).__name__))
    reranker = None
    if cross_encoder is not None:
        reranker = public_name(
            cross_encoder_name or str(getattr(cross_encoder, "name_or_path", None) or type(cross_encoder).__name__)
        )
    result = MiningResult(DatasetDict(), {})
    for name, dataset in tasks.items():
        if name not in selected:
            result.tasks[name] = dataset
            result.skipped[name] = _why_not_mined(dataset, chosen=task_names is not None)
            continue
        miner = _TaskMiner(
            name, dataset, model, config, external, scratch, search_device, show_progress_bar, processes, pool
        )
        report = MiningReport(
            teacher=teacher,
            cross_encoder=reranker,
            num_negatives=config.num_negatives,
            rows=len(dataset),
            queries=len(miner.query_texts),
            corpus=len(miner.documents),
            settings={
                **config.settings(),
                "range_max": miner.range_max,
                "corpus": public_name(external.source) if external and external.source else None,
            },
        )
        miner.run(report, cross_encoder, show_progress_bar)
        found = np.isfinite(miner.negative_scores).sum(axis=1)
        report.negatives = int(found.sum())
        report.short_queries = int((found < config.num_negatives).sum())
        result.tasks[name] = miner.rows(dataset, cross_encoder is not None, scratch / f"{name}.arrow")
        result.reports[name] = report
    return result
