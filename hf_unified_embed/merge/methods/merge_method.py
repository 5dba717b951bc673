"""The merge-method interface (its registry is :mod:`.registry`).

A method is a small dataclass whose fields are its parameters, of one of two kinds:

* :class:`LinearMergeMethod` gives, per layer group, a coefficient per input; the engine
  (:mod:`hf_unified_embed.merge.engine`) streams such merges block by block through a float32
  (``precise``: float64) accumulator, so memory does not grow with the tensors or the inputs;
* :class:`TensorMergeMethod` computes one whole output tensor from whole input tensors, pulled
  through a ``read(path)`` callable (mergekit's methods, :mod:`.mergekit_methods`).

A method also describes itself, so that the card, the config reader and the CLI name no method:
its ``description`` and ``citation`` (card text), the roles of its inputs (:meth:`MergeMethod.input_roles`),
whether ``models`` may be left out of a config (``models_optional``) and extra card material
(:meth:`MergeMethod.card_section`, e.g. a plot). A method written in the user's own module is named
``package.module:ClassName`` wherever a method name is accepted (:func:`~hf_unified_embed.merge.methods.registry.get_merge_method`).
"""

from __future__ import annotations

import dataclasses
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from hf_unified_embed.errors import MergeError, shown
from hf_unified_embed.utils.typecheck import mismatched_field

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
        averaging_weights: the parameters that are weights of an average (``soup``'s ``weights``): a
            negative value extrapolates instead, so a merge refuses it unless ``allow_negative_weights``
            (:func:`hf_unified_embed.merge.checks.check_nonnegative_weights`). Scales of task vectors
            (``task_arithmetic``'s λ) are not among them: a negative one negates a task, a use of its own.
    """

    name: ClassVar[str]
    description: ClassVar[str] = ""
    citation: ClassVar[str | None] = None
    models_optional: ClassVar[bool] = False
    averaging_weights: ClassVar[tuple[str, ...]] = ()
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
                f"method {shown(cls.name)} has no parameter {shown(unknown[0])}; its parameters: {', '.join(known)}"
            )
        if mismatch := mismatched_field(cls, params):
            raise MergeError(f"method {shown(cls.name)}: parameter {shown(mismatch[0])}: {mismatch[1]}")
        try:
            return cls(models=[Path(model) for model in models], **params)
        except TypeError as error:  # a parameter of the wrong type (a number where a path is expected…)
            raise MergeError(f"method {shown(cls.name)}: invalid parameter value: {error}") from error

    def input_paths(self) -> list[Path]:
        """Every checkpoint this method reads (models first, then bases and specialists)."""
        return list(self.models)

    def merged_paths(self) -> list[Path]:
        """The inputs the result is made of (for the card's ``base_model``): ``models``, plus a base that enters the sum."""
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
    def group_weights(self, groups: LayerGroups) -> dict[str, dict[str, float]]:
        """``{group: {column: weight}}`` for the card's per-layer table."""

    def parameter(self, name: str) -> Any:
        """The value of parameter ``name`` as the method uses it (``None`` when it has none)."""
        return getattr(self, name, None)

    def negative_weights(self) -> list[str]:
        """``"weights[1] = -1"`` for each negative number in :attr:`averaging_weights` (lists, gradients,
        ``{filter, value}`` conditions included)."""

        def numbers(value: Any, where: str) -> list[tuple[str, float]]:
            if isinstance(value, bool):
                return []
            if isinstance(value, (int, float)):
                return [(where, float(value))]
            if isinstance(value, Mapping):
                return numbers(value.get("value"), where)
            if isinstance(value, (list, tuple)):
                return [found for index, item in enumerate(value) for found in numbers(item, f"{where}[{index}]")]
            return []

        return [
            f"{where} = {value:g}"
            for name in self.averaging_weights
            for where, value in numbers(self.parameter(name), name)
            if value < 0
        ]

    def recipe(self, path_text: Callable[[Path], str] = str) -> dict[str, Any]:
        """The parameters as plain data: the ``parameters`` of the ``merge_config.yaml`` written beside the
        merge (so :meth:`from_params` must accept them and give the same merge), the safetensors metadata
        and the card.

        Args:
            path_text: how a path is written (the driver writes a local input as ``../NAME``, a Hub model
                by its id).
        """

        def plain(value: Any) -> Any:
            if isinstance(value, Path):
                return path_text(value)
            if isinstance(value, (list, tuple)):
                return [plain(item) for item in value]
            if isinstance(value, dict):
                return {str(key): plain(item) for key, item in value.items()}
            return value

        return {"method": self.name, **{f.name: plain(getattr(self, f.name)) for f in dataclasses.fields(self)}}


class TensorMergeMethod(MergeMethod):
    """A method that computes each output tensor from whole input tensors."""

    @abstractmethod
    def merge_tensor(self, name: str, group: str, read: TensorReader, dtype: torch.dtype) -> torch.Tensor:
        """The merged value of one floating-point tensor (any float dtype; the driver casts it).

        ``read(path)`` returns the input's tensor (checked for NaN/inf); the result may be computed
        in ``dtype`` (float32, or float64 when the merge is ``precise``).
        """


class LinearMergeMethod(MergeMethod):
    """A method whose result is, per layer group, a fixed linear combination of the inputs.

    The engine streams it in blocks; an input with coefficient 0 is still read and checked for
    NaN/inf, so that every listed input is known to be sound.
    """

    @abstractmethod
    def coefficients(self, group: str) -> dict[Path, float]:
        """``{input: coefficient}`` of the layer group."""


def check_weights(method: str, weights: Sequence[float] | float, count: int, what: str = "models") -> list[float]:
    """Weights as floats, one per input, all finite; one number stands for the same weight for every input."""
    if isinstance(weights, (int, float)) and not isinstance(weights, bool):
        values: list[Any] = [weights] * count
    elif isinstance(weights, Sequence) and not isinstance(weights, str):
        values = list(weights)
    else:
        raise MergeError(f"{method}: weights must be a number or a list of numbers, got {shown(weights)}")
    if len(values) != count:
        raise MergeError(f"{method}: got {len(values)} weights for {count} {what}")
    for index, weight in enumerate(values):
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight):
            raise MergeError(f"{method}: weight {index} must be a finite number, got {shown(weight)}")
    return [float(weight) for weight in values]
