"""README.md of a merged model, rendered from ``cards/merged_model_card.md.j2``.

The YAML front matter is what the Hub reads for merges: ``base_model`` lists every merged input,
``base_model_relation: merge``, ``library_name: sentence-transformers``, tags ``merge``,
``hf-unified-embed`` and the method, and ``model-index`` when evaluation results are given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from huggingface_hub import EvalResult
from huggingface_hub.repocard_data import eval_results_to_model_index

from hf_unified_embed.cards import render_template
from hf_unified_embed.merge.checks import is_mergeable
from hf_unified_embed.merge.config import CardConfig, ModelSpec
from hf_unified_embed.merge.loader import LazyCheckpoint
from hf_unified_embed.merge.methods import Hierarchical, MergeMethod

TEMPLATE = "merged_model_card.md.j2"
HEATMAP_FILE = "delta_heatmap.png"

_DESCRIPTIONS = {
    "soup": "a weighted average of whole checkpoints, Model Soups",
    "slerp": "spherical linear interpolation between two checkpoints",
    "task_arithmetic": "the base model plus weighted task vectors",
    "hierarchical": "CoDiEmb's delta-guided fusion of an IR soup and an STS soup, one weight per layer",
}


def _link(model_id: str) -> str:
    # Hub ids become links; local paths are shown as code.
    is_hub_id = model_id.count("/") == 1 and not Path(model_id).exists() and not model_id.startswith((".", "/"))
    return f"[{model_id}](https://huggingface.co/{model_id})" if is_hub_id else f"`{model_id}`"


def render_merge_card(
    method: MergeMethod,
    specs: Sequence[ModelSpec],
    reference: LazyCheckpoint,
    groups: Mapping[str, Sequence[str]],
    recipe: Mapping[str, Any],
    card: CardConfig,
    model_id: str,
    heatmap: str | None = None,
) -> str:
    ids = {spec.path: spec.card_id for spec in specs}
    roles: dict[Path, list[str]] = {}
    if isinstance(method, Hierarchical):
        for field_name in ("ir_models", "sts_models"):
            for path in getattr(method, field_name):
                roles.setdefault(Path(path), []).append(f"{field_name[:-7].upper()} soup")
    inputs = [
        {"link": _link(ids.get(path, str(path))), "role": ", ".join(roles.get(path, []))} for path in method.models
    ]
    extra_inputs = [
        {"link": _link(ids.get(path, str(path))), "role": role}
        for role in ("base", "ir_specialist", "sts_specialist")
        if (path := getattr(method, role, None)) is not None and path not in method.models
    ]
    weights = method.group_weights(groups)
    columns = list(next(iter(weights.values()))) if weights else []
    rows = [
        {
            "group": group,
            "tensors": len(names),
            "parameters": sum(reference.info(n).numel for n in names if is_mergeable(reference.info(n).dtype)),
            "weights": [weights[group][column] for column in columns],
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
            "base_model": [ids.get(path, str(path)) for path in method.models],
            "base_model_relation": "merge",
        }
    )
    results = [EvalResult(**result) for result in card.evaluation_results]
    if results:
        metadata["model-index"] = eval_results_to_model_index(model_id, results)
    return render_template(
        TEMPLATE,
        metadata=metadata,
        title=f"{model_id} ({method.name} merge)",
        method=method.name,
        method_description=_DESCRIPTIONS.get(method.name, method.name),
        inputs=inputs,
        extra_inputs=extra_inputs,
        reference=_link(str(recipe.get("reference", reference.path))),
        recipe=dict(recipe),
        weight_columns=columns,
        layer_rows=rows,
        heatmap=heatmap,
        temperature=getattr(method, "temperature", None),
        evaluation_results=[vars(result) for result in results],
        model_id=model_id,
    )


def write_merge_card(
    directory: Path,
    method: MergeMethod,
    specs: Sequence[ModelSpec],
    reference: LazyCheckpoint,
    groups: Mapping[str, Sequence[str]],
    recipe: Mapping[str, Any],
    card: CardConfig,
    model_id: str,
) -> Path:
    """Write README.md (and the delta heatmap of a hierarchical merge) into ``directory``."""
    heatmap = None
    if isinstance(method, Hierarchical) and method.report is not None:
        method.report.plot(directory / HEATMAP_FILE, title="Layer-wise deviation of the IR and STS specialists")
        heatmap = HEATMAP_FILE
    text = render_merge_card(method, specs, reference, groups, recipe, card, model_id, heatmap)
    path = directory / "README.md"
    path.write_text(text, encoding="utf-8")
    return path
