"""Validated configuration of one merge, as written in ``hf-unified-embed merge CONFIG.yaml``.

Example ``merge.yaml``::

    method: hierarchical
    output_dir: outputs/merged
    models:
      - path: outputs/run-ir
        id: my-org/minilm-ir          # its Hub id, if published (default: found from the folder)
      - outputs/run-sts
      - outputs/run-mixed
    parameters:
      ir_models: [0, 2]               # indices into models, or paths
      sts_models: [1, 2]
      base: sentence-transformers/all-MiniLM-L6-v2-local-copy
      ir_specialist: outputs/ir-only
      sts_specialist: outputs/sts-only
      temperature: 0.5
    reference: 2                      # non-weight files and non-float tensors come from here
    prompts_from: null                # models whose prompts disagree: the one (index or path) to keep
    max_shard_size: 2GB
    precise: false                    # true: float64 arithmetic
    allow_negative_weights: false     # true: a soup's weights (mergekit linear's) may be negative
    card:
      model_name: my-org/minilm-merged
      evaluation_results:
        - {task_type: sentence-similarity, dataset_type: mteb/sts13-sts, dataset_name: STS13,
           metric_type: cosine_spearman, metric_value: 0.81}

In a config file, relative paths are relative to the file's own folder, as in every YAML file the
package reads (docs/training.md, "Recipe files"): ``output_dir``, ``search.suite`` and
``search.data_root`` (an inline suite's ``data_root`` defaults to the config's folder), and the
models that are local folders rather than Hub ids (``looks_local`` from the file's folder):
``models`` and their ``path``, a ``reference`` path, the keys of ``model_ids`` and the method's path
parameters (``base``, ``ir_models``, ``ir_specialist``, …: the fields annotated ``Path``). A key given twice is an error. A config
given as a mapping (:meth:`MergeConfig.from_dict`, ``merge_models``) and the command line's flags have
no file: their relative paths are relative to the current directory, as mergekit's are.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from hf_unified_embed.errors import MergeError, shown
from hf_unified_embed.merge.methods import get_merge_method
from hf_unified_embed.merge.model_ids import check_hub_id
from hf_unified_embed.merge.writer import parse_size
from hf_unified_embed.utils.locations import looks_local
from hf_unified_embed.utils.typecheck import mismatched_field
from hf_unified_embed.utils.yaml_files import read_yaml_mapping, relative_to_file, yaml_folder

DEFAULT_MAX_SHARD_SIZE = "2GB"


@dataclasses.dataclass
class ModelSpec:
    """One input model folder and, when it is a published model, its Hub id (for the card's ``base_model``)."""

    path: Path
    id: str | None = None

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        if self.id is not None:
            check_hub_id(self.id, f"the id of {self.path}")

    @classmethod
    def parse(cls, entry: Any, where: str) -> ModelSpec:
        if isinstance(entry, (str, Path)):
            return cls(Path(entry))
        if isinstance(entry, ModelSpec):
            return entry
        if (
            isinstance(entry, Mapping)
            and isinstance(entry.get("path"), str)
            and set(entry) <= {"path", "id"}
            and isinstance(entry.get("id"), (str, type(None)))
        ):
            return cls(Path(entry["path"]), entry.get("id"))
        raise MergeError(f"{where}: expected a path or {{path: ..., id: ...}}, got {shown(entry)}")


@dataclasses.dataclass
class CardConfig:
    """What the generated README.md says beyond the recipe.

    Args:
        model_name: the merged model's Hub id (used in the usage snippet and ``model-index``).
        evaluation_results: dicts of ``huggingface_hub.EvalResult`` fields (``task_type``,
            ``dataset_type``, ``dataset_name``, ``metric_type``, ``metric_value``, …).
        language: copied into the card's metadata when given.
        license: copied into the card's metadata when given.
    """

    model_name: str | None = None
    evaluation_results: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    language: str | list[str] | None = None
    license: str | None = None

    def __post_init__(self) -> None:
        from huggingface_hub import EvalResult

        for index, result in enumerate(self.evaluation_results):
            try:
                EvalResult(**result)
            except TypeError as error:
                raise MergeError(f"card.evaluation_results[{index}]: {error}") from error


@dataclasses.dataclass
class SearchConfig:
    """The ``search:`` section of a merge config.

    Args:
        suite: an evaluation suite of dev sets (YAML path or mapping, see :mod:`hf_unified_embed.evaluation`).
        parameters: candidate values per method parameter: a list, or ``{min, max, steps}`` for evenly
            spaced numbers; every combination is a candidate (other parameters come from the config).
        objective: ``{metric: weight}``; a metric is a suite entry (its primary metric) or ``entry/metric``.
        in_memory: merge candidates in memory (``True``), via scratch files (``False``) or by size (``"auto"``).
        data_root: overrides the suite's ``data_root``.
        device: where candidates are evaluated (default: CUDA when available).
        constraint: keep the base: ``{epsilon: ε, metrics: [...]}``. The merge's ``base`` is evaluated
            on the suite too, and a candidate is admissible only when none of ``metrics`` (default: the
            objective's keys plus every entry of a kind that compares with a reference model, e.g.
            ``forgetting``) is below the base's value by more than ``ε``; the best admissible candidate
            wins ("best mean subject to no column worse than the base by more than ε"). ``epsilon``
            is one number or ``{metric: ε, default: ε}``. The base scores 1 on a ``forgetting`` entry,
            so its ε there is the largest drop of neighbour overlap allowed.
    """

    suite: str | Path | dict[str, Any]
    parameters: dict[str, Any]
    objective: dict[str, float]
    in_memory: bool | str = "auto"
    data_root: str | None = None
    device: str | None = None
    constraint: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.parameters, Mapping) or not self.parameters:
            raise MergeError("search.parameters: give candidate values for at least one parameter")
        self.parameters = {name: _values(name, spec) for name, spec in self.parameters.items()}
        if not isinstance(self.objective, Mapping) or not self.objective:
            raise MergeError("search.objective: give at least one metric and its weight")
        for key, weight in self.objective.items():
            if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight):
                raise MergeError(f"search.objective: the weight of {shown(key)} must be a number, got {shown(weight)}")
        if self.in_memory not in (True, False, "auto"):
            raise MergeError(f"search.in_memory: expected true, false or auto, got {shown(self.in_memory)}")
        if self.constraint is not None:
            self.constraint = _constraint(self.constraint)

    def epsilon(self, metric: str) -> float:
        """The constraint's allowed drop below the base for ``metric``."""
        assert self.constraint is not None
        epsilon = self.constraint["epsilon"]
        return float(epsilon.get(metric, epsilon["default"]) if isinstance(epsilon, Mapping) else epsilon)

    @classmethod
    def from_dict(cls, data: Any, source: str = "search") -> SearchConfig:
        if not isinstance(data, Mapping):
            raise MergeError(f"{source}: expected a mapping")
        known = {field.name for field in dataclasses.fields(cls)}
        if unknown := sorted(set(data) - known):
            raise MergeError(f"{source}: unknown key {shown(unknown[0])}; known keys: {', '.join(sorted(known))}")
        if missing := sorted({"suite", "parameters", "objective"} - set(data)):
            raise MergeError(f"{source}: missing key {shown(missing[0])}")
        return cls(**data)

    def candidates(self, base: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Every combination of the searched values, over the config's other parameters."""
        names = list(self.parameters)
        return [{**base, **dict(zip(names, values))} for values in itertools.product(*self.parameters.values())]


def _constraint(spec: Any) -> dict[str, Any]:
    """``search.constraint`` checked: ``epsilon`` (a number ≥ 0, or ``{metric: ε, default: ε}``) and optional ``metrics``."""
    if not isinstance(spec, Mapping) or "epsilon" not in spec or set(spec) - {"epsilon", "metrics"}:
        raise MergeError(
            f"search.constraint: expected {{epsilon: ε, metrics: [...]}} (metrics optional), got {shown(spec)}"
        )

    def number(value: Any, where: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value >= 0):
            raise MergeError(f"search.constraint.{where}: expected a number >= 0, got {shown(value)}")
        return float(value)

    epsilon = spec["epsilon"]
    if isinstance(epsilon, Mapping):
        if "default" not in epsilon:
            raise MergeError("search.constraint.epsilon: a mapping needs a 'default' for the metrics it does not name")
        epsilon = {str(key): number(value, f"epsilon.{key}") for key, value in epsilon.items()}
    else:
        epsilon = number(epsilon, "epsilon")
    metrics = spec.get("metrics")
    if metrics is not None and (
        not isinstance(metrics, list) or not metrics or not all(isinstance(m, str) for m in metrics)
    ):
        raise MergeError(f"search.constraint.metrics: expected a non-empty list of metric names, got {shown(metrics)}")
    return {"epsilon": epsilon, "metrics": metrics}


def _values(name: str, spec: Any) -> list[Any]:
    if isinstance(spec, Mapping):
        if set(spec) != {"min", "max", "steps"}:
            raise MergeError(f"search.parameters.{name}: a range is {{min, max, steps}}, got {shown(dict(spec))}")
        low, high, steps = spec["min"], spec["max"], spec["steps"]
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (low, high)) or not (
            isinstance(steps, int) and steps >= 1
        ):
            raise MergeError(f"search.parameters.{name}: min and max must be numbers and steps a positive integer")
        return [round(float(value), 10) for value in np.linspace(low, high, steps)]
    if isinstance(spec, list) and spec:
        return list(spec)
    raise MergeError(f"search.parameters.{name}: expected a non-empty list of values or {{min, max, steps}}")


@dataclasses.dataclass
class MergeConfig:
    """Everything one merge needs; validated on construction (unknown method, bad sizes, bad references).

    Args:
        models: input model folders (paths or :class:`ModelSpec`).
        method: a registered method name (``soup``, ``slerp``, ``task_arithmetic``, ``hierarchical``).
        output_dir: the folder to create.
        parameters: the method's parameters (``weights``, ``t``, ``base``, ``ir_models``, …).
        reference: the input whose non-weight files (config, tokenizer, modules) and non-float tensors
            are used: an index into ``models`` or a path; default the first model.
        max_shard_size: bytes or a size string per safetensors shard.
        precise: compute in float64 instead of float32 (slower; float32 agrees to about 1e-7).
        model_ids: Hub ids for the card: a list with one per model (``None``: found from the folder;
            the same as ``id:`` in a ``models`` entry), or ``{path: id}`` for any input, such as a
            ``base`` named in ``parameters``.
        overwrite: replace a non-empty ``output_dir``.
        write_card: write README.md (and the delta heatmap for ``hierarchical``).
        allow_negative_weights: accept negative averaging weights (a soup's ``weights``, the ``weight`` of
            mergekit's ``linear``, ``nuslerp``, ``multislerp``), an extrapolation; refused by default.
        prompts_from: the model (an index into ``models`` or a path) whose named prompts the merged
            folder keeps when the models' prompts disagree (:mod:`hf_unified_embed.merge.merged_prompts`).
        card: card options.
        search: a merge search (see :mod:`hf_unified_embed.merge.search`): candidates are scored on dev
            sets and the best is written.
    """

    models: list[ModelSpec]
    method: str
    output_dir: Path
    parameters: dict[str, Any] = dataclasses.field(default_factory=dict)
    reference: int | str | Path | None = None
    prompts_from: int | str | Path | None = None
    max_shard_size: int | str = DEFAULT_MAX_SHARD_SIZE
    precise: bool = False
    model_ids: list[str | None] | dict[str, str | None] | None = None
    overwrite: bool = False
    write_card: bool = True
    allow_negative_weights: bool = False
    card: CardConfig = dataclasses.field(default_factory=CardConfig)
    search: SearchConfig | None = None

    def given_ids(self) -> dict[Path, str]:
        """The Hub ids given in the config, by input folder."""
        given = {spec.path: spec.id for spec in self.models if spec.id}
        if isinstance(self.model_ids, dict):
            given.update({Path(path): model_id for path, model_id in self.model_ids.items() if model_id})
        return given

    def __post_init__(self) -> None:
        if not isinstance(self.models, (list, tuple)):
            raise MergeError(f"models: expected a list of model folders, got {shown(self.models)}")
        self.models = [ModelSpec.parse(entry, f"models[{index}]") for index, entry in enumerate(self.models)]
        if not isinstance(self.output_dir, (str, Path)) or not str(self.output_dir):
            raise MergeError(f"output_dir: expected a folder path, got {shown(self.output_dir)}")
        self.output_dir = Path(self.output_dir)
        if not isinstance(self.parameters, Mapping):
            raise MergeError(
                f"parameters: expected a mapping of the method's parameters, got {shown(self.parameters)}"
            )
        get_merge_method(self.method)
        if isinstance(self.model_ids, Mapping):
            self.model_ids = {
                str(path): None if model_id is None else check_hub_id(model_id, f"model_ids entry for {path}")
                for path, model_id in self.model_ids.items()
            }
        elif self.model_ids is not None:
            if not isinstance(self.model_ids, list) or len(self.model_ids) != len(self.models):
                raise MergeError(
                    f"model_ids: expected one Hub id (or null) per model, or {{path: id}}, got {shown(self.model_ids)}"
                )
            for spec, model_id in zip(self.models, self.model_ids):
                if model_id is not None and spec.id is not None and spec.id != model_id:
                    raise MergeError(f"model_ids: {spec.path} has the id {shown(spec.id)} and {shown(model_id)}")
                if model_id is not None:
                    spec.id = check_hub_id(model_id, f"model_ids entry for {spec.path}")
        for flag in ("precise", "overwrite", "write_card", "allow_negative_weights"):
            if not isinstance(getattr(self, flag), bool):
                raise MergeError(f"{flag}: expected true or false, got {shown(getattr(self, flag))}")
        try:
            parse_size(self.max_shard_size)
        except ValueError as error:
            raise MergeError(str(error)) from error
        if isinstance(self.card, Mapping):
            card_keys = {field.name for field in dataclasses.fields(CardConfig)}
            if unknown := sorted(set(self.card) - card_keys):
                raise MergeError(f"unknown key card.{unknown[0]}; known: {', '.join(sorted(card_keys))}")
            if mismatch := mismatched_field(CardConfig, self.card):
                raise MergeError(f"card.{mismatch[0]}: {mismatch[1]}")
            self.card = CardConfig(**self.card)
        elif not isinstance(self.card, CardConfig):
            raise MergeError(f"card: expected a mapping of card options, got {shown(self.card)}")
        if isinstance(self.search, Mapping):
            self.search = SearchConfig.from_dict(self.search)
        elif self.search is not None and not isinstance(self.search, SearchConfig):
            raise MergeError(f"search: expected a mapping, got {shown(self.search)}")
        for key in ("reference", "prompts_from"):
            value = getattr(self, key)
            if isinstance(value, int) and not 0 <= value < len(self.models):
                raise MergeError(f"{key}: index {value} is out of range for {len(self.models)} models")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "config") -> MergeConfig:
        if not isinstance(data, Mapping):
            raise MergeError(f"{source}: expected a mapping at the top level")
        known = {field.name for field in dataclasses.fields(cls)}
        if unknown := sorted(set(data) - known):
            raise MergeError(f"{source}: unknown key {shown(unknown[0])}; known keys: {', '.join(sorted(known))}")
        for required in ("method", "output_dir"):
            if required not in data:
                raise MergeError(f"{source}: missing key {shown(required)}")
        if "models" not in data and not get_merge_method(data["method"]).models_optional:
            raise MergeError(f"{source}: missing key 'models'")
        values = dict(data)
        values.setdefault("models", [])
        try:
            config = cls(**values)
            if config.search is None:
                # The method's parameters are part of the file: a wrong one is reported with its name.
                get_merge_method(config.method).from_params([spec.path for spec in config.models], config.parameters)
            return config
        except MergeError as error:
            raise MergeError(f"{source}: {error}") from error

    @classmethod
    def from_yaml(cls, path: str | Path) -> MergeConfig:
        """Read a config file; its relative paths are relative to the file's folder (:func:`read_merge_config`)."""
        return cls.from_dict(read_merge_config(path), source=str(path))


def read_merge_config(path: str | Path, error: type[Exception] = MergeError) -> dict[str, Any]:
    """The mapping of the merge config file ``path``, its relative paths resolved against the file's folder.

    What the command line reads before its flags (relative to the current directory) override values.
    A malformed file, a key given twice included, raises ``error`` with one line naming file and line.
    """
    return paths_relative_to(read_yaml_mapping(path, error), yaml_folder(path))


def paths_relative_to(data: Mapping[str, Any], folder: Path) -> dict[str, Any]:
    """A copy of a merge config mapping with its relative paths resolved against ``folder``.

    Values of an unexpected type are left alone for :meth:`MergeConfig.from_dict` to refuse.
    """

    def local(value: Any) -> Any:  # always a path: output_dir, a suite file, its data_root
        return relative_to_file(value, folder) if isinstance(value, str) else value

    def model(value: Any) -> Any:
        # A model: a folder, or a Hub model id (org/name), which is no path: looks_local decides, from
        # the file's folder, as for every model a merge reads.
        return local(value) if isinstance(value, str) and looks_local(value, folder) else value

    values = dict(data)
    for key, resolve in (("output_dir", local), ("reference", model), ("prompts_from", model)):
        if key in values:
            values[key] = resolve(values[key])
    models = values.get("models")
    if isinstance(models, list):
        values["models"] = [
            {**entry, "path": model(entry["path"])} if isinstance(entry, Mapping) and "path" in entry else model(entry)
            for entry in models
        ]
    model_ids = values.get("model_ids")
    if isinstance(model_ids, Mapping):
        values["model_ids"] = {model(key): model_id for key, model_id in model_ids.items()}
    parameters = values.get("parameters")
    if isinstance(parameters, Mapping):
        path_parameters = _path_parameters(values.get("method"))
        values["parameters"] = {
            name: _local_paths(value, model) if name in path_parameters else value
            for name, value in parameters.items()
        }
    search = values.get("search")
    if isinstance(search, Mapping):
        search = values["search"] = dict(search)
        if "data_root" in search:
            search["data_root"] = local(search["data_root"])
        suite = search.get("suite")
        if isinstance(suite, str):
            search["suite"] = local(suite)
        elif isinstance(suite, Mapping):
            root = suite.get("data_root")
            search["suite"] = {**suite, "data_root": str(folder) if root is None else local(root)}
    return values


def _path_parameters(method: Any) -> set[str]:
    """The parameters of merge method ``method`` that name model folders: its fields annotated with ``Path``."""
    if not isinstance(method, str):
        return set()
    try:
        cls = get_merge_method(method)
    except MergeError:
        return set()  # reported by MergeConfig with the file's name
    return {field.name for field in dataclasses.fields(cls) if field.name != "models" and "Path" in str(field.type)}


def _local_paths(value: Any, resolve: Any) -> Any:
    """``value`` (a model, or a list of models and model indices) with its paths resolved by ``resolve``."""
    if isinstance(value, list):
        return [resolve(item) for item in value]
    return resolve(value)
