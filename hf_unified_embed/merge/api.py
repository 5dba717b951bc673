"""The merge driver: check every input, stream the tensors through a method, write, card, rename.

Order of work (so that a bad input never leaves anything behind):

1. method parameters, output path and overwrite rule are checked;
2. every input is opened (headers only, each weight file once) and compared with the reference —
   architecture, vocabulary, tensor names, shapes, dtypes; truncated safetensors fail here;
3. the method's preparation runs (the delta norms of ``hierarchical``, mergekit's schedule);
4. tensors stream through :func:`hf_unified_embed.merge.engine.stream_merge` straight into the
   shard files of a staging folder beside the output (:class:`hf_unified_embed.utils.outputs.StagedOutput`);
5. non-weight files of the reference, ``merge_config.yaml`` and the card are added, and the staging
   folder is renamed to the output. Any error removes the staging folder; one left by a killed run
   is removed by the next run for the same output. LoRA inputs are merged into their base inside
   the staging folder's scratch space.

Nothing written holds a path of the machine, absolute or relative: inputs appear in
``merge_config.yaml``, the safetensors metadata and the card by Hub id
(:mod:`hf_unified_embed.merge.model_ids`) and by folder name
(:func:`hf_unified_embed.utils.locations.public_name`); secrets are redacted.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from hf_unified_embed.errors import InputNotFoundError, MergeError
from hf_unified_embed.merge.card import CardInput, write_merge_card
from hf_unified_embed.merge.checks import check_compatible
from hf_unified_embed.merge.engine import FolderSink, TensorSink, stream_merge
from hf_unified_embed.merge.layers import group_tensor_names
from hf_unified_embed.merge.loader import LazyCheckpoint
from hf_unified_embed.merge.merge_config import DEFAULT_MAX_SHARD_SIZE, CardConfig, MergeConfig, ModelSpec
from hf_unified_embed.merge.methods import MergeMethod, get_merge_method
from hf_unified_embed.merge.model_ids import resolve_hub_ids
from hf_unified_embed.utils.locations import copy_of_hub_model, public_name
from hf_unified_embed.utils.outputs import StagedOutput
from hf_unified_embed.utils.redaction import redact

logger = logging.getLogger(__name__)

RECIPE_FILE = "merge_config.yaml"

CardSection = Callable[[Path], str]
"""Writes extra card material (plots) into the model folder and returns the Markdown that shows it."""


def merge_models(
    models: Sequence[str | Path | ModelSpec],
    method: str,
    output_dir: str | Path,
    *,
    reference: int | str | Path | None = None,
    max_shard_size: int | str = DEFAULT_MAX_SHARD_SIZE,
    precise: bool = False,
    overwrite: bool = False,
    write_card: bool = True,
    model_name: str | None = None,
    model_ids: Sequence[str | None] | Mapping[str | Path, str | None] | None = None,
    evaluation_results: Sequence[Mapping[str, Any]] = (),
    show_progress: bool = True,
    **method_params: Any,
) -> Path:
    """Merge checkpoints of one architecture into a new model folder and return its path.

    Args:
        models: input model folders — sentence-transformers or transformers folders, single or sharded
            safetensors, ``pytorch_model.bin``, PEFT LoRA adapter folders.
        method: ``soup``, ``task_arithmetic``, ``hierarchical``, any of mergekit's methods (``ties``,
            ``dare_ties``, ``slerp``, ``model_stock``, … see :func:`available_merge_methods`) or
            ``package.module:ClassName`` for your own.
        output_dir: the folder to create (refused if non-empty unless ``overwrite``).
        reference: the input supplying non-weight files and non-float tensors (index or path;
            default: the first model).
        max_shard_size: per safetensors shard (``"2GB"``, bytes…).
        precise: compute in float64 instead of float32.
        overwrite: replace an existing non-empty ``output_dir``.
        write_card: write README.md (with the method's extra card material, such as a heatmap).
        model_name: the merged model's Hub id, for the card.
        model_ids: Hub ids for the card's ``base_model``: one per model (``None``: found from the
            folder, see :mod:`hf_unified_embed.merge.model_ids`), or ``{path: id}`` for any input.
        evaluation_results: ``huggingface_hub.EvalResult`` fields, shown as ``model-index``.
        show_progress: tqdm progress bars.
        **method_params: the method's parameters: ``weights``, ``normalize`` (soup); ``base``,
            ``weights`` (task_arithmetic); ``ir_models``, ``sts_models``, ``base``, ``ir_specialist``,
            ``sts_specialist``, ``deltas``, ``temperature`` (hierarchical); ``base``, ``seed`` and
            mergekit's own names (``weight``, ``density``, ``t``, ``lambda``, …) for mergekit's methods.

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
        precise=precise,
        overwrite=overwrite,
        write_card=write_card,
        model_ids=model_ids_option(model_ids),
        card=CardConfig(model_name=model_name, evaluation_results=[dict(result) for result in evaluation_results]),
    )
    return run_merge(config, show_progress=show_progress)


def model_ids_option(
    model_ids: Sequence[str | None] | Mapping[str | Path, str | None] | None,
) -> list[str | None] | dict[str, str | None] | None:
    if isinstance(model_ids, Mapping):
        return {str(path): model_id for path, model_id in model_ids.items()}
    return list(model_ids) if model_ids is not None else None


@dataclass
class OpenedInputs:
    """Every input of a merge, opened and checked against the reference."""

    checkpoints: dict[Path, LazyCheckpoint]
    reference: LazyCheckpoint
    groups: dict[str, list[str]]

    def stream(self, method: MergeMethod, sink: TensorSink, *, precise: bool, show_progress: bool) -> None:
        """Merge every tensor with a prepared ``method`` into ``sink``."""
        stream_merge(
            method, self.checkpoints, self.reference, self.groups, sink, precise=precise, show_progress=show_progress
        )


@contextlib.contextmanager
def open_inputs(paths: Sequence[Path], reference: Path, scratch: Path) -> Iterator[OpenedInputs]:
    """Open every input once (LoRA adapters are merged into their base in ``scratch``) and check them."""
    for path in paths:
        if not path.exists():
            raise InputNotFoundError(f"input model {path} does not exist")
    with contextlib.ExitStack() as stack:
        checkpoints = {path: stack.enter_context(LazyCheckpoint(path, scratch)) for path in paths}
        check_compatible(checkpoints[reference], list(checkpoints.values()))
        yield OpenedInputs(checkpoints, checkpoints[reference], group_tensor_names(checkpoints[reference].names))


def build_method(config: MergeConfig) -> MergeMethod:
    """The configured method with its parameters checked."""
    return get_merge_method(config.method).from_params([spec.path for spec in config.models], config.parameters)


def run_merge(config: MergeConfig, show_progress: bool = True) -> Path:
    """Run a validated :class:`MergeConfig`; see :func:`merge_models`."""
    method = build_method(config)
    inputs = method.input_paths()
    reference_path = reference_input(config, method)
    with (
        StagedOutput(config.output_dir, overwrite=config.overwrite, inputs=inputs) as stage,
        open_inputs(inputs, reference_path, stage.scratch) as opened,
    ):
        method.prepare(opened.checkpoints, opened.groups)
        write_merged_model(config, method, opened, stage.path, show_progress=show_progress)
    logger.info("Merged %d models with %s into %s", len(method.models), method.name, config.output_dir)
    return config.output_dir


def write_merged_model(
    config: MergeConfig,
    method: MergeMethod,
    opened: OpenedInputs,
    target: Path,
    *,
    show_progress: bool = True,
    card_sections: Sequence[CardSection] = (),
    card: CardConfig | None = None,
) -> None:
    """Stream a prepared method's result into ``target`` with the reference's files, the recipe and the card.

    Args:
        target: the (staging) folder to fill.
        card_sections: extra card material after the method's own (the merge search's table and plot).
        card: card options instead of ``config.card``.
    """
    reference_path = reference_input(config, method)
    card_inputs = _card_inputs(method, config.given_ids())
    recipe = redact(merge_recipe(config, method, card_inputs, reference_path))
    sink = FolderSink(target, opened.reference, config.max_shard_size, {"merge_recipe": json.dumps(recipe)})
    opened.stream(method, sink, precise=config.precise, show_progress=show_progress)
    sink.close()
    for relative, source in opened.reference.support_files().items():
        (target / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target / relative)
    (target / RECIPE_FILE).write_text(yaml.safe_dump(recipe, sort_keys=False, allow_unicode=True), encoding="utf-8")
    if config.write_card:
        card = card or config.card
        sections = [method.card_section(target), *(section(target) for section in card_sections)]
        write_merge_card(
            target,
            method,
            card_inputs,
            card_inputs[reference_path],
            opened.reference,
            opened.groups,
            recipe,
            card,
            card.model_name or config.output_dir.name,
            [section for section in sections if section],
        )


def _card_inputs(method: MergeMethod, given: dict[Path, str]) -> dict[Path, CardInput]:
    ids = resolve_hub_ids(method.input_paths(), given)
    roles = method.input_roles()
    return {
        path: CardInput(
            path=public_name(path),
            hub_ids=ids[path],
            # A folder that holds a copy of a Hub model (the packaged MiniLM, a cache snapshot) is that model.
            given_id=given.get(path) or copy_of_hub_model(path),
            roles=roles.get(path, []),
        )
        for path in method.input_paths()
    }


def merge_recipe(
    config: MergeConfig, method: MergeMethod, inputs: Mapping[Path, CardInput], reference: Path
) -> dict[str, Any]:
    """What ``merge_config.yaml`` and the safetensors metadata hold: Hub ids and folder names, no paths.

    A model is ``{path, id}`` (``path``: its folder name); any other input (a base, a specialist, the
    reference) is written as its Hub id when it is a Hub model — what someone else can load — else as
    its folder name.
    """

    def name(path: Path) -> str:
        return (inputs[path].given_id or inputs[path].path) if path in inputs else path.name

    recipe = method.recipe(name)
    recipe["method"] = config.method
    recipe["models"] = [
        {"path": inputs[path].path, **({"id": inputs[path].hub_ids[0]} if len(inputs[path].hub_ids) == 1 else {})}
        for path in method.models
    ]
    recipe["reference"] = name(reference)
    if config.precise:
        recipe["precise"] = True
    return recipe


def reference_input(config: MergeConfig, method: MergeMethod) -> Path:
    """The input whose non-weight files and non-float tensors the output takes (default: the first model)."""
    reference = config.reference
    if reference is None:
        return method.models[0]
    if isinstance(reference, int):
        return config.models[reference].path if config.models else method.models[reference]
    path = Path(reference)
    if path not in method.input_paths():
        raise MergeError(f"reference {reference} is not one of the inputs: {[str(p) for p in method.input_paths()]}")
    return path
