"""README.md of a merged model, rendered from ``cards/merged_model_card.md.j2``.

The YAML front matter is what the Hub reads for merges: ``base_model`` lists the Hub ids of the
merged inputs (:mod:`hf_unified_embed.merge.model_ids`; never a local path),
``base_model_relation: merge``, ``library_name: sentence-transformers``, tags ``merge``,
``hf-unified-embed`` and the method, and ``model-index`` when evaluation results are given (metric
values rounded to 4 digits). Inputs appear in the body by Hub id or folder name, never by path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from huggingface_hub import EvalResult
from huggingface_hub.repocard_data import eval_results_to_model_index

from hf_unified_embed.merge.checks import is_mergeable
from hf_unified_embed.merge.loader import LazyCheckpoint
from hf_unified_embed.merge.merge_config import CardConfig
from hf_unified_embed.merge.methods import MergeMethod
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
) -> str:
    """The card's text: metadata for the Hub (``base_model`` = Hub ids only) and a body with recipe and weights."""

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
    if card.license:
        metadata["license"] = card.license
    metadata.update(
        {
            "library_name": "sentence-transformers",
            "pipeline_tag": "sentence-similarity",
            "tags": ["sentence-transformers", "sentence-similarity", "merge", "hf-unified-embed", method.name],
        }
    )
    base_models = list(dict.fromkeys(model_id for path in merged for model_id in inputs[path].hub_ids))
    if base_models:
        metadata["base_model"] = base_models
        metadata["base_model_relation"] = "merge"
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
        model_id=model_id,
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
    """Write README.md into ``directory`` (``sections``: extra Markdown, such as the method's plots)."""
    text = render_merge_card(method, inputs, reference, checkpoint, groups, recipe, card, model_id, sections)
    path = directory / "README.md"
    path.write_text(text, encoding="utf-8")
    return path
