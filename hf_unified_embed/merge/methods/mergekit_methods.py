"""Every merge method of mergekit, computed by mergekit's own per-tensor code inside the streaming engine.

mergekit (``mergekit.merge_methods``) defines each method as a self-describing object: a spec with
its parameters (name, scope, default, type), an input contract (base policy, input counts) and a
kernel that merges one tensor group. :class:`MergekitMethod` wraps one such object; a subclass is
made on first use (:func:`mergekit_method`) for every method in mergekit's registry whose name this
package does not define natively (``soup``, ``task_arithmetic`` and ``hierarchical`` stream block by
block instead), so mergekit — the ``merge`` extra — is imported only by merges that use it. So TIES,
DARE, DELLA, breadcrumbs, SCE, model stock, Karcher mean, SLERP, NuSLERP, Multi-SLERP, RAM,
NearSwap, Arcee Fusion, linear and passthrough are all available under mergekit's names, with
mergekit's parameter names; mergekit's planner is not used (it fails on BERT checkpoints that store
the optional ``embeddings.position_ids``), the kernels are called per tensor.

Parameters follow ``SentenceTransformer.merge(method=..., parameters=...)``:

* ``base``: the base model (a path, or an index into ``models``); a base that is not among the
  models is read as an extra input. A method that requires a base and gets none uses ``models[0]``
  (as ``SentenceTransformer.merge`` does for SLERP);
* a per-input parameter (``weight``, ``density``, …) is one value for every input or a list with
  one value per input (per *non-base* input for task-vector methods), in ``models`` order;
  ``weight`` defaults to 1 and SLERP's ``t`` to 0.5;
* any value may be a mergekit *setting*: a number, a **gradient** list or a list of
  ``{filter: ..., value: ...}`` conditions. A gradient follows mergekit's schedule: transformer
  block *i* of *N* takes the value interpolated at i / (N − 1) along the list (1 when N = 1), and
  every tensor outside the blocks — embeddings, final norm, pooler, sentence-transformers heads —
  takes the list's first value, as mergekit's pre- and post-weights do. ``{filter: s}`` applies
  when ``s`` occurs in the tensor name.

Random methods (DARE, DELLA) seed torch's generator per tensor from ``seed`` and the tensor name,
so a merge is reproducible and does not depend on the order tensors are visited in.
"""

from __future__ import annotations

import dataclasses
import functools
import zlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from hf_unified_embed.errors import MergeError, shown
from hf_unified_embed.merge.layers import layer_positions
from hf_unified_embed.merge.methods.merge_method import (
    LayerGroups,
    MergeMethod,
    TensorMergeMethod,
    TensorReader,
)
from hf_unified_embed.utils import stack

if TYPE_CHECKING:
    from mergekit.merge_methods import MergeMethod as MergekitKernel
    from mergekit.merge_methods.base import ParameterSpec

    from hf_unified_embed.merge.loader import LazyCheckpoint

#: Defaults ``SentenceTransformer.merge`` gives to parameters mergekit requires.
SENTENCE_TRANSFORMERS_DEFAULTS = {"weight": 1.0, "t": 0.5}
#: Parameters of the adapter itself, next to mergekit's.
OWN_PARAMETERS = ("base", "seed")
#: mergekit's methods that average their inputs: a negative ``weight`` extrapolates (see
#: :attr:`MergeMethod.averaging_weights`). The task-vector methods (TIES, DARE, DELLA, breadcrumbs) scale
#: task vectors by ``weight`` and ``lambda``, where a negative value negates a task.
AVERAGING_METHODS = ("linear", "nuslerp", "multislerp")


def _setting(value: Any) -> Any:
    """A YAML/Python value as a mergekit setting: ``{filter, value}`` dicts become ConditionalParameters."""
    from mergekit.config import ConditionalParameter

    if isinstance(value, list) and value and all(isinstance(item, Mapping) for item in value):
        return [ConditionalParameter(**item) for item in value]
    return value


@dataclasses.dataclass
class MergekitMethod(TensorMergeMethod):
    """A mergekit merge method computed tensor by tensor by mergekit's own kernel.

    Args:
        models: the checkpoints to merge.
        base: the base model: a path or an index into ``models`` (see the module docs).
        seed: seeds the random draws of DARE / DELLA, per tensor.
        settings: mergekit's parameters by name (``weight``, ``density``, ``t``, ``lambda``, …).

    Example::

        merge_models(["ir-run", "sts-run"], "ties", "ties-out", base="all-MiniLM-L6-v2",
                     weight=[0.6, 0.4], density=0.5)
    """

    mergekit_name: ClassVar[str]
    base: Path | int | None = None
    seed: int = 0
    settings: dict[str, Any] = dataclasses.field(default_factory=dict)

    @classmethod
    def kernel(cls) -> MergekitKernel:
        from mergekit import merge_methods

        return merge_methods.get(cls.mergekit_name)

    @classmethod
    def from_params(cls, models: Sequence[str | Path], params: Mapping[str, Any]) -> MergeMethod:
        specs = {spec.name for spec in cls.kernel().spec.parameters}
        unknown = sorted(set(params) - specs - set(OWN_PARAMETERS))
        if unknown:
            known = ", ".join([*OWN_PARAMETERS, *sorted(specs)])
            raise MergeError(f"method {shown(cls.name)} has no parameter {shown(unknown[0])}; its parameters: {known}")
        own = {key: params[key] for key in OWN_PARAMETERS if key in params}
        settings = {key: value for key, value in params.items() if key not in OWN_PARAMETERS}
        try:
            return cls(models=[Path(model) for model in models], settings=settings, **own)
        except TypeError as error:
            raise MergeError(f"method {shown(cls.name)}: invalid parameter value: {error}") from error

    def __post_init__(self) -> None:
        super().__post_init__()
        contract = self.kernel().spec.contract
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise MergeError(f"{self.name}: seed must be an integer, got {shown(self.seed)}")
        if isinstance(self.base, int) and not isinstance(self.base, bool):
            if not 0 <= self.base < len(self.models):
                raise MergeError(f"{self.name}: base index {self.base} is out of range for {len(self.models)} models")
            self.base = self.models[self.base]
        elif self.base is not None:
            self.base = Path(str(self.base))
        policy = contract.base.value
        if self.base is not None and policy in ("ignored", "forbidden"):
            raise MergeError(f"{self.name} does not use a base model; remove base")
        if self.base is None and policy == "required" and self.models:
            self.base = self.models[0]  # as SentenceTransformer.merge does for SLERP
        self.inputs = [*self.models, *([self.base] if self.base is not None and self.base not in self.models else [])]
        self.base_index = self.inputs.index(self.base) if self.base is not None else None
        try:
            contract.validate_ids(list(range(len(self.inputs))), self.base_index)
        except ValueError as error:
            raise MergeError(f"{self.name}: {error} (models: {len(self.models)}, base: {self.base})") from None
        self._parameters = self._check_settings()
        self._positions: dict[str, float] = {}

    def _check_settings(self) -> dict[str, tuple[ParameterSpec, Any]]:
        """``{name: (spec, setting or per-input list of settings)}``, each leaf validated at both schedule ends."""
        from mergekit.config import evaluate_setting

        parameters: dict[str, tuple[ParameterSpec, Any]] = {}
        non_base = len(self.inputs) - (self.base_index is not None)
        for spec in self.kernel().spec.parameters:
            value = self.settings.get(spec.name, SENTENCE_TRANSFORMERS_DEFAULTS.get(spec.name))
            if value is None:
                if spec.required:
                    raise MergeError(f"{self.name} needs the parameter {shown(spec.name)}")
                continue
            if spec.scope.value == "shared":
                leaves = [value]
                setting: Any = _setting(value)
            else:
                count = len(self.inputs) if spec.scope.value == "input" else non_base
                what = "inputs" if spec.scope.value == "input" else "non-base inputs"
                is_per_input = isinstance(value, list) and not all(isinstance(item, Mapping) for item in value)
                leaves = list(value) if is_per_input else [value] * count
                if len(leaves) != count:
                    raise MergeError(f"{self.name}: {spec.name} has {len(leaves)} values for {count} {what}")
                setting = [_setting(leaf) for leaf in leaves]
            for leaf in leaves:
                for position in (0.0, 1.0):
                    try:
                        evaluate_setting("", _setting(leaf), position, validate=spec.validate)
                    except (ValueError, TypeError) as error:
                        raise MergeError(f"{self.name}: invalid {spec.name} {shown(leaf)}: {error}") from None
            parameters[spec.name] = (spec, setting)
        return parameters

    def input_paths(self) -> list[Path]:
        return list(self.inputs)

    def merged_paths(self) -> list[Path]:
        return list(self.inputs)

    def parameter(self, name: str) -> Any:
        return self.settings.get(name, SENTENCE_TRANSFORMERS_DEFAULTS.get(name))

    def input_roles(self) -> dict[Path, list[str]]:
        roles = super().input_roles()
        if self.base_index is not None:
            roles.setdefault(self.inputs[self.base_index], []).append("base")
        return roles

    def prepare(self, checkpoints: Mapping[Path, LazyCheckpoint], groups: LayerGroups) -> None:
        self._positions = layer_positions(groups)

    def resolved_parameters(self, name: str, group: str) -> dict[str, Any]:
        """The parameters of one tensor: settings evaluated at the group's schedule position."""
        from mergekit.config import evaluate_setting

        position = self._positions.get(group, 0.0)
        resolved: dict[str, Any] = {}
        for key, (spec, setting) in self._parameters.items():
            if spec.scope.value == "shared":
                resolved[key] = evaluate_setting(name, setting, position, validate=spec.validate)
            else:
                resolved[key] = [evaluate_setting(name, leaf, position, validate=spec.validate) for leaf in setting]
        return resolved

    def merge_tensor(self, name: str, group: str, read: TensorReader, dtype: torch.dtype) -> torch.Tensor:
        from mergekit.merge_methods import TensorGroup

        tensors = [read(path) for path in self.inputs]
        parameters = self.resolved_parameters(name, group)
        group_input = TensorGroup.from_tensors(tensors, base_index=self.base_index, name=name)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed + zlib.crc32(name.encode()))
            try:
                (result,) = self.kernel()((group_input,), parameters=parameters, dtype=dtype)
            except (ValueError, TypeError) as error:
                raise MergeError(f"{self.name}: tensor {shown(name)}: {error}") from error
        return result

    def group_weights(self, groups: LayerGroups) -> dict[str, dict[str, float]]:
        """The numeric parameters per layer group, as the schedule resolves them (first tensor of each)."""
        table: dict[str, dict[str, float]] = {}
        for group, names in groups.items():
            row: dict[str, float] = {}
            for key, value in self.resolved_parameters(names[0], group).items():
                values = value if isinstance(value, list) else [value]
                numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
                if len(numbers) == len(values):
                    row.update({key if len(numbers) == 1 else f"{key}[{i}]": float(v) for i, v in enumerate(numbers)})
            table[group] = row
        return table

    def recipe(self, path_text: Callable[[Path], str] = str) -> dict[str, Any]:
        recipe = super().recipe(path_text)
        settings = recipe.pop("settings")
        if isinstance(self.base, Path) and self.base in self.models:
            recipe["base"] = self.models.index(self.base)  # an index: the models are written once
        return {**recipe, **settings}


def mergekit_method_names() -> list[str]:
    """mergekit's method names (none without mergekit); the registry serves a native method of the same name first."""
    try:
        from mergekit.merge_methods import registered_methods
    except ImportError:
        return []
    return sorted(kernel.spec.name for kernel in registered_methods())


@functools.cache
def mergekit_method(name: str) -> type[MergekitMethod] | None:
    """The :class:`MergekitMethod` subclass for mergekit's method ``name``; ``None`` if mergekit has none.

    Built on first use, so that mergekit is imported only by merges that use it. An installed mergekit
    outside the declared range is an :class:`~hf_unified_embed.errors.IncompatibleStackError`.
    """
    if stack.installed_version("mergekit") is not None:
        stack.check(f"merge method {shown(name)} (one of mergekit's)", stack.mergekit_needs())
    if name not in mergekit_method_names():
        return None
    from mergekit import merge_methods

    spec = merge_methods.get(name).spec
    description = f"mergekit's {spec.pretty_name or spec.name}"
    if spec.reference_url:
        description += f" ({spec.reference_url})"
    attributes = {
        "name": spec.name,
        "mergekit_name": spec.name,
        "averaging_weights": ("weight",) if spec.name in AVERAGING_METHODS else (),
        "description": description,
        "__doc__": f"mergekit's ``{spec.name}`` method, computed by mergekit's own kernel (see :class:`MergekitMethod`).",
        "__module__": __name__,
    }
    return dataclasses.dataclass(type(f"Mergekit_{spec.name}", (MergekitMethod,), attributes))
