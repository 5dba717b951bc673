"""Spherical linear interpolation between two checkpoints, tensor by tensor."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch

from hf_unified_embed.errors import MergeError
from hf_unified_embed.merge.methods.base import LayerGroups, MergeMethod, TensorReader, register_merge_method

# mergekit's threshold: above it the two directions are treated as parallel and lerp is used,
# because sin(θ) in the denominator vanishes.
DOT_THRESHOLD = 0.9995


def slerp(t: float, v0: torch.Tensor, v1: torch.Tensor, dot_threshold: float = DOT_THRESHOLD) -> torch.Tensor:
    """SLERP of two tensors viewed as flat vectors (Shoemake, 1985), in float64.

    Falls back to linear interpolation when the tensors are (anti)parallel or one is zero.
    """
    a = v0.to(torch.float64)
    b = v1.to(torch.float64)
    norm_a, norm_b = torch.linalg.vector_norm(a), torch.linalg.vector_norm(b)
    if norm_a == 0 or norm_b == 0:
        return torch.lerp(a, b, t)
    dot = float(torch.sum(a * b) / (norm_a * norm_b))
    if abs(dot) > dot_threshold:
        return torch.lerp(a, b, t)
    theta = math.acos(dot)
    sin_theta = math.sin(theta)
    return a * (math.sin((1.0 - t) * theta) / sin_theta) + b * (math.sin(t * theta) / sin_theta)


@register_merge_method
@dataclasses.dataclass
class Slerp(MergeMethod):
    """Spherical interpolation from ``models[0]`` (t = 0) to ``models[1]`` (t = 1).

    Args:
        models: exactly two checkpoints.
        t: the interpolation factor in [0, 1]: one number; a list interpolated linearly over the
            ordered layer groups (embeddings → blocks → heads, mergekit's "gradient"; a list with
            one value per group sets every group exactly); or a ``{group: t}`` mapping covering
            every group.

    Example::

        merge_models(["ir-run", "sts-run"], "slerp", "slerp-out", t=[0.2, 0.5, 0.8])
    """

    name = "slerp"
    description = "spherical linear interpolation between two checkpoints"
    t: float | list[float] | dict[str, float] = 0.5

    def __post_init__(self) -> None:
        super().__post_init__()
        if len(self.models) != 2:
            raise MergeError(f"slerp merges exactly two models, got {len(self.models)}")
        values = self.t.values() if isinstance(self.t, Mapping) else self.t if isinstance(self.t, list) else [self.t]
        for value in values:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                raise MergeError(f"slerp: t must be numbers in [0, 1], got {value!r}")
        if isinstance(self.t, list) and not self.t:
            raise MergeError("slerp: t is an empty list")
        self._t_by_group: dict[str, float] = {}

    def prepare(self, checkpoints: Mapping[Path, object], groups: LayerGroups) -> None:
        self._t_by_group = self.layer_t(groups)

    def layer_t(self, groups: LayerGroups) -> dict[str, float]:
        if isinstance(self.t, Mapping):
            missing = [group for group in groups if group not in self.t]
            if missing:
                raise MergeError(f"slerp: t gives no value for layer group {missing[0]!r}; groups: {list(groups)}")
            return {group: float(self.t[group]) for group in groups}
        if isinstance(self.t, list):
            positions = np.linspace(0.0, 1.0, len(groups)) if len(groups) > 1 else np.zeros(1)
            anchors = np.linspace(0.0, 1.0, len(self.t)) if len(self.t) > 1 else np.zeros(1)
            values = np.interp(positions, anchors, self.t) if len(self.t) > 1 else np.full(len(groups), self.t[0])
            return {group: float(value) for group, value in zip(groups, values)}
        return dict.fromkeys(groups, float(self.t))

    def merge_tensor(self, name: str, group: str, read: TensorReader) -> torch.Tensor:
        return slerp(self._t_by_group[group], read(self.models[0]), read(self.models[1]))

    def group_weights(self, groups: LayerGroups) -> dict[str, dict[str, float]]:
        return {group: {"t": t} for group, t in self.layer_t(groups).items()}
