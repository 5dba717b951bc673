"""Running an evaluation suite: one evaluator per entry, a sequential evaluator, and :func:`run_suite`."""

from __future__ import annotations

import dataclasses
import random
import statistics
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from datasets import Dataset
from sentence_transformers.sentence_transformer.evaluation import SequentialEvaluator
from tqdm.auto import tqdm

from hf_unified_embed.evaluation.diagnostics import EmbeddingSpaceDiagnostics, embedding_space_diagnostics
from hf_unified_embed.evaluation.evaluators import SharedEncodingMixin
from hf_unified_embed.evaluation.results import EntryResult, SuiteResults
from hf_unified_embed.evaluation.suite import DiagnosticsConfig, EvaluationSuite, SuiteEntry, load_suite
from hf_unified_embed.evaluation.suite_rows import load_entry_rows
from hf_unified_embed.utils.arguments import checked_arguments
from hf_unified_embed.utils.distributed_encode import ONE_PROCESS, EncodingProcesses
from hf_unified_embed.utils.encoding_progress import describe_duration, seconds_per_text

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.evaluation.evaluator import BaseEvaluator


def build_evaluators(
    suite: EvaluationSuite | Mapping[str, Any] | Sequence[Mapping[str, Any]] | str | Path,
    data_root: str | Path | None = None,
) -> dict[str, BaseEvaluator]:
    """One evaluator per suite entry, keyed by entry name, in suite order."""
    loaded = load_suite(suite, data_root)
    rows = load_entry_rows(loaded)
    return {
        entry.name: entry.evaluation_kind.evaluator(
            entry, rows[entry.name], batch_size=loaded.batch_size, data_root=loaded.data_root
        )
        for entry in loaded.entries
    }


def build_sequential_evaluator(
    suite: EvaluationSuite | Mapping[str, Any] | Sequence[Mapping[str, Any]] | str | Path,
    data_root: str | Path | None = None,
) -> SequentialEvaluator:
    """The whole suite as one evaluator for ``SentenceTransformerTrainer(evaluator=...)``.

    Its ``sequential_score`` (the metric ``metric_for_best_model="eval_sequential_score"`` selects) is
    the mean of the entries' primary metrics.
    """
    return SequentialEvaluator(build_evaluators(suite, data_root).values(), main_score_function=statistics.fmean)


@checked_arguments
def run_suite(
    model: SentenceTransformer,
    suite: EvaluationSuite | Mapping[str, Any] | Sequence[Mapping[str, Any]] | str | Path,
    *,
    data_root: str | Path | None = None,
    diagnostics: bool | None = None,
    output_path: str | None = None,
    show_progress_bar: bool = True,
    rows: Mapping[str, Dataset] | None = None,
    processes: EncodingProcesses = ONE_PROCESS,
    pool: dict[str, Any] | None = None,
) -> SuiteResults:
    """Evaluate ``model`` on every entry of ``suite``.

    Args:
        model: the sentence-transformers model.
        suite: an :class:`EvaluationSuite`, its dict / list form or a YAML path.
        data_root: overrides the suite's ``data_root``.
        diagnostics: compute the CoDiEmb §4 diagnostics; default as the suite says.
        output_path: where the evaluators write their CSV files (none by default).
        show_progress_bar: a tqdm bar over the suite entries.
        rows: the entries' rows when already read (:func:`load_entry_rows`, which a command calls before it
            loads the model, so that a bad row is reported first); read here otherwise.
        processes: the processes of a launched run
            (:func:`~hf_unified_embed.utils.distributed_encode.launched_processes`), every one running this
            function alike: each encodes its slice of every entry's texts and all get the same metrics.
        pool: a sentence-transformers multi-process pool (``model.start_multi_process_pool(devices)``) that
            encodes the texts of this process.

    Returns:
        :class:`SuiteResults`: per-entry metrics, a flat table, the diagnostics and ``model-index``
        entries (``huggingface_hub.EvalResult``) for the model card.

    Example::

        from sentence_transformers import SentenceTransformer
        from hf_unified_embed.evaluation import run_suite

        results = run_suite(SentenceTransformer("all-MiniLM-L6-v2"), "examples/suites/shared.yaml")
        print(results.format_table())
        card_yaml = {"model-index": results.model_index()}
    """
    loaded = load_suite(suite, data_root)
    rows = load_entry_rows(loaded) if rows is None else rows
    settings = loaded.diagnostics if diagnostics is not False else None
    if diagnostics and settings is None:
        settings = DiagnosticsConfig()
    from hf_unified_embed.training.instruction_fit import check_suite_prompts

    check_suite_prompts(loaded, model)  # a prompt that leaves no room for the text, before any entry is scored
    progress = show_progress_bar and processes.is_main
    evaluators = {
        entry.name: entry.evaluation_kind.evaluator(
            _by_prompt_name(entry, model),
            rows[entry.name],
            batch_size=loaded.batch_size,
            data_root=loaded.data_root,
        )
        for entry in loaded.entries
    }
    if progress:
        announce_duration(model, loaded, evaluators, rows, processes)
    entries: list[EntryResult] = []
    for entry in tqdm(loaded.entries, desc="Evaluating", unit="set", disable=not progress):
        kind = entry.evaluation_kind
        evaluator = evaluators[entry.name]
        if isinstance(evaluator, SharedEncodingMixin):
            evaluator.share_encoding(processes, pool, show_encoding_progress=progress)
        elif hasattr(evaluator, "show_encoding_progress"):
            evaluator.show_encoding_progress = progress
        raw = evaluator(model, output_path=output_path)
        assert isinstance(raw, dict), "every suite evaluator returns a metrics dict"
        prefix = f"{entry.name}_"
        metrics = {key.removeprefix(prefix): float(value) for key, value in raw.items()}
        space: EmbeddingSpaceDiagnostics | None = None
        if settings is not None and entry.diagnostics:
            texts = kind.texts(evaluator, rows[entry.name])
            if len(texts) > settings.max_texts:
                texts = random.Random(settings.seed).sample(texts, settings.max_texts)
            space = embedding_space_diagnostics(model, texts, batch_size=settings.batch_size, rtol=settings.rtol)
        entries.append(
            EntryResult(
                name=entry.name,
                kind=kind.name,
                metrics=metrics,
                primary_metric=str(evaluator.primary_metric).removeprefix(prefix),
                num_examples=kind.num_examples(evaluator, rows[entry.name]),
                split=entry.split,
                dataset_id=entry.dataset_id,
                task_name=evaluator.description,
                diagnostics=space,
                metric_patterns=kind.reported_metrics,
            )
        )
    model_name = getattr(model.model_card_data, "model_name", None) or getattr(model.model_card_data, "model_id", None)
    return SuiteResults(entries=entries, suite_name=loaded.name, model_name=model_name or "model")


def _by_prompt_name(entry: SuiteEntry, model: Any) -> SuiteEntry:
    """``entry`` encoding a prompt text the model has by that prompt's name, as a user of the saved folder does."""
    from hf_unified_embed.training.instruction_fit import with_prompt_names

    options = with_prompt_names(entry.evaluator, model, f"entry {entry.name}")
    return entry if options == entry.evaluator else dataclasses.replace(entry, evaluator=options)


#: Below this many texts a suite runs in about a minute even on a CPU: no estimate is measured.
ESTIMATE_MIN_TEXTS = 1_000
#: Texts timed for the estimate, drawn from the whole suite and encoded as one batch.
ESTIMATE_SAMPLE = 8


def announce_duration(
    model: SentenceTransformer,
    suite: EvaluationSuite,
    evaluators: Mapping[str, BaseEvaluator],
    rows: Mapping[str, Dataset],
    processes: EncodingProcesses = ONE_PROCESS,
) -> float | None:
    """On a CPU, before a suite of at least :data:`ESTIMATE_MIN_TEXTS` texts: print (stderr, one line) how many
    texts its sets encode and about how long that takes, from the time a small sample of them took.

    The sample is one batch, padded to its longest text, while the run encodes batches of texts of about
    one length: the time is scaled by the characters encoded (the sample's padded ones, every text's own).

    Returns:
        The estimate in seconds, or ``None`` where none was made (an accelerator, a short suite).
    """
    if getattr(model.device, "type", "cpu") != "cpu":
        return None
    texts = [
        text
        for entry in suite.entries
        for text in entry.evaluation_kind.texts(evaluators[entry.name], rows[entry.name])
    ]
    if len(texts) < ESTIMATE_MIN_TEXTS:
        return None
    sample = random.Random(0).sample(texts, ESTIMATE_SAMPLE)
    model.encode(min(sample, key=len), show_progress_bar=False)  # the first call's one-time setup, not timed
    per_text = seconds_per_text(
        lambda part: model.encode(list(part), batch_size=len(part), show_progress_bar=False), sample
    )
    padded = max(len(text) for text in sample) or 1
    seconds = per_text / padded * sum(len(text) for text in texts) / processes.world_size
    sets = f"{len(suite.entries)} set" + ("s" if len(suite.entries) != 1 else "")
    print(
        f"evaluate: {sets}, {len(texts):,} texts to encode: about {describe_duration(seconds)} on this CPU "
        f"(timed on {ESTIMATE_SAMPLE} of them)",
        file=sys.stderr,
        flush=True,
    )
    return seconds
