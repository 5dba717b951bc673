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
from hf_unified_embed.merge.methods import MergeMethod
from hf_unified_embed.redaction import redact

TEMPLATE = "merged_model_card.md.j2"


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
    extra_section: str | None = None,
) -> str:
    ids = {spec.path: spec.card_id for spec in specs}
    roles = method.input_roles()
    inputs = [
        {"link": _link(ids.get(path, str(path))), "role": ", ".join(roles.get(path, []))} for path in method.models
    ]
    extra_inputs = [
        {"link": _link(ids.get(path, str(path))), "role": ", ".join(roles.get(path, []))}
        for path in method.input_paths()
        if path not in method.models
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
        metadata=redact(metadata),
        title=f"{model_id} ({method.name} merge)",
        method=method.name,
        method_description=method.description or method.name,
        citation=method.citation,
        inputs=inputs,
        extra_inputs=extra_inputs,
        reference=_link(str(recipe.get("reference", reference.path))),
        recipe=redact(dict(recipe)),
        weight_columns=columns,
        layer_rows=rows,
        extra_section=extra_section,
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
    """Write README.md (and the method's extra card material, such as a plot) into ``directory``."""
    extra_section = method.card_section(directory)
    text = render_merge_card(method, specs, reference, groups, recipe, card, model_id, extra_section)
    path = directory / "README.md"
    path.write_text(text, encoding="utf-8")
    return path
