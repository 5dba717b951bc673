"""The training recipe: one YAML file that names everything a unified training run needs.

Example (``examples/recipes/train.yaml`` is a complete one)::

    base_model: null                      # default: the packaged all-MiniLM-L6-v2
    base_model_id: sentence-transformers/all-MiniLM-L6-v2
    model: null                           # or {pooling: lasttoken, padding_side: left, torch_dtype: bfloat16,
                                          #     attn_implementation: sdpa, gradient_checkpointing: true}
                                          # (hf_unified_embed.training.backbones.ModelConfig; decoder LLMs)
    data:
      path: ../../outputs/demo/data       # a unified folder (Hub layout) or a Hub dataset repo; a relative
                                          # path is relative to this file's folder (here examples/recipes/)
      tasks: [stsb, sick, wikiqa, trecqa]
    losses:                               # per task type or task name: a class name and its kwargs
      retrieval: {name: MultiPositiveInfoNCELoss, temperature: 0.02}
      sts: {name: CoDiEmbSTSLoss}
      pair_classification: {name: my_package.losses:MyLoss}   # a user's own loss class
    negatives_per_query: 4
    max_seq_length: 128                   # default: the base model's
    instructions: true
    default_prompt_task: null             # the task encode_query / encode_document of the saved model use
                                          # (default: the first retrieval task with an instruction;
                                          # false: none, they encode bare texts)
    curriculum: null                      # or {plan: curriculum_plan.json} / {teacher: MODEL} (Data-CUBE),
                                          # with sampler {interleave: round_robin, instance_order: easy_to_hard}
    sampler: {interleave: shuffled, instance_order: random, batch_sizes: {wikiqa: 32}}
                                          # (the configuration that measured best, docs/quality.md)
                                          # or {kind: proportional}: sentence-transformers' stock sampler
                                          # (refused with several processes unless allow_multi_device: true)
    keep_base: {weight: 1.0}              # self-distillation from the frozen base (KeepBaseLoss) on every
                                          # task; {distillation: DistillMarginMSELoss, options: {...}} too
    training_args: {num_train_epochs: 1, per_device_train_batch_size: 16, learning_rate: 2.0e-5}
    peft: null                            # or a peft.LoraConfig as a mapping, plus merge_adapter: true
                                          # to save a full model instead of the adapter
    evaluation: ../suites/sample.yaml
    output_dir: ../../outputs/demo/sts-run
    hub: null                             # or {repo_id: me/model, private: true}

Relative paths are relative to the recipe file's own folder, as in build recipes, suites and merge
configs (:func:`load_train_recipe`); a recipe given as a mapping (:func:`recipe_from_dict`) has no
file, so its relative paths stay relative to the working folder. A key given twice is an error.

Unknown keys are an error (a typo must not silently fall back to a default). Parsing checks the
form of every section; :func:`hf_unified_embed.recipe.preflight.preflight` checks the rest (losses resolve,
training arguments exist, files exist) before a run loads any data.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from hf_unified_embed.errors import RecipeError, shown
from hf_unified_embed.schema import TASK_TYPES
from hf_unified_embed.training.backbones import ModelConfig
from hf_unified_embed.utils.arguments import checked_arguments
from hf_unified_embed.utils.locations import DEFAULT_BASE_MODEL_ID, looks_local, packaged_minilm_path
from hf_unified_embed.utils.naming import check_split_name, check_task_name
from hf_unified_embed.utils.typecheck import mismatched_field
from hf_unified_embed.utils.yaml_files import read_yaml_mapping, relative_to_file, yaml_folder


def _positive_int(value: Any, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {shown(value)}")


@dataclass
class DataConfig:
    """The unified folder or Hub dataset to train on. ``streaming: true`` reads each task as a stream
    (:func:`~hf_unified_embed.data.stream_unified`): nothing is downloaded or cached in full, each process
    reads its own shards, and the sampler's ``balance``/``weights`` weigh the tasks
    (:class:`~hf_unified_embed.sampling.MultiTaskStream`); ``shuffle_window`` rows of a task are shuffled together.
    ``on_data_change`` is what resuming a streaming run does with a task whose data changed since the
    checkpoint: ``refuse`` (default: one line naming the task and what changed) or ``restart`` (its pass
    starts afresh on the new data, with a warning)."""

    path: str
    tasks: list[str] | None = None
    split: str = "train"
    max_rows_per_task: int | None = None
    streaming: bool = False
    shuffle_window: int = 1000
    on_data_change: str = "refuse"

    def __post_init__(self) -> None:
        if not isinstance(self.path, str) or not self.path:
            raise ValueError(f"path must be a folder or Hub dataset id, got {shown(self.path)}")
        for task in self.tasks or []:
            check_task_name(task, "tasks")
        check_split_name(self.split, "split")
        if self.max_rows_per_task is not None:
            _positive_int(self.max_rows_per_task, "max_rows_per_task")
        _positive_int(self.shuffle_window, "shuffle_window")
        if self.on_data_change not in ("refuse", "restart"):
            raise ValueError(f"on_data_change must be 'refuse' or 'restart', got {shown(self.on_data_change)}")


@dataclass
class CurriculumConfig:
    """Either ``plan`` (a ``curriculum_plan.json`` whose dataset has the ``difficulty`` column) or ``teacher``."""

    plan: str | None = None
    teacher: str | None = None
    n_samples: int = 200
    method: str = "annealing"
    iterations: int = 2_000_000

    def __post_init__(self) -> None:
        from hf_unified_embed.curriculum.task_order import METHODS

        if self.method not in METHODS:
            raise ValueError(f"method must be one of {list(METHODS)}, got {shown(self.method)}")
        _positive_int(self.n_samples, "n_samples")
        _positive_int(self.iterations, "iterations")


#: ``sampler.kind`` values: this package's sampler, or sentence-transformers' stock multi-dataset samplers.
SAMPLER_KINDS = ("curriculum", "proportional", "round_robin")


@dataclass
class SamplerConfig:
    """``kind: curriculum`` (default) is :class:`~hf_unified_embed.sampling.CurriculumBatchSampler` with
    the other fields; ``proportional`` / ``round_robin`` are sentence-transformers' own
    ``MultiDatasetBatchSamplers``, which take none of them and do not keep devices on one task: with
    several processes they are refused unless ``allow_multi_device: true`` (see :func:`check_sampler_processes`).
    They draw each task's batches from sentence-transformers' per-dataset batch sampler, so with them
    ``training_args.batch_sampler: no_duplicates`` keeps repeated queries and positives out of a batch.

    With ``data.streaming: true`` the steps come from :class:`~hf_unified_embed.sampling.MultiTaskStream`:
    each step's task is drawn by weight — ``balance`` (``none``: in proportion to rows, ``equal``, ``sqrt``)
    or explicit ``weights: {task: weight}`` — and ``interleave``, ``instance_order`` and ``batch_sizes``
    do not apply."""

    kind: str = "curriculum"
    interleave: str = "shuffled"
    instance_order: str = "random"
    batch_sizes: dict[str, int] = field(default_factory=dict)
    balance: str = "none"
    weights: dict[str, float] = field(default_factory=dict)
    allow_multi_device: bool = False

    def __post_init__(self) -> None:
        from hf_unified_embed.sampling.batch_plan import BALANCES, INSTANCE_ORDERS, INTERLEAVES

        if self.kind not in SAMPLER_KINDS:
            raise ValueError(f"kind must be one of {list(SAMPLER_KINDS)}, got {shown(self.kind)}")
        for option, allowed in (
            ("interleave", INTERLEAVES),
            ("instance_order", INSTANCE_ORDERS),
            ("balance", BALANCES),
        ):
            if getattr(self, option) not in allowed:
                raise ValueError(f"{option} must be one of {list(allowed)}, got {shown(getattr(self, option))}")
        if not isinstance(self.batch_sizes, Mapping):
            raise ValueError(f"batch_sizes must map task names to sizes, got {shown(self.batch_sizes)}")
        for task, size in self.batch_sizes.items():
            check_task_name(task, "batch_sizes")
            _positive_int(size, f"batch_sizes.{task}")
        if not isinstance(self.weights, Mapping):
            raise ValueError(f"weights must map task names to weights, got {shown(self.weights)}")
        for task, weight in self.weights.items():
            check_task_name(task, "weights")
            if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 <= weight < float("inf"):
                raise ValueError(f"weights.{task} must be a number >= 0, got {shown(weight)}")
        if self.weights and not any(self.weights.values()):
            raise ValueError(f"weights {dict(self.weights)} are all 0: no task would be trained")
        if self.weights and self.balance != "none":
            raise ValueError(f"give either weights or balance {shown(self.balance)}, not both")
        if self.kind == "curriculum" and self.allow_multi_device:
            raise ValueError(
                "allow_multi_device only applies to the stock samplers; the curriculum sampler needs none"
            )
        if self.kind != "curriculum":
            defaults = SamplerConfig()
            changed = [
                f.name
                for f in dataclasses.fields(self)
                if f.name not in ("kind", "allow_multi_device") and getattr(self, f.name) != getattr(defaults, f.name)
            ]
            if changed:
                raise ValueError(
                    f"{changed} only apply to kind: curriculum, not to sentence-transformers' {self.kind}"
                )

    def batch_sampler(self, task_order: list[str] | None) -> Any:
        """The ``multi_dataset_batch_sampler`` argument: ours (a factory) or a stock sentence-transformers one."""

        if self.kind != "curriculum":
            from sentence_transformers.base.sampler import MultiDatasetBatchSamplers

            return MultiDatasetBatchSamplers(self.kind)
        from hf_unified_embed.sampling import CurriculumBatchSampler

        return CurriculumBatchSampler.configure(
            task_order=task_order,
            interleave=self.interleave,
            instance_order=self.instance_order,
            batch_sizes=dict(self.batch_sizes),
            balance=self.balance,
        )

    def training_stream(self, tasks: Mapping[str, Any], shuffle_window: int, on_data_change: str = "refuse") -> Any:
        """The :class:`~hf_unified_embed.sampling.MultiTaskStream` of a ``data.streaming`` run over ``tasks``."""
        from hf_unified_embed.sampling import MultiTaskStream

        return MultiTaskStream(
            tasks,
            weights=dict(self.weights) or self.balance,
            shuffle_window=shuffle_window,
            on_data_change=on_data_change,
        )

    def card_section(self, args: Any, stream: Any | None = None) -> dict[str, Any]:
        """The sampler as the card and ``train --check`` show it, with the run's processes and accumulation
        (``stream``: the run's :class:`~hf_unified_embed.sampling.MultiTaskStream`, for a streaming run)."""

        section: dict[str, Any]
        if stream is not None:
            section = stream.describe()
        elif self.kind != "curriculum":
            section = {"class": f"sentence-transformers MultiDatasetBatchSamplers.{self.kind.upper()}"}
            rows = getattr(args.batch_sampler, "value", args.batch_sampler)
            if rows != "batch_sampler":  # the rows of each task: sentence-transformers' BatchSamplers
                section["batch_sampler"] = rows
        else:
            section = {
                "class": "CurriculumBatchSampler",
                "interleave": self.interleave,
                "instance_order": self.instance_order,
                "batch_sizes": dict(self.batch_sizes) or "per_device_train_batch_size",
                "balance": self.balance,
            }
        return {
            **section,
            "world_size": args.world_size,
            "gradient_accumulation_steps": args.gradient_accumulation_steps,
        }

    def steps_per_task(self, args: Any, sizes: list[int], batch_sizes: list[int]) -> list[int]:
        """Optimizer steps each task gets in one epoch, as the configured sampler will plan them."""
        from hf_unified_embed.sampling.batch_plan import count_groups

        group_size = args.world_size * args.gradient_accumulation_steps
        if self.kind == "curriculum":
            counts = count_groups(
                sizes,
                batch_sizes,
                group_size=group_size,
                balance=self.balance,  # type: ignore[arg-type]  # checked by SamplerConfig
                drop_last=args.dataloader_drop_last,
            )
            return [int(count) for count in counts.groups]
        # sentence-transformers' samplers: every batch of every task (proportional), or as many batches of
        # each task as the smallest task has (round robin); accelerate then deals batches to processes.
        batches = [
            size // batch if args.dataloader_drop_last else -(-size // batch)
            for size, batch in zip(sizes, batch_sizes)
        ]
        if self.kind == "round_robin":
            batches = [min(batches)] * len(batches)
        return [-(-count // group_size) for count in batches]


#: ``keep_base.distillation`` values: the teacher-score losses that compare the student's scores with the base's.
KEEP_BASE_DISTILLATIONS = ("DistillKLLoss", "DistillMarginMSELoss")


@dataclass
class KeepBaseConfig:
    """Wrap every task loss in :class:`~hf_unified_embed.losses.KeepBaseLoss` (one frozen copy of the base):
    ``weight`` of the distillation term, the ``distillation`` loss by name and its ``options``."""

    weight: float = 1.0
    distillation: str = "DistillKLLoss"
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.weight, bool) or not isinstance(self.weight, (int, float)) or not self.weight >= 0:
            raise ValueError(f"weight must be a number >= 0, got {shown(self.weight)}")
        if self.distillation not in KEEP_BASE_DISTILLATIONS:
            raise ValueError(
                f"distillation must be one of {list(KEEP_BASE_DISTILLATIONS)}, got {shown(self.distillation)}"
            )
        if not isinstance(self.options, Mapping):
            raise ValueError(
                f"options must be a mapping of the distillation loss's arguments, got {shown(self.options)}"
            )

    def wrap(self, task_losses: Mapping[str, Any]) -> dict[str, Any]:
        """``{task: KeepBaseLoss(loss, ...)}`` sharing one frozen base; the default KL is unscaled (see KeepBaseLoss)."""
        from hf_unified_embed import losses

        distillation_class = getattr(losses, self.distillation)
        options = dict(self.options)
        if self.distillation == "DistillKLLoss":
            options.setdefault("scale_by_student_temperature", False)
        return losses.KeepBaseLoss.for_tasks(
            task_losses, weight=float(self.weight), distillation=lambda model: distillation_class(model, **options)
        )


@dataclass
class HubConfig:
    repo_id: str
    private: bool = False
    revision: str | None = None
    create_pr: bool = False


@dataclass
class TrainRecipe:
    data: DataConfig
    losses: dict[str, dict[str, Any]]
    output_dir: str
    base_model: str | None = None
    base_model_id: str | None = DEFAULT_BASE_MODEL_ID
    model: ModelConfig | None = None
    negatives_per_query: int = 1
    max_seq_length: int | None = None
    instructions: bool = True
    default_prompt_task: str | Literal[False] | None = None
    curriculum: CurriculumConfig | None = None
    sampler: SamplerConfig = field(default_factory=SamplerConfig)
    training_args: dict[str, Any] = field(default_factory=dict)
    keep_base: KeepBaseConfig | None = None
    peft: dict[str, Any] | None = None
    evaluation: str | dict[str, Any] | None = None
    evaluation_data_root: str | None = None
    hub: HubConfig | None = None
    seed: int = 42
    model_name: str | None = None
    source: str | None = field(default=None, repr=False)

    def resolved_base_model(self) -> str:
        """The base model to load: ``base_model`` by the one model rule
        (:func:`~hf_unified_embed.utils.model_loading.resolve_model`), else the packaged all-MiniLM-L6-v2."""
        if self.base_model is None:
            return packaged_minilm_path()
        from hf_unified_embed.utils.model_loading import resolve_and_say

        return resolve_and_say(self.base_model, "base_model")

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data.pop("source")
        return data


_SECTIONS: dict[str, type] = {
    "data": DataConfig,
    "model": ModelConfig,
    "curriculum": CurriculumConfig,
    "sampler": SamplerConfig,
    "hub": HubConfig,
    "keep_base": KeepBaseConfig,
}


def _section(cls: type, value: Any, key: str, origin: str) -> Any:
    if not isinstance(value, Mapping):
        raise RecipeError(f"{origin}: '{key}' must be a mapping, got {type(value).__name__}")
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(value) - names)
    if unknown:
        raise RecipeError(f"{origin}: unknown key(s) {unknown} in '{key}'; allowed: {sorted(names)}")
    mismatch = mismatched_field(cls, value)
    if mismatch:
        raise RecipeError(f"{origin}: '{key}.{mismatch[0]}': {mismatch[1]}")
    try:
        return cls(**value)
    except (TypeError, ValueError) as error:
        raise RecipeError(f"{origin}: '{key}': {error}") from None


def _losses(value: Any, origin: str) -> dict[str, dict[str, Any]]:
    if not isinstance(value, Mapping) or not value:
        raise RecipeError(f"{origin}: 'losses' must map task types or task names to a loss, e.g. sts: {{name: ...}}")
    losses = {}
    for key, spec in value.items():
        if isinstance(spec, str):
            spec = {"name": spec}
        if not isinstance(spec, Mapping) or not isinstance(spec.get("name"), str):
            raise RecipeError(f"{origin}: losses.{key} must be a loss class name or a mapping with 'name'")
        if key not in TASK_TYPES:
            check_task_name(key, f"{origin}: losses.{key} (a task type {list(TASK_TYPES)} or a task name)")
        losses[str(key)] = dict(spec)
    return losses


def recipe_from_dict(raw: Mapping[str, Any], origin: str = "<recipe>") -> TrainRecipe:
    """Validate a recipe mapping. It has no file, so its relative paths stay relative to the working
    folder (a recipe file's are relative to the file: :func:`load_train_recipe`)."""
    if not isinstance(raw, Mapping):
        raise RecipeError(f"{origin}: a recipe must be a mapping, got {type(raw).__name__}")
    names = {f.name for f in dataclasses.fields(TrainRecipe)} - {"source"}
    unknown = sorted(set(raw) - names)
    if unknown:
        raise RecipeError(f"{origin}: unknown key(s) {unknown}; allowed: {sorted(names)}")
    for required in ("data", "losses", "output_dir"):
        if raw.get(required) in (None, "", {}):
            raise RecipeError(f"{origin}: '{required}' is required")
    values = dict(raw)
    mismatch = mismatched_field(
        TrainRecipe, {k: v for k, v in values.items() if k not in {"data", "losses", *_SECTIONS}}
    )
    if mismatch:
        raise RecipeError(f"{origin}: '{mismatch[0]}': {mismatch[1]}")
    data = values["data"]
    values["data"] = _section(DataConfig, {"path": data} if isinstance(data, str) else data, "data", origin)
    values["losses"] = _losses(values["losses"], origin)
    for key in ("model", "curriculum", "sampler", "hub", "keep_base"):
        if values.get(key) is not None:
            values[key] = _section(_SECTIONS[key], values[key], key, origin)
    if values.get("sampler") is None:
        values.pop("sampler", None)
    for key in ("negatives_per_query", "max_seq_length"):
        value = values.get(key)
        if value is not None and value < 1:
            raise RecipeError(f"{origin}: '{key}' must be a positive integer, got {shown(value)}")
    if not 0 <= values.get("seed", 0) < 2**32:
        raise RecipeError(f"{origin}: 'seed' must be in [0, 2**32), got {shown(values['seed'])}")
    if isinstance(values.get("default_prompt_task"), str):
        check_task_name(values["default_prompt_task"], f"{origin}: default_prompt_task")
        if values.get("instructions") is False:
            raise RecipeError(
                f"{origin}: default_prompt_task needs instructions: true (without instructions the model gets no prompts)"
            )
    curriculum = values.get("curriculum")
    if curriculum is not None and bool(curriculum.plan) == bool(curriculum.teacher):
        raise RecipeError(f"{origin}: curriculum needs exactly one of 'plan' or 'teacher'")
    return TrainRecipe(**values, source=origin)


#: ``training_args`` that name a file or folder (``resume_from_checkpoint: true`` and a ``deepspeed``,
#: ``fsdp_config`` or ``accelerator_config`` given as a mapping are not paths and stay as they are).
TRAINING_ARGS_PATHS = (
    "output_dir",
    "logging_dir",
    "resume_from_checkpoint",
    "deepspeed",
    "fsdp_config",
    "accelerator_config",
)


@checked_arguments
def load_train_recipe(path: str | Path) -> TrainRecipe:
    """Read and validate a recipe YAML file; its relative paths are relative to the file's folder.

    A key given twice is an error naming both lines (:func:`~hf_unified_embed.utils.yaml_files.read_yaml_mapping`).
    The paths made absolute (:func:`~hf_unified_embed.utils.yaml_files.relative_to_file`): ``data`` /
    ``data.path``, ``base_model`` and ``curriculum.teacher`` when they name a local folder rather than a
    Hub id (:func:`~hf_unified_embed.utils.locations.looks_local`, looked up from the file's folder),
    ``curriculum.plan``, ``evaluation`` (a suite file; an inline suite's ``data_root``, which defaults
    to the recipe's folder), ``evaluation_data_root``, ``output_dir`` and the path-valued
    ``training_args`` (:data:`TRAINING_ARGS_PATHS`). So ``train`` reads the same files from any
    working folder.
    """
    raw = read_yaml_mapping(path, RecipeError)
    return recipe_from_dict(paths_relative_to(raw, yaml_folder(path)), origin=str(path))


def paths_relative_to(raw: Mapping[str, Any], folder: Path) -> dict[str, Any]:
    """A copy of the recipe mapping ``raw`` with its relative local paths resolved against ``folder``.

    Only values of the expected type are touched; anything else is left for :func:`recipe_from_dict`
    to refuse with its own message.
    """

    def local(value: Any) -> Any:  # a path that is always local
        return relative_to_file(value, folder) if isinstance(value, str) else value

    def local_or_hub(value: Any) -> Any:  # a local path or a Hub id
        return local(value) if isinstance(value, str) and looks_local(value, folder) else value

    values = dict(raw)
    for key, resolve in (("base_model", local_or_hub), ("evaluation_data_root", local), ("output_dir", local)):
        if key in values:
            values[key] = resolve(values[key])
    data = values.get("data")
    if isinstance(data, str):
        values["data"] = local_or_hub(data)
    elif isinstance(data, Mapping) and "path" in data:
        values["data"] = {**data, "path": local_or_hub(data["path"])}
    curriculum = values.get("curriculum")
    if isinstance(curriculum, Mapping):
        curriculum = values["curriculum"] = dict(curriculum)
        for key, resolve in (("plan", local), ("teacher", local_or_hub)):
            if key in curriculum:
                curriculum[key] = resolve(curriculum[key])
    evaluation = values.get("evaluation")
    if isinstance(evaluation, str):
        values["evaluation"] = local(evaluation)
    elif isinstance(evaluation, Mapping):
        root = evaluation.get("data_root")
        values["evaluation"] = {**evaluation, "data_root": str(folder) if root is None else local(root)}
    training_args = values.get("training_args")
    if isinstance(training_args, Mapping):
        values["training_args"] = {
            key: local(value) if key in TRAINING_ARGS_PATHS else value for key, value in training_args.items()
        }
    return values
