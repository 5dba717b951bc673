"""The merge driver: check every input, stream the tensors through a method, write, card, rename.

Order of work (so that a bad input never leaves anything behind):

1. method parameters, output path and overwrite rule are checked;
2. every input is opened (headers only) and compared with the reference — architecture, vocabulary,
   tensor names, shapes, dtypes; truncated safetensors fail here;
3. the method's preparation runs (the delta norms of ``hierarchical``);
4. tensors stream one name at a time into a staging folder beside the output
   (:class:`hf_unified_embed.outputs.StagedOutput`): floating-point tensors are merged (inputs and
   result checked for NaN/inf), others are copied from the reference;
5. non-weight files of the reference, ``merge_config.yaml`` and the card are added, and the staging
   folder is renamed to the output. Any error removes the staging folder; one left by a killed run
   is removed by the next run for the same output. LoRA inputs are merged into their base inside
   the staging folder's scratch space.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import yaml
from tqdm.auto import tqdm

from hf_unified_embed.errors import InputNotFoundError, MergeError
from hf_unified_embed.merge.card import write_merge_card
from hf_unified_embed.merge.checks import all_finite, check_compatible, check_finite, is_mergeable
from hf_unified_embed.merge.config import DEFAULT_MAX_SHARD_SIZE, CardConfig, MergeConfig, ModelSpec
from hf_unified_embed.merge.layers import group_tensor_names
from hf_unified_embed.merge.loader import LazyCheckpoint
from hf_unified_embed.merge.methods import MergeMethod, get_merge_method
from hf_unified_embed.merge.writer import ShardedSafetensorsWriter
from hf_unified_embed.outputs import StagedOutput
from hf_unified_embed.redaction import redact

logger = logging.getLogger(__name__)

RECIPE_FILE = "merge_config.yaml"


def merge_models(
    models: Sequence[str | Path | ModelSpec],
    method: str,
    output_dir: str | Path,
    *,
    reference: int | str | Path | None = None,
    max_shard_size: int | str = DEFAULT_MAX_SHARD_SIZE,
    overwrite: bool = False,
    write_card: bool = True,
    model_name: str | None = None,
    evaluation_results: Sequence[Mapping[str, Any]] = (),
    show_progress: bool = True,
    **method_params: Any,
) -> Path:
    """Merge checkpoints of one architecture into a new model folder and return its path.

    Args:
        models: input model folders — sentence-transformers or transformers folders, single or sharded
            safetensors, ``pytorch_model.bin``, PEFT LoRA adapter folders.
        method: ``soup``, ``slerp``, ``task_arithmetic``, ``hierarchical`` or any registered method.
        output_dir: the folder to create (refused if non-empty unless ``overwrite``).
        reference: the input supplying non-weight files and non-float tensors (index or path;
            default: the first model).
        max_shard_size: per safetensors shard (``"2GB"``, bytes…).
        overwrite: replace an existing non-empty ``output_dir``.
        write_card: write README.md (with the delta heatmap for ``hierarchical``).
        model_name: the merged model's Hub id, for the card.
        evaluation_results: ``huggingface_hub.EvalResult`` fields, shown as ``model-index``.
        show_progress: tqdm progress bars.
        **method_params: the method's parameters: ``weights``, ``normalize`` (soup); ``t`` (slerp);
            ``base``, ``weights`` (task_arithmetic); ``ir_models``, ``sts_models``, ``base``,
            ``ir_specialist``, ``sts_specialist``, ``deltas``, ``temperature`` (hierarchical).

    Example::

        from hf_unified_embed.merge import merge_models
        from sentence_transformers import SentenceTransformer

        path = merge_models(["run-1", "run-2", "run-3"], "soup", "soup-of-3")
        model = SentenceTransformer(str(path))
    """
    config = MergeConfig(
        models=list(models),  # type: ignore[arg-type]  # parsed into ModelSpec in __post_init__
        method=method,
        output_dir=Path(output_dir),
        parameters=dict(method_params),
        reference=reference,
        max_shard_size=max_shard_size,
        overwrite=overwrite,
        write_card=write_card,
        card=CardConfig(model_name=model_name, evaluation_results=[dict(result) for result in evaluation_results]),
    )
    return run_merge(config, show_progress=show_progress)


def run_merge(config: MergeConfig, show_progress: bool = True) -> Path:
    """Run a validated :class:`MergeConfig`; see :func:`merge_models`."""
    method = get_merge_method(config.method).from_params([spec.path for spec in config.models], config.parameters)
    specs = config.models or [ModelSpec(path) for path in method.models]
    inputs = method.input_paths()
    for path in inputs:
        if not path.exists():
            raise InputNotFoundError(f"input model {path} does not exist")
    output_dir = config.output_dir
    reference_path = _reference_path(config.reference, specs, method, inputs)

    with StagedOutput(output_dir, overwrite=config.overwrite, inputs=inputs) as stage:
        checkpoints = {path: LazyCheckpoint(path, stage.scratch) for path in inputs}
        reference = checkpoints[reference_path]
        check_compatible(reference, [checkpoints[path] for path in inputs])
        groups = group_tensor_names(reference.names)
        method.prepare(checkpoints, groups)

        recipe = redact(
            {
                **method.recipe(),
                "method": config.method,
                "models": [spec.card_id for spec in specs],
                "reference": str(reference_path),
            }
        )
        _write_weights(method, checkpoints, reference, groups, stage.path, config, recipe, show_progress)
        for relative, source in reference.support_files().items():
            (stage.path / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, stage.path / relative)
        (stage.path / RECIPE_FILE).write_text(
            yaml.safe_dump(recipe, sort_keys=False, allow_unicode=True), encoding="utf-8"
        )
        if config.write_card:
            model_id = config.card.model_name or output_dir.name
            write_merge_card(stage.path, method, specs, reference, groups, recipe, config.card, model_id)
    logger.info("Merged %d models with %s into %s", len(method.models), method.name, output_dir)
    return output_dir


def _reference_path(
    reference: int | str | Path | None, specs: Sequence[ModelSpec], method: MergeMethod, inputs: Sequence[Path]
) -> Path:
    if reference is None:
        return method.models[0]
    if isinstance(reference, int):
        return specs[reference].path
    path = Path(reference)
    if path not in inputs:
        raise MergeError(f"reference {reference} is not one of the inputs: {[str(p) for p in inputs]}")
    return path


def _write_weights(
    method: MergeMethod,
    checkpoints: Mapping[Path, LazyCheckpoint],
    reference: LazyCheckpoint,
    groups: Mapping[str, Sequence[str]],
    staging: Path,
    config: MergeConfig,
    recipe: Mapping[str, Any],
    show_progress: bool,
) -> None:
    group_of = {name: group for group, names in groups.items() for name in names}
    metadata = {"merge_recipe": json.dumps(recipe, ensure_ascii=False)}
    # Module sub-folders ("2_Dense/…") are separate weight files, written by a writer of their own.
    writers: dict[str, ShardedSafetensorsWriter] = {}
    with tqdm(
        total=len(reference.names), desc=f"Merging ({method.name})", unit="tensor", disable=not show_progress
    ) as bar:
        for name in reference.names:
            folder, _, key = name.rpartition("/")
            writer = writers.get(folder)
            if writer is None:
                writer = writers[folder] = ShardedSafetensorsWriter(staging / folder, config.max_shard_size, metadata)
            info = reference.info(name)
            if is_mergeable(info.dtype):
                used: list[Path] = []

                def read(path: Path, name: str = name, used: list[Path] = used) -> torch.Tensor:
                    used.append(path)
                    return checkpoints[path].get_tensor(name)

                tensor = method.merge_tensor(name, group_of[name], read).to(info.dtype)
                if not all_finite(tensor):
                    # NaN/inf in an input reaches the result, so inputs are scanned only on failure.
                    for path in dict.fromkeys(used):
                        check_finite(checkpoints[path].get_tensor(name), name, checkpoints[path].file_of(name))
                    raise MergeError(
                        f"the {method.name} result for tensor {name!r} holds NaN/inf values in {info.dtype}"
                    )
            else:
                tensor = reference.get_tensor(name)
            writer.add(key, tensor)
            bar.update()
    for writer in writers.values():
        writer.close()
