"""Results of an evaluation suite: per-set metrics, a flat table, diagnostics and ``model-index``.

``model-index`` entries follow the Hub's schema through ``huggingface_hub.EvalResult`` with the
task types sentence-transformers itself writes into model cards (``semantic-similarity``,
``information-retrieval``, ``reranking``, ``binary-classification``), so a card built from these
results reads like one built by ``SentenceTransformerTrainer``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from huggingface_hub import EvalResult
from huggingface_hub.repocard_data import eval_results_to_model_index

from hf_unified_embed.errors import shown
from hf_unified_embed.evaluation.diagnostics import DIAGNOSTIC_METRICS, EmbeddingSpaceDiagnostics
from hf_unified_embed.utils.outputs import JSON_MARKER, StagedOutput
from hf_unified_embed.utils.redaction import redact

#: Digits of the metric values cards show (``model-index``); the JSON results keep full precision.
CARD_DIGITS = 4


@dataclass
class EntryResult:
    """The outcome of one suite entry.

    ``metric_patterns`` are the kind's ``reported_metrics``: regular expressions over the metric keys
    shown in the table and the model-index after the primary one (the evaluators return more; all
    are in ``metrics``).
    """

    name: str
    kind: str
    metrics: dict[str, float]
    primary_metric: str
    num_examples: int
    split: str
    task_name: str
    dataset_id: str | None = None
    diagnostics: EmbeddingSpaceDiagnostics | None = None
    metric_patterns: tuple[str, ...] = ()

    @property
    def primary_value(self) -> float:
        return self.metrics[self.primary_metric]

    @property
    def reported_metrics(self) -> dict[str, float]:
        """The kind's headline metrics: the primary one, then those of ``metric_patterns`` in that order."""
        keys = [self.primary_metric]
        for pattern in self.metric_patterns:
            keys += sorted(
                (key for key in self.metrics if re.fullmatch(pattern, key) and key not in keys),
                key=lambda key: int(key.rsplit("@", 1)[1]) if "@" in key else 0,
            )
        return {key: self.metrics[key] for key in keys}

    def eval_results(self) -> list[EvalResult]:
        task_type = self.task_name.lower().replace(" ", "-")
        return [
            EvalResult(
                task_type=task_type,
                task_name=self.task_name,
                dataset_type=self.dataset_id or self.name,
                dataset_name=self.name,
                dataset_split=self.split,
                metric_type=key,
                metric_name=key.replace("_", " ").title(),
                metric_value=round(value, CARD_DIGITS),
            )
            for key, value in self.reported_metrics.items()
        ]

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "split": self.split,
            "dataset_id": self.dataset_id,
            "num_examples": self.num_examples,
            "primary_metric": self.primary_metric,
            "metrics": self.metrics,
            "diagnostics": self.diagnostics.to_dict() if self.diagnostics else None,
        }


@dataclass
class SuiteResults:
    """Everything :func:`~hf_unified_embed.evaluation.run_suite` measured."""

    entries: list[EntryResult]
    suite_name: str = "evaluation-suite"
    model_name: str = "model"
    extra: dict[str, Any] = field(default_factory=dict)

    def __getitem__(self, name: str) -> EntryResult:
        for entry in self.entries:
            if entry.name == name:
                return entry
        raise KeyError(f"no evaluation {shown(name)}; have {[e.name for e in self.entries]}")

    @property
    def table(self) -> list[dict[str, Any]]:
        """One row per (evaluation, reported metric): ``evaluation, kind, metric, value, primary``."""
        return [
            {"evaluation": e.name, "kind": e.kind, "metric": key, "value": value, "primary": key == e.primary_metric}
            for e in self.entries
            for key, value in e.reported_metrics.items()
        ]

    @property
    def diagnostics(self) -> dict[str, EmbeddingSpaceDiagnostics]:
        return {e.name: e.diagnostics for e in self.entries if e.diagnostics is not None}

    def eval_results(self) -> list[EvalResult]:
        return [result for entry in self.entries for result in entry.eval_results()]

    def model_index(self, model_name: str | None = None) -> list[dict[str, Any]]:
        """The card's ``model-index`` YAML value (see ``huggingface_hub.ModelCardData(eval_results=...)``)."""
        return eval_results_to_model_index(model_name or self.model_name, self.eval_results())

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model_name,
            "suite": self.suite_name,
            "results": {e.name: e.to_dict() for e in self.entries},
            "table": self.table,
            "model-index": self.model_index(),
            **self.extra,
        }

    def format_table(self, digits: int = 4) -> str:
        """Plain-text tables: the reported metrics (``*`` marks the primary), then the diagnostics."""
        rows = [["evaluation", "kind", "n", "metric", "value"]]
        for e in self.entries:
            for key, value in e.reported_metrics.items():
                star = "*" if key == e.primary_metric else ""
                rows.append([e.name, e.kind, str(e.num_examples), key + star, f"{value:.{digits}f}"])
        text = aligned_table(rows)
        if self.diagnostics:
            header = ["evaluation", *DIAGNOSTIC_METRICS, "texts"]
            diag_rows = [header] + [
                [name, *(f"{getattr(d, metric):.{digits}g}" for metric in DIAGNOSTIC_METRICS), str(d.num_texts)]
                for name, d in self.diagnostics.items()
            ]
            text += "\n\nEmbedding-space diagnostics (CoDiEmb §4; mean over texts)\n" + aligned_table(diag_rows)
        return text

    def to_json(self) -> str:
        """:meth:`to_dict` as JSON, secrets redacted (:func:`hf_unified_embed.utils.redaction.redact`).

        Evaluation names are keys of ``results`` but are data, not field names, so each entry's result
        is redacted on its own (an evaluation called ``hotkeys`` keeps its metrics). The first key,
        ``"written_by": "hf-unified-embed"`` (:data:`~hf_unified_embed.utils.outputs.JSON_MARKER`), marks the
        file as the tool's own: ``--overwrite`` replaces only such a file.
        """
        data = self.to_dict()
        results = {name: redact(result) for name, result in data["results"].items()}
        rest = redact({key: value for key, value in data.items() if key != "results"})
        key, value = JSON_MARKER
        content = {key: value, **{name: results if name == "results" else rest[name] for name in data}}
        return json.dumps(content, indent=2) + "\n"

    def save_json(self, path: str | Path, overwrite: bool = False) -> Path:
        """Write :meth:`to_json` to ``path`` through :class:`~hf_unified_embed.utils.outputs.StagedOutput`.

        Raises:
            OutputExistsError: ``path`` exists and is not empty, and ``overwrite`` is false.
            OutputError: ``path`` is a folder, its folder cannot be written, or ``path`` exists and was not
                written by this tool (:func:`~hf_unified_embed.utils.outputs.check_output`).
        """
        with StagedOutput(path, overwrite=overwrite, kind="file") as stage:
            stage.path.write_text(self.to_json(), encoding="utf-8")
        return Path(path)


def aligned_table(rows: list[list[str]]) -> str:
    """``rows`` (the first is the header) as left-aligned columns, a rule of dashes under the header."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)
