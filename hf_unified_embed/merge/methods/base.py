"""The merge-method interface and its registry.

A method is a small dataclass whose fields are its parameters. The merge driver
(:func:`hf_unified_embed.merge.api.run_merge`) validates the inputs, then asks the method for one
tensor at a time; the method pulls the input tensors it needs through a ``read(path)`` callable, so
a linear method holds one input tensor plus a float64 accumulator, whatever the number of inputs.
"""

from __future__ import annotations

import dataclasses
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import torch

from hf_unified_embed.merge.errors import MergeError

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
    """

    name: ClassVar[str]
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
        return cls(models=[Path(model) for model in models], **params)

    def input_paths(self) -> list[Path]:
        """Every checkpoint this method reads (models first, then bases and specialists)."""
        return list(self.models)

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


class LinearMergeMethod(MergeMethod):
    """A method whose result is, per layer group, a fixed linear combination of the inputs."""

    @abstractmethod
    def coefficients(self, group: str) -> dict[Path, float]:
        """``{input: coefficient}`` of the layer group."""

    def merge_tensor(self, name: str, group: str, read: TensorReader) -> torch.Tensor:
        # float64 accumulation: a soup of k identical float32 tensors rounds back to them bit for bit.
        merged: torch.Tensor | None = None
        for path, coefficient in self.coefficients(group).items():
            if coefficient == 0.0:
                continue
            tensor = read(path)
            if merged is None:
                merged = tensor.to(torch.float64, copy=True).mul_(coefficient)
            else:
                merged.add_(tensor, alpha=coefficient)
        if merged is None:
            return torch.zeros_like(read(self.models[0]), dtype=torch.float64)
        return merged


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
    try:
        return MERGE_METHODS[name]
    except KeyError:
        raise MergeError(f"unknown merge method {name!r}; available: {', '.join(sorted(MERGE_METHODS))}") from None
