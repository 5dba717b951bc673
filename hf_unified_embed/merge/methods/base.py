"""The merge-method interface and its registry.

A method is a small dataclass whose fields are its parameters. The merge driver
(:func:`hf_unified_embed.merge.api.run_merge`) validates the inputs, then asks the method for one
tensor at a time; the method pulls the input tensors it needs through a ``read(path)`` callable, so
a linear method holds one input tensor plus a float64 accumulator, whatever the number of inputs.

A method also describes itself, so that the card, the config reader and the CLI name no method:
its ``description`` and ``citation`` (card text), the roles of its inputs (:meth:`MergeMethod.input_roles`),
whether ``models`` may be left out of a config (``models_optional``) and extra card material
(:meth:`MergeMethod.card_section`, e.g. a plot). A method written in the user's own module is named
``package.module:ClassName`` wherever a method name is accepted (:func:`get_merge_method`).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import torch

from hf_unified_embed.errors import MergeError
from hf_unified_embed.plugins import import_object, is_import_path

if TYPE_CHECKING:
    from hf_unified_embed.merge.loader import LazyCheckpoint

TensorReader = Callable[[Path], torch.Tensor]
"""Reads the current tensor from the input at a path (already checked for NaN/inf)."""

LayerGroups = Mapping[str, Sequence[str]]
"""Ordered ``{layer group: tensor names}`` from :func:`hf_unified_embed.merge.layers.group_tensor_names`."""


@dataclasses.dataclass
class MergeMethod(ABC):
    """Base of every merge method; subclasses are dataclasses whose fields are the method parameters.

    Args:
        models: the checkpoints being merged, in the user's order.

    Class attributes (what the card and the config reader ask of a method):
        name: the registry name, used in the card's tags and title.
        description: one line for the card ("a weighted average of whole checkpoints, Model Soups").
        citation: BibTeX of the method's paper for the card, or ``None``.
        models_optional: the method can name its inputs through its own parameters, so a config
            may leave ``models`` out.
    """

    name: ClassVar[str]
    description: ClassVar[str] = ""
    citation: ClassVar[str | None] = None
    models_optional: ClassVar[bool] = False
    models: list[Path]

    def __post_init__(self) -> None:
        self.models = [Path(model) for model in self.models]
        if len(set(self.models)) != len(self.models):
            raise MergeError(f"{self.name}: the same model is listed twice in models: {[str(m) for m in self.models]}")

    @classmethod
    def from_params(cls, models: Sequence[str | Path], params: Mapping[str, Any]) -> MergeMethod:
        """Build and validate the method; unknown parameter names are an error that lists the known ones."""
        known = [field.name for field in dataclasses.fields(cls) if field.name != "models"]
        unknown = sorted(set(params) - set(known))
        if unknown:
            raise MergeError(
                f"method {cls.name!r} has no parameter {unknown[0]!r}; its parameters: {', '.join(known)}"
            )
        try:
            return cls(models=[Path(model) for model in models], **params)
        except TypeError as error:  # a parameter of the wrong type (a number where a path is expected…)
            raise MergeError(f"method {cls.name!r}: invalid parameter value: {error}") from error

    def input_paths(self) -> list[Path]:
        """Every checkpoint this method reads (models first, then bases and specialists)."""
        return list(self.models)

    def input_roles(self) -> dict[Path, list[str]]:
        """What each input is for, as the card lists it: ``{path: ["IR soup"]}``, ``{base: ["base"]}``.

        Inputs that are read but not merged (a base, specialists) appear here and in
        :meth:`input_paths`, not in ``models``. The default gives the merged models no role.
        """
        return {path: [] for path in self.models}

    def card_section(self, directory: Path) -> str | None:
        """Markdown added to the card after the per-layer table (``None``: nothing).

        Files it refers to (plots) are written into ``directory``, the model folder being built.
        """
        return None

    def prepare(self, checkpoints: Mapping[Path, LazyCheckpoint], groups: LayerGroups) -> None:  # noqa: B027
        """Work done once before the stream, after the inputs were checked (optional)."""

    @abstractmethod
    def merge_tensor(self, name: str, group: str, read: TensorReader) -> torch.Tensor:
        """The merged value of one floating-point tensor (any float dtype; the driver casts it)."""

    @abstractmethod
    def group_weights(self, groups: LayerGroups) -> dict[str, dict[str, float]]:
        """``{group: {column: weight}}`` for the card's per-layer table."""

    def recipe(self) -> dict[str, Any]:
        """The parameters as plain data, for the safetensors metadata and the card."""

        def plain(value: Any) -> Any:
            if isinstance(value, Path):
                return str(value)
            if isinstance(value, (list, tuple)):
                return [plain(item) for item in value]
            if isinstance(value, dict):
                return {str(key): plain(item) for key, item in value.items()}
            return value

        return {"method": self.name, **{f.name: plain(getattr(self, f.name)) for f in dataclasses.fields(self)}}


class _Float64Accumulator:
    """A float64 accumulator reused from tensor to tensor, fed through a small conversion buffer.

    A fresh multi-megabyte allocation costs more than the arithmetic on it (every page faults in
    on first touch), and adding a float32 tensor into a float64 one takes torch's slow mixed-dtype
    path. So each input is converted block by block into a cache-sized float64 buffer and added
    from there: two fast same-dtype passes, and no second buffer the size of the tensor.
    """

    BLOCK = 1 << 20  # elements: 8 MB of float64

    def __init__(self) -> None:
        self._total = torch.empty(0, dtype=torch.float64)
        self._block = torch.empty(self.BLOCK, dtype=torch.float64)
        self._view = self._total

    def start(self, tensor: torch.Tensor, coefficient: float) -> None:
        if self._total.numel() < tensor.numel():
            self._total = torch.empty(tensor.numel(), dtype=torch.float64)
        self._view = self._total[: tensor.numel()]
        self._view.copy_(tensor.reshape(-1)).mul_(coefficient)

    def add(self, tensor: torch.Tensor, coefficient: float) -> None:
        flat = tensor.reshape(-1)
        for begin in range(0, flat.numel(), self.BLOCK):
            part = flat[begin : begin + self.BLOCK]
            block = self._block[: part.numel()].copy_(part)
            self._view[begin : begin + part.numel()].add_(block, alpha=coefficient)

    def result(self, shape: torch.Size, dtype: torch.dtype) -> torch.Tensor:
        # copy=True: the accumulator is reused for the next tensor, so even a float64 result must not alias it.
        return self._view.view(shape).to(dtype, copy=True)


class LinearMergeMethod(MergeMethod):
    """A method whose result is, per layer group, a fixed linear combination of the inputs."""

    @abstractmethod
    def coefficients(self, group: str) -> dict[Path, float]:
        """``{input: coefficient}`` of the layer group."""

    def merge_tensor(self, name: str, group: str, read: TensorReader) -> torch.Tensor:
        terms = [(path, coefficient) for path, coefficient in self.coefficients(group).items() if coefficient != 0.0]
        if not terms:
            return torch.zeros_like(read(self.models[0]))
        first = read(terms[0][0])
        shape, dtype = first.shape, first.dtype
        # float64 accumulation: a soup of k identical float32 tensors rounds back to them bit for bit.
        accumulator = self._accumulator
        accumulator.start(first, terms[0][1])
        del first
        for path, coefficient in terms[1:]:
            accumulator.add(read(path), coefficient)
        return accumulator.result(shape, dtype)

    @functools.cached_property
    def _accumulator(self) -> _Float64Accumulator:
        return _Float64Accumulator()


def check_weights(method: str, weights: Sequence[float], count: int, what: str = "models") -> list[float]:
    """Weights as floats, one per input, all finite."""
    weights = list(weights)
    if len(weights) != count:
        raise MergeError(f"{method}: got {len(weights)} weights for {count} {what}")
    for index, weight in enumerate(weights):
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight):
            raise MergeError(f"{method}: weight {index} must be a finite number, got {weight!r}")
    return [float(weight) for weight in weights]


MethodT = TypeVar("MethodT", bound=type[MergeMethod])

MERGE_METHODS: dict[str, type[MergeMethod]] = {}


def register_merge_method(cls: MethodT) -> MethodT:
    """Class decorator adding a method to :data:`MERGE_METHODS` under its ``name``."""
    if cls.name in MERGE_METHODS:
        raise ValueError(f"merge method {cls.name!r} is already registered")
    MERGE_METHODS[cls.name] = cls
    return cls


def get_merge_method(name: str) -> type[MergeMethod]:
    """A registered method by name, or a user's ``package.module:ClassName`` (a :class:`MergeMethod` subclass)."""
    if not isinstance(name, str):
        raise MergeError(f"method must be a name, got {name!r}")
    if name in MERGE_METHODS:
        return MERGE_METHODS[name]
    if not is_import_path(name):
        raise MergeError(
            f"unknown merge method {name!r}; available: {', '.join(sorted(MERGE_METHODS))} "
            "or 'package.module:ClassName' for your own"
        )
    method = import_object(name, MergeError, "merge method")
    if not (isinstance(method, type) and issubclass(method, MergeMethod)) or inspect.isabstract(method):
        raise MergeError(f"merge method {name!r} is not a concrete subclass of hf_unified_embed.merge.MergeMethod")
    if not isinstance(getattr(method, "name", None), str):
        raise MergeError(f"merge method {name!r} has no class attribute 'name' (the name its card shows)")
    return method
