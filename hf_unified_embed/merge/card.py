"""README.md of a merged model, rendered from ``cards/merged_model_card.md.j2``.

The YAML front matter is what the Hub reads for merges: ``base_model`` lists the merged inputs by Hub
id — each input's own id when it is known (given in the merge config, a Hub model or a copy of one, the
``hub.repo_id`` of the recipe that trained it, the id its own card loads), else the ids it stands for
(:mod:`hf_unified_embed.merge.model_ids`, such as the base a local run was trained from); never a local
path — with ``base_model_relation: merge``, ``library_name: sentence-transformers``, tags ``merge``,
``hf-unified-embed`` and the method, ``model-index`` when evaluation results are given (metric values
rounded to 4 digits), the inputs' ``datasets``, and a ``license``:

* the merge config's ``card.license`` when given;
* else the inputs' own licence when every input's card names the same one (:func:`merged_license`);
* else ``other``, and the body names each input's licence — with the per-task sources and licences of
  an input whose own card says ``other`` because of its training data — so a reader sees what binds
  the merged weights. No input with a known licence: no ``license`` key.

Inputs appear in the body by Hub id or folder name, never by path. The usage snippet loads the merged
folder as ``./<folder name>`` unless the card was given the model's Hub id (``push`` puts the
repository id there, see :mod:`hf_unified_embed.hub.card_ids`), passes ``trust_remote_code=True`` when the
folder needs it, and the model's named prompts follow it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from huggingface_hub import EvalResult
from huggingface_hub.repocard_data import eval_results_to_model_index

from hf_unified_embed.hub.card_ids import HUB_COMMENT, LOCAL_COMMENT
from hf_unified_embed.hub.card_usage import loader_arguments, prompts_markdown
from hf_unified_embed.hub.consumers import ConsumerNeeds, consumer_needs
from hf_unified_embed.merge.checks import is_mergeable
from hf_unified_embed.merge.loader import LazyCheckpoint
from hf_unified_embed.merge.merge_config import CardConfig
from hf_unified_embed.merge.methods import MergeMethod
from hf_unified_embed.merge.model_ids import RUN_RECIPE_FILE, is_hub_id
from hf_unified_embed.utils.redaction import redact
from hf_unified_embed.utils.templates import render_template

TEMPLATE = "merged_model_card.md.j2"


#: Digits of metric values in the card's tables and ``model-index``.
METRIC_DIGITS = 4


@dataclass
class CardInput:
    """How one input appears in the card and the recipe.

    Attributes:
        path: how the input is named: its folder name, or the Hub id of the model it is a copy of.
        hub_ids: the Hub ids it stands for (its own, or the base it was trained from).
        given_id: the Hub id of the model the input *is* (given in the merge config, or a copy of it).
        roles: what the method uses it for.
    """

    path: str
    hub_ids: list[str] = field(default_factory=list)
    given_id: str | None = None
    roles: list[str] = field(default_factory=list)

    def markdown(self) -> str:
        if self.given_id:
            return _link(self.given_id)
        text = f"`{self.path}`"
        if self.hub_ids:
            text += " (a fine-tune of " + ", ".join(_link(model_id) for model_id in self.hub_ids) + ")"
        return text


def _link(model_id: str) -> str:
    return f"[{model_id}](https://huggingface.co/{model_id})"


#: The Hub's licence for "see the card": what a merge of differently licensed inputs gets.
OTHER = "other"
#: The columns of a trained card's data table that say where each task's data comes from and its licence.
_DATA_COLUMNS = ("Task", "Source", "License")


@dataclass
class InputCard:
    """What an input's own card (and training recipe) says that the merged card carries over.

    Attributes:
        license: the ``license`` of its card's metadata.
        data_licenses: rows ``{"task", "source", "license"}`` of its card's training-data table (a model trained
            here: why its licence is what it is).
        datasets: the ``datasets`` of its card's metadata.
        own_id: the Hub id of the model itself (not of its base): its training recipe's ``hub.repo_id``, or the
            id its card's usage snippet loads.
    """

    license: str | None = None
    data_licenses: list[dict[str, str]] = field(default_factory=list)
    datasets: list[str] = field(default_factory=list)
    own_id: str | None = None


def merged_license(licenses: Sequence[str | None]) -> str | None:
    """The licence of a merge of inputs with ``licenses`` (``None``: the input's card names none).

    Returns:
        The one licence when every input names the same; ``None`` when no input names one; else ``other``
        (inputs disagree, or some name none: the merge cannot claim a licence one of its inputs lacks).
    """
    known = set(filter(None, licenses))
    if not known:
        return None
    if len(known) == 1 and all(licenses):
        return known.pop()
    return OTHER


def _readme(path: Path) -> Path | None:
    """The card of an input: a folder's ``README.md``, or a Hub model's from the local cache (never downloaded)."""
    if path.is_dir():
        readme = path / "README.md"
        return readme if readme.is_file() else None
    from huggingface_hub import try_to_load_from_cache

    cached = try_to_load_from_cache(str(path), "README.md") if is_hub_id(str(path)) else None
    return Path(cached) if isinstance(cached, str) else None


def _data_licenses(text: str) -> list[dict[str, str]]:
    """The task, source and licence columns of a trained card's data table (see ``cards/model_card.md.j2``)."""
    rows: list[dict[str, str]] = []
    header: list[str] | None = None
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")] if line.startswith("|") else None
        if cells is None:
            header = None
        elif header is None:
            header = cells if set(_DATA_COLUMNS) <= set(cells) else None
        elif not set(line) <= set("|:- ") and len(cells) == len(header):
            row = dict(zip(header, cells, strict=True))
            rows.append({column.lower(): row[column] for column in _DATA_COLUMNS})
    return rows


def read_input_card(path: Path) -> InputCard:
    """What ``path`` (an input folder, or a Hub id in the local cache) says of itself; empty where it says nothing."""
    import yaml
    from huggingface_hub import ModelCard

    from hf_unified_embed.hub.card_ids import loaded_ids

    facts = InputCard()
    readme = _readme(path)
    if readme is not None:
        try:
            card = ModelCard(readme.read_text(encoding="utf-8", errors="replace"), ignore_metadata_errors=True)
        except (ValueError, yaml.YAMLError):
            card = None
        if card is not None:
            license_ = card.data.get("license")
            facts.license = license_ if isinstance(license_, str) and license_ else None
            datasets = card.data.get("datasets")
            datasets = [datasets] if isinstance(datasets, str) else datasets if isinstance(datasets, list) else []
            facts.datasets = [name for name in datasets if isinstance(name, str)]
            facts.data_licenses = _data_licenses(card.text)
            facts.own_id = next((model_id for model_id in loaded_ids(card.text) if _is_repo_id(model_id)), None)
    recipe = path / RUN_RECIPE_FILE if path.is_dir() else None
    if recipe is not None and recipe.is_file():
        try:
            hub = (yaml.safe_load(recipe.read_text(encoding="utf-8")) or {}).get("hub")
        except (yaml.YAMLError, UnicodeDecodeError, AttributeError):
            hub = None
        repo_id = hub.get("repo_id") if isinstance(hub, dict) else None
        if _is_repo_id(repo_id):
            facts.own_id = repo_id
    return facts


def _is_repo_id(value: Any) -> bool:
    """Whether ``value`` is a full Hub model id (``org/name``): a card's model, not a folder name."""
    return isinstance(value, str) and value.count("/") == 1 and not value.startswith(".") and is_hub_id(value)


def license_rows(inputs: Mapping[Path, CardInput], cards: Mapping[Path, InputCard]) -> list[dict[str, Any]]:
    """One row per input for the card's licence section: how it is named, its licence, its data's licences."""
    return [
        {"link": inputs[path].markdown(), "license": cards[path].license, "data": cards[path].data_licenses}
        for path in inputs
    ]


def _with_own_ids(inputs: Mapping[Path, CardInput], cards: Mapping[Path, InputCard]) -> dict[Path, CardInput]:
    """``inputs``, each named by its own Hub id where its card or recipe knows it."""
    return {
        path: item
        if item.given_id or not cards[path].own_id
        else dataclasses.replace(item, given_id=cards[path].own_id)
        for path, item in inputs.items()
    }


def rounded(results: Sequence[Mapping[str, Any]]) -> list[EvalResult]:
    """``EvalResult`` objects with metric values rounded to :data:`METRIC_DIGITS` digits."""
    return [
        EvalResult(**{**result, "metric_value": round(float(result["metric_value"]), METRIC_DIGITS)})
        if isinstance(result.get("metric_value"), (int, float))
        else EvalResult(**result)
        for result in results
    ]


def render_merge_card(
    method: MergeMethod,
    inputs: Mapping[Path, CardInput],
    reference: CardInput,
    checkpoint: LazyCheckpoint,
    groups: Mapping[str, Sequence[str]],
    recipe: Mapping[str, Any],
    card: CardConfig,
    model_id: str,
    sections: Sequence[str] = (),
    needs: ConsumerNeeds | None = None,
    prompts: str = "",
) -> str:
    """The card's text: metadata for the Hub (``base_model`` = Hub ids only) and a body with recipe and weights.

    Args:
        model_id: the merged model's Hub id, or its folder's name (the snippet then loads ``./<name>``).
        needs: what loading the merged folder takes (:func:`~hf_unified_embed.hub.consumers.consumer_needs`).
        prompts: the Markdown table of the folder's named prompts, shown after the usage snippet.
    """
    needs = needs or ConsumerNeeds(packages=["sentence-transformers"])
    cards = {path: read_input_card(path) for path in inputs}
    reference_path = next((path for path, item in inputs.items() if item is reference), None)
    inputs = _with_own_ids(inputs, cards)
    if reference_path is not None:
        reference = inputs[reference_path]

    def entry(path: Path) -> dict[str, str]:
        return {"link": inputs[path].markdown(), "role": ", ".join(inputs[path].roles)}

    merged = method.merged_paths()
    weights = method.group_weights(groups)
    columns = list(dict.fromkeys(column for row in weights.values() for column in row))
    rows = [
        {
            "group": group,
            "tensors": len(names),
            "parameters": sum(checkpoint.info(n).numel for n in names if is_mergeable(checkpoint.info(n).dtype)),
            "weights": [weights.get(group, {}).get(column) for column in columns],
        }
        for group, names in groups.items()
    ]
    metadata: dict[str, Any] = {}
    if card.language:
        metadata["language"] = card.language
    license_ = card.license or merged_license([cards[path].license for path in inputs])
    if license_:
        metadata["license"] = license_
    metadata.update(
        {
            "library_name": "sentence-transformers",
            "pipeline_tag": "sentence-similarity",
            "tags": ["sentence-transformers", "sentence-similarity", "merge", "hf-unified-embed", method.name],
        }
    )
    # Each merged input by its own id; one known only as a fine-tune of a Hub model by that model's id.
    base_models = list(
        dict.fromkeys(
            model_id
            for path in merged
            for model_id in ([inputs[path].given_id] if inputs[path].given_id else inputs[path].hub_ids)
        )
    )
    if base_models:
        metadata["base_model"] = base_models
        metadata["base_model_relation"] = "merge"
    datasets = list(dict.fromkeys(name for path in inputs for name in cards[path].datasets))
    if datasets:
        metadata["datasets"] = datasets
    results = rounded(card.evaluation_results)
    if results:
        metadata["model-index"] = eval_results_to_model_index(model_id, results)
    return render_template(
        TEMPLATE,
        metadata=redact(metadata),
        title=f"{model_id} ({method.name} merge)",
        method=method.name,
        method_description=method.description or method.name,
        citation=method.citation,
        inputs=[entry(path) for path in merged],
        extra_inputs=[entry(path) for path in method.input_paths() if path not in merged],
        reference=reference.markdown(),
        recipe=redact(dict(recipe)),
        weight_columns=columns,
        layer_rows=rows,
        sections=list(sections),
        evaluation_results=[vars(result) for result in results],
        license=license_,
        inputs_agree=len({cards[path].license for path in inputs}) == 1,
        license_rows=license_rows(inputs, cards) if license_ == OTHER or card.license else [],
        packages=needs.packages,
        loader_arguments=loader_arguments(model_id if _is_repo_id(model_id) else f"./{model_id}", needs),
        load_comment=HUB_COMMENT if _is_repo_id(model_id) else LOCAL_COMMENT,
        prompts=prompts,
    )


def write_merge_card(
    directory: Path,
    method: MergeMethod,
    inputs: Mapping[Path, CardInput],
    reference: CardInput,
    checkpoint: LazyCheckpoint,
    groups: Mapping[str, Sequence[str]],
    recipe: Mapping[str, Any],
    card: CardConfig,
    model_id: str,
    sections: Sequence[str] = (),
) -> Path:
    """Write README.md into ``directory``, the merged folder but for its card (``sections``: extra Markdown, such as
    the method's plots)."""
    text = render_merge_card(
        method,
        inputs,
        reference,
        checkpoint,
        groups,
        recipe,
        card,
        model_id,
        sections,
        needs=consumer_needs(directory),
        prompts=prompts_markdown(directory),
    )
    path = directory / "README.md"
    path.write_text(text, encoding="utf-8")
    return path
