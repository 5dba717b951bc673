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

An input is a local folder or a Hub model id (:func:`hf_unified_embed.utils.model_loading.model_folder`
decides by :func:`hf_unified_embed.utils.locations.looks_local`: a local path that does not exist is
reported as such, naming the input's key, and never looked up on the Hub).

Nothing written holds a path of the machine: inputs appear in the card by Hub id
(:mod:`hf_unified_embed.merge.model_ids`) and by folder name
(:func:`hf_unified_embed.utils.locations.public_name`), and ``merge_config.yaml`` (also in the
safetensors metadata) is a merge config that ``merge`` accepts and that reproduces the merge
(:func:`merge_recipe`); secrets are redacted.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from hf_unified_embed.errors import MergeError
from hf_unified_embed.merge.card import CardInput, write_merge_card
from hf_unified_embed.merge.checks import check_compatible, check_nonnegative_weights
from hf_unified_embed.merge.engine import FolderSink, TensorSink, stream_merge
from hf_unified_embed.merge.layers import group_tensor_names
from hf_unified_embed.merge.loader import LazyCheckpoint
from hf_unified_embed.merge.merge_config import DEFAULT_MAX_SHARD_SIZE, CardConfig, MergeConfig, ModelSpec
from hf_unified_embed.merge.merged_prompts import merged_prompts, prompts_source, write_prompts
from hf_unified_embed.merge.methods import MergeMethod, get_merge_method
from hf_unified_embed.merge.model_ids import resolve_hub_ids
from hf_unified_embed.merge.writer import parse_size
from hf_unified_embed.utils.arguments import checked_arguments
from hf_unified_embed.utils.locations import copy_of_hub_model, public_name
from hf_unified_embed.utils.model_loading import is_hub_name, model_folder
from hf_unified_embed.utils.outputs import StagedOutput
from hf_unified_embed.utils.redaction import redact

logger = logging.getLogger(__name__)

RECIPE_FILE = "merge_config.yaml"

CardSection = Callable[[Path], str]
"""Writes extra card material (plots) into the model folder and returns the Markdown that shows it."""


@checked_arguments
def merge_models(
    models: Sequence[str | Path | ModelSpec],
    method: str,
    output_dir: str | Path,
    *,
    reference: int | str | Path | None = None,
    prompts_from: int | str | Path | None = None,
    max_shard_size: int | str = DEFAULT_MAX_SHARD_SIZE,
    precise: bool = False,
    overwrite: bool = False,
    write_card: bool = True,
    model_name: str | None = None,
    model_ids: Sequence[str | None] | Mapping[str | Path, str | None] | None = None,
    evaluation_results: Sequence[Mapping[str, Any]] = (),
    allow_negative_weights: bool = False,
    show_progress: bool = True,
    **method_params: Any,
) -> Path:
    """Merge checkpoints of one architecture into a new model folder and return its path.

    Args:
        models: input model folders — sentence-transformers or transformers folders, single or sharded
            safetensors, ``pytorch_model.bin``, PEFT LoRA adapter folders — or Hub model ids (a string
            that does not look like a local path, see :func:`hf_unified_embed.utils.locations.looks_local`).
        method: ``soup``, ``task_arithmetic``, ``hierarchical``, any of mergekit's methods (``ties``,
            ``dare_ties``, ``slerp``, ``model_stock``, … see :func:`available_merge_methods`) or
            ``package.module:ClassName`` for your own.
        output_dir: the folder to create (refused if non-empty unless ``overwrite``).
        reference: the input supplying non-weight files and non-float tensors (index or path;
            default: the first model).
        prompts_from: the model (index or path) whose named prompts the merged folder keeps when the
            models' prompts differ (refused otherwise; see :mod:`hf_unified_embed.merge.merged_prompts`).
        max_shard_size: per safetensors shard (``"2GB"``, bytes…).
        precise: compute in float64 instead of float32.
        overwrite: replace an existing non-empty ``output_dir``.
        write_card: write README.md (with the method's extra card material, such as a heatmap).
        model_name: the merged model's Hub id, for the card.
        model_ids: Hub ids for the card's ``base_model``: one per model (``None``: found from the
            folder, see :mod:`hf_unified_embed.merge.model_ids`), or ``{path: id}`` for any input.
        evaluation_results: ``huggingface_hub.EvalResult`` fields, shown as ``model-index``.
        allow_negative_weights: accept negative averaging weights (``soup``'s ``weights``, the
            ``weight`` of mergekit's ``linear``, ``nuslerp`` and ``multislerp``): an extrapolation rather
            than an average, refused by default. Task-vector scales (``task_arithmetic``'s ``weights``,
            mergekit's ``weight`` and ``lambda`` of TIES, DARE, …) may be negative without it.
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
        prompts_from=prompts_from,
        max_shard_size=max_shard_size,
        precise=precise,
        overwrite=overwrite,
        write_card=write_card,
        model_ids=model_ids_option(model_ids),
        allow_negative_weights=allow_negative_weights,
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
    #: The local folder each input was read from (a Hub id's snapshot; a local input's own folder).
    folders: dict[Path, Path] = dataclasses.field(default_factory=dict)

    def stream(self, method: MergeMethod, sink: TensorSink, *, precise: bool, show_progress: bool) -> None:
        """Merge every tensor with a prepared ``method`` into ``sink``."""
        stream_merge(
            method, self.checkpoints, self.reference, self.groups, sink, precise=precise, show_progress=show_progress
        )


@contextlib.contextmanager
def open_inputs(
    paths: Sequence[Path], reference: Path, scratch: Path, labels: Mapping[Path, str] | None = None
) -> Iterator[OpenedInputs]:
    """Open every input once (LoRA adapters are merged into their base in ``scratch``) and check them.

    An input is a local folder or a Hub id (:func:`~hf_unified_embed.utils.model_loading.model_folder`);
    ``labels`` name each input's key in messages (``models[1]``, ``base``; default "input model").
    """
    labels = labels or {}
    # str(path): a Hub id given in a config is a Path by now; looks_local decides on its text.
    folders = {path: model_folder(str(path), labels.get(path, "input model")) for path in paths}
    with contextlib.ExitStack() as stack:
        checkpoints = {path: stack.enter_context(LazyCheckpoint(folders[path], scratch)) for path in paths}
        check_compatible(checkpoints[reference], list(checkpoints.values()))
        yield OpenedInputs(
            checkpoints, checkpoints[reference], group_tensor_names(checkpoints[reference].names), folders
        )


def input_labels(method: MergeMethod) -> dict[Path, str]:
    """How the user named each input: ``models[i]``, else the method parameter that holds it (``base``)."""
    labels: dict[Path, str] = {}
    for field in dataclasses.fields(method):
        value = getattr(method, field.name)
        for item in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(item, Path):
                labels.setdefault(item, field.name)
    labels.update({path: f"models[{index}]" for index, path in enumerate(method.models)})
    return labels


def build_method(config: MergeConfig) -> MergeMethod:
    """The configured method with its parameters checked (negative averaging weights only when allowed)."""
    method = get_merge_method(config.method).from_params([spec.path for spec in config.models], config.parameters)
    if not config.allow_negative_weights:
        check_nonnegative_weights(method)
    return method


def run_merge(config: MergeConfig, show_progress: bool = True) -> Path:
    """Run a validated :class:`MergeConfig`; see :func:`merge_models`."""
    method = build_method(config)
    inputs = method.input_paths()
    reference_path = reference_input(config, method)
    with (
        StagedOutput(config.output_dir, overwrite=config.overwrite, inputs=inputs) as stage,
        open_inputs(inputs, reference_path, stage.scratch, input_labels(method)) as opened,
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
    # Before any tensor is merged: models whose prompts disagree are refused (merge.prompts).
    keep = prompts_source(config.prompts_from, [spec.path for spec in config.models], method.models)
    prompts = merged_prompts(method.models, opened.folders, input_labels(method), keep)
    card_inputs = _card_inputs(method, config.given_ids())
    recipe = redact(merge_recipe(config, method, reference_path))
    sink = FolderSink(target, opened.reference, config.max_shard_size, {"merge_recipe": json.dumps(recipe)})
    opened.stream(method, sink, precise=config.precise, show_progress=show_progress)
    sink.close()
    for relative, source in opened.reference.support_files().items():
        (target / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target / relative)
    from hf_unified_embed.training.bidirectional_transformer import make_self_contained

    make_self_contained(target)  # the files of a bidirectional adapter input describe an adapter, not this model
    write_prompts(target, *prompts)
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
    # An input named by Hub id is that model; so is a folder holding a copy of one (the packaged MiniLM,
    # a cache snapshot).
    given = {**{path: str(path) for path in method.input_paths() if is_hub_name(str(path))}, **given}
    ids = resolve_hub_ids(method.input_paths(), given)
    roles = method.input_roles()
    return {
        path: CardInput(
            path=str(path) if is_hub_name(str(path)) else public_name(path),
            hub_ids=ids[path],
            given_id=given.get(path) or copy_of_hub_model(path),
            roles=roles.get(path, []),
        )
        for path in method.input_paths()
    }


def _hub_model(path: Path) -> str | None:
    """The Hub id of the model an input is: a Hub id itself, or a folder holding a copy of one."""
    return str(path) if is_hub_name(str(path)) else copy_of_hub_model(path)


def _folder_name(path: str | Path) -> str:
    """A folder's name as written (a symlink keeps its own name: that is the one a re-merge finds beside the others)."""
    return Path(os.path.abspath(Path(path).expanduser())).name


def merge_recipe(config: MergeConfig, method: MergeMethod, reference: Path) -> dict[str, Any]:
    """``merge_config.yaml`` (and the safetensors metadata): a merge config that ``merge`` accepts and
    that reproduces the merge, holding no path of the machine.

    * ``method``, ``models``, ``parameters`` (the method's, as it used them: a soup's weights after
      ``normalize``, a hierarchical merge's soups as indices into ``models``), ``reference`` (an index
      into ``models``, or an input's name), ``output_dir``, and ``precise``, ``max_shard_size``,
      ``allow_negative_weights``, ``write_card`` and ``card.model_name`` where they are not the default.
    * An input that *is* a Hub model — named by its Hub id, or a folder holding a copy of one (the
      packaged all-MiniLM-L6-v2, a Hub cache snapshot) — is written as its Hub id. Any other input is a
      local folder and is written as its folder name (never as a path, relative or absolute). A
      fine-tune is never named by its base's id; a Hub id given for a local input stays beside it
      (``models: [{path, id}]``, ``model_ids: {path: id}``) for the card.
    * As in every config file, those names are relative to the file's folder: the file merges again
      from the folder that holds the inputs (``outputs/`` for ``merge --models outputs/run-a
      outputs/run-b -o outputs/merged``), e.g. ``cp outputs/merged/merge_config.yaml outputs/again.yaml
      && hf-unified-embed merge outputs/again.yaml -o outputs/merged-again``. ``output_dir`` is the
      merged folder's name, so merging again without ``-o`` there is refused as an existing output.
    """

    def written(path: Path) -> str:
        return _hub_model(path) or _folder_name(path)

    names = [written(path) for path in method.input_paths()]
    if duplicates := sorted({name for name in names if names.count(name) > 1}):
        logger.warning(
            "Two inputs share the folder name %s: merge_config.yaml names both %s; rename one to merge again from it",
            duplicates[0],
            duplicates[0],
        )
    given = config.given_ids()
    models: list[Any] = []
    for path in method.models:
        own_id = given.get(path) if _hub_model(path) is None else None
        models.append({"path": written(path), "id": own_id} if own_id else written(path))
    parameters = method.recipe(written)
    for key in ("method", "models"):
        parameters.pop(key, None)
    recipe: dict[str, Any] = {
        "method": config.method,
        "models": models,
        "parameters": {key: value for key, value in parameters.items() if value is not None},
        "reference": method.models.index(reference) if reference in method.models else written(reference),
        "output_dir": _folder_name(config.output_dir),
    }
    other_ids = {
        written(path): given[path]
        for path in method.input_paths()
        if path not in method.models and path in given and _hub_model(path) is None
    }
    if other_ids:
        recipe["model_ids"] = other_ids
    if config.prompts_from is not None:
        # An index, never a path of this machine (merged_prompts has refused a model that is not merged).
        keep = prompts_source(config.prompts_from, [spec.path for spec in config.models], method.models)
        recipe["prompts_from"] = method.models.index(keep) if keep in method.models else 0
    if config.precise:
        recipe["precise"] = True
    if parse_size(config.max_shard_size) != parse_size(DEFAULT_MAX_SHARD_SIZE):
        recipe["max_shard_size"] = config.max_shard_size
    if config.allow_negative_weights:
        recipe["allow_negative_weights"] = True
    if not config.write_card:
        recipe["write_card"] = False
    if config.card.model_name:
        recipe["card"] = {"model_name": config.card.model_name}
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
