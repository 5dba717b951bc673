"""Model cards of trained models: sentence-transformers' own card plus the unified-training sections.

:class:`UnifiedModelCardData` subclasses ``SentenceTransformerModelCardData``, so the trainer fills
everything it normally does (datasets, losses with configs, hyper-parameters, logs, citations). On
top it renders ``cards/model_card.md.j2`` — the unified training data, the curriculum with its
plots, the loss per task type, the sampler and the evaluation suite (also as ``model-index``)
— inserted before sentence-transformers' "Training Details" section.

These behaviours differ from the stock card on purpose:

* dataset and base-model ids are kept when the Hub cannot be reached (``HF_HUB_OFFLINE=1`` or
  ``local_files_only``); the stock card silently drops ids it cannot look up;
* evaluation results from :mod:`hf_unified_embed.evaluation` join the ``model-index`` metadata
  (one entry per evaluation set), and every metric there is rounded to 4 digits;
* the widget and usage examples are texts of the unified rows — a query with its positive and hard
  negatives — where the stock card would take every string column (task names, instructions);
* the usage snippet loads the folder the card is saved in (``./<folder name>``, see
  :mod:`hf_unified_embed.hub.card_ids`) instead of sentence-transformers' placeholder id, so it runs as
  written; ``push`` (and a recipe's ``hub.repo_id``) puts the repository id in the uploaded copy. When
  the model carries named prompts (its training instructions), a table after the snippet names each.
"""

from __future__ import annotations

import hashlib
import json
import random
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from huggingface_hub.constants import HF_HUB_OFFLINE
from sentence_transformers.sentence_transformer.model_card import SentenceTransformerModelCardData

from hf_unified_embed.evaluation.results import CARD_DIGITS
from hf_unified_embed.hub.card_ids import HUB_COMMENT, LOCAL_COMMENT, PLACEHOLDER, local_model_id
from hf_unified_embed.hub.card_usage import loader_arguments, prompts_markdown
from hf_unified_embed.hub.consumers import consumer_needs
from hf_unified_embed.schema import UNIFIED_COLUMNS
from hf_unified_embed.utils.templates import template_path

if TYPE_CHECKING:
    from datasets import DatasetDict
    from torch import nn

    from hf_unified_embed.recipe.train_recipe import TrainRecipe

_SECTIONS_TEMPLATE = "model_card.md.j2"
_INSERT_BEFORE = "## Training Details"
#: As in sentence-transformers' card: examples, texts per example, and rows sampled per task to pick from.
WIDGET_EXAMPLES = 5
WIDGET_TEXTS = 4
WIDGET_SAMPLE_ROWS = 1_000
_STOCK_INSTALL = "pip install -U sentence-transformers"
_INSTALL = "pip install -U {{ consumer_packages | join(' ') if consumer_packages else 'sentence-transformers' }}"


def composed_template_path() -> Path:
    """sentence-transformers' card template with this package's sections inserted.

    ``huggingface_hub.ModelCard.from_template`` renders a single file without a Jinja loader, so the
    two templates are joined as text once and cached by content hash.
    """
    base = Path(SentenceTransformerModelCardData.template_path).read_text(encoding="utf-8")
    sections = template_path(_SECTIONS_TEMPLATE).read_text(encoding="utf-8")
    head, marker, tail = base.partition(_INSERT_BEFORE)
    composed = f"{head}{sections}\n{marker}{tail}" if marker else f"{base}\n{sections}"
    # What a user installs is what the saved folder needs (peft for an adapter, ...), not always the same line.
    composed = composed.replace(_STOCK_INSTALL, _INSTALL)
    digest = hashlib.sha256(composed.encode()).hexdigest()[:16]
    path = Path(tempfile.gettempdir()) / "hf_unified_embed" / f"model_card_{digest}.md"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".tmp")
        partial.write_text(composed, encoding="utf-8")
        partial.replace(path)
    return path


@dataclass
class UnifiedModelCardData(SentenceTransformerModelCardData):
    """Card data of a model trained with hf-unified-embed (merged models get their own card, see merge.card).

    Args:
        unified_tasks: one dict per training task: ``task``, ``task_type``, ``rows``,
            ``positives_per_row``, ``negatives_per_row``, ``query_instruction``, ``document_instruction``.
        unified_dataset_id: Hub id (or local path) of the unified dataset the tasks come from.
        curriculum: the curriculum plan summary: ``task_order``, ``score``, ``method`` and ``plots``
            (paths relative to the model folder).
        task_losses: per task type, the loss class name, its ``get_config_dict()`` and the ``tasks`` it
            trains; a type whose tasks have different settings has one entry per setting.
        sampler: the batch sampler's settings.
        evaluation: rows ``{"name", "kind", "metric", "value", "split"}`` from the evaluation suite.
        model_index_results: ``model-index`` ``results`` entries for the YAML metadata.
        diagnostics: embedding-space diagnostics per evaluation set (CoDiEmb §4).
        base_model_id: the Hub id of the base model, kept even when offline.
        base_model_relation: ``"adapter"`` when the folder holds a LoRA adapter of ``base_model_id``.
    """

    unified_tasks: list[dict[str, Any]] = field(default_factory=list)
    unified_dataset_id: str | None = None
    curriculum: dict[str, Any] | None = None
    task_losses: dict[str, dict[str, Any]] = field(default_factory=dict)
    sampler: dict[str, Any] | None = None
    evaluation: list[dict[str, Any]] = field(default_factory=list)
    model_index_results: list[dict[str, Any]] = field(default_factory=list)
    diagnostics: dict[str, dict[str, float]] = field(default_factory=dict)
    base_model_id: str | None = None
    base_model_relation: str | None = None

    template_path: Path = field(default_factory=composed_template_path, init=False, repr=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.add_tags("hf-unified-embed")
        if self.unified_dataset_id and not Path(self.unified_dataset_id).exists():
            self._keep_dataset_id(self.unified_dataset_id)
        if self.base_model_id:
            self.base_model = self.base_model_id

    @property
    def offline(self) -> bool:
        return bool(self.local_files_only or HF_HUB_OFFLINE)

    def _keep_dataset_id(self, dataset_id: str) -> None:
        if dataset_id not in self.datasets:
            self.datasets.append(dataset_id)

    def validate_datasets(
        self, dataset_list: list[dict[str, Any]], infer_languages: bool | None = None
    ) -> list[dict[str, Any]]:
        if not self.offline:
            return super().validate_datasets(dataset_list, infer_languages)
        # The stock card deletes ids it cannot look up; offline nothing can be looked up, so keep them.
        for dataset in dataset_list:
            if "id" in dataset:
                dataset.setdefault("name", dataset["id"])
                self._keep_dataset_id(dataset["id"])
        return dataset_list

    def set_widget_examples(self, dataset: Any) -> None:
        """Widget and usage examples from the texts of unified rows (other datasets: the stock way).

        As sentence-transformers does: :data:`WIDGET_EXAMPLES` examples over randomly chosen tasks, each
        from one of the shortest of up to :data:`WIDGET_SAMPLE_ROWS` sampled rows — its query, then its
        positive and hard negatives (other rows' positives when it has fewer) in random order.
        """
        from datasets import Dataset, DatasetDict

        tasks = {"dataset": dataset} if isinstance(dataset, Dataset) else dataset
        if not isinstance(tasks, (dict, DatasetDict)) or not all(
            isinstance(task, Dataset) and set(UNIFIED_COLUMNS) <= set(task.column_names) for task in tasks.values()
        ):
            super().set_widget_examples(dataset)
            return
        self.widget = []
        chosen = [name for name in random.choices(list(tasks), k=WIDGET_EXAMPLES) if len(tasks[name])]
        for name in dict.fromkeys(chosen):
            task = tasks[name].select_columns(["query", "positives", "negatives"])
            rows = task.select(random.sample(range(len(task)), k=min(WIDGET_SAMPLE_ROWS, len(task)))).to_list()
            rows.sort(key=lambda row: len(row["query"]) + sum(map(len, row["positives"][:1] + row["negatives"][:2])))
            spare = [text for row in rows for text in row["positives"][:1]]
            for row in rows[: chosen.count(name)]:
                texts = list(dict.fromkeys([row["query"], *row["positives"], *row["negatives"]]))[:WIDGET_TEXTS]
                texts += [text for text in dict.fromkeys(spare) if text not in texts][: WIDGET_TEXTS - len(texts)]
                if len(texts) < 2:
                    continue
                # sentence-transformers' own widget examples have this shape (its annotation says str values).
                example: dict[str, Any] = {
                    "source_sentence": texts[0],
                    "sentences": random.sample(texts[1:], len(texts) - 1),
                }
                self.widget.append(example)
                self.usage_examples = texts

    def generate_usage_snippet(self) -> str:
        """sentence-transformers' snippet, loading this folder until a Hub id is known, and the prompt table."""
        snippet = super().generate_usage_snippet()
        model_id = self.model_id or PLACEHOLDER
        if not self.model_id and self.save_dir:
            model_id = local_model_id(self.save_dir)
            snippet = snippet.replace(f'"{PLACEHOLDER}"', f'"{model_id}"').replace(HUB_COMMENT, LOCAL_COMMENT)
        if self.save_dir:
            needs = consumer_needs(self.save_dir)
            snippet = snippet.replace(f'("{model_id}")', f"({loader_arguments(model_id, needs)})")
        table = prompts_markdown(self.model) if self.model is not None else ""
        # The stock template goes on right after the snippet: a blank line ends the table.
        return f"{snippet}\n\n{table}\n" if table else snippet

    def set_base_model(self, model_id: str, revision: str | None = None) -> bool:
        if self.base_model_id:
            self.base_model = self.base_model_id
            return True
        return super().set_base_model(model_id, revision)

    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        # The folder is complete when its card is written (sentence-transformers saves the card last).
        data["consumer_packages"] = consumer_needs(self.save_dir).packages if self.save_dir else []
        if self.model_index_results:
            index = data.get("model-index") or [{"name": self.model_name or "model", "results": []}]
            # Running the suite also stored each evaluator's metrics in the stock card data, under the
            # entry name as dataset type: keep one entry per evaluation set, the suite's.
            suite_sets = {result.get("dataset", {}).get("name") for result in self.model_index_results}
            stock = [r for r in index[0].get("results", []) if r.get("dataset", {}).get("type") not in suite_sets]
            index[0]["results"] = stock + list(self.model_index_results)
            data["model-index"] = index
        for entry in data.get("model-index") or []:
            for result in entry.get("results", []):
                for metric in result.get("metrics", []):
                    if isinstance(metric.get("value"), float):
                        metric["value"] = round(metric["value"], CARD_DIGITS)
        if self.datasets:
            data["datasets"] = list(self.datasets)
        self._cached_dict = data
        return data

    def to_yaml(self, line_break: Any = None, original_order: list[str] | None = None) -> str:
        text = super().to_yaml(line_break=line_break)
        # sentence-transformers writes only the keys it knows; the Hub reads this one for adapters.
        return f"{text}\nbase_model_relation: {self.base_model_relation}" if self.base_model_relation else text


def card_data(
    recipe: TrainRecipe, tasks: DatasetDict, rows: Mapping[str, int | None] | None = None
) -> UnifiedModelCardData:
    """The card data a recipe run starts from: base model, data ids, and per task its source and license.

    ``rows``: each task's row count where ``tasks`` holds only its first rows (a streaming run).
    """
    from hf_unified_embed.data.hub_layout import task_summary
    from hf_unified_embed.data.provenance import UNKNOWN, card_license, card_notes, notes_of

    notes = {name: card_notes(notes_of(dataset)) for name, dataset in tasks.items()}
    unified_tasks = [
        {
            "task": name,
            **card_notes(task_summary(dataset)),  # the instructions are free text: bounded like the notes
            **({"rows": rows.get(name)} if rows is not None else {}),
            "source": notes[name].get("source", UNKNOWN),
            "license": notes[name].get("license", UNKNOWN),
        }
        for name, dataset in tasks.items()
    ]
    dataset_id = None if Path(recipe.data.path).exists() else recipe.data.path
    return UnifiedModelCardData(
        # The data's licenses bind the model: their one shared license, else "other" with the per-task table.
        license=card_license(notes.values()) if any(notes.values()) else None,
        model_name=recipe.model_name,
        # The saved card names its folder; a push (the recipe's hub.repo_id included) names the repository.
        base_model_id=recipe.base_model_id,
        unified_dataset_id=dataset_id,
        unified_tasks=unified_tasks,
        train_datasets=[{"name": name, **({"id": dataset_id} if dataset_id else {})} for name in tasks],
        local_files_only=True,
    )


def task_loss_table(tasks: DatasetDict, losses: dict[str, nn.Module]) -> dict[str, dict[str, Any]]:
    """The card's loss table: one row per task type, naming its tasks; a type whose tasks train with
    different losses or settings (a per-task override in the recipe) gets one row per setting."""
    settings: dict[str, dict[str, dict[str, Any]]] = {}
    for name, loss in losses.items():
        task_type = tasks[name][0]["task_type"] if len(tasks[name]) else "unknown"
        get_config = getattr(loss, "get_config_dict", None)
        config = json.loads(json.dumps(get_config() if callable(get_config) else {}, default=str))
        key = json.dumps([type(loss).__name__, config], sort_keys=True)
        row = settings.setdefault(task_type, {}).setdefault(key, {"name": type(loss).__name__, "config": config})
        row.setdefault("tasks", []).append(name)
    table = {}
    for task_type, by_setting in settings.items():
        for row in by_setting.values():
            table[task_type if len(by_setting) == 1 else f"{task_type} ({', '.join(row['tasks'])})"] = row
    return table


def describe_training(
    card: UnifiedModelCardData,
    tasks: DatasetDict,
    losses: dict[str, nn.Module],
    sampler: dict[str, Any],
    curriculum: dict[str, Any] | None,
) -> None:
    """Fill the card's training sections once the run has trained: losses per task type, sampler, curriculum."""
    card.task_losses = task_loss_table(tasks, losses)
    card.sampler = sampler
    card.curriculum = curriculum


def attach_evaluation(card: Any, results: Any) -> None:
    """Put suite results (table, ``model-index``, diagnostics) into a :class:`UnifiedModelCardData`."""
    card.evaluation = [
        {"name": row["evaluation"], "kind": row["kind"], "metric": row["metric"], "value": row["value"]}
        for row in results.table
    ]
    card.model_index_results = [result for index in results.model_index() for result in index.get("results", [])]
    card.diagnostics = {name: diag.to_dict() for name, diag in results.diagnostics.items()}
