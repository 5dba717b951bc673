"""Task arithmetic: add weighted task vectors θᵢ − θ_base to the base model."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from hf_unified_embed.errors import MergeError
from hf_unified_embed.merge.methods.merge_method import (
    LayerGroups,
    LinearMergeMethod,
    check_weights,
)
from hf_unified_embed.merge.methods.registry import register_merge_method


@register_merge_method
@dataclasses.dataclass
class TaskArithmetic(LinearMergeMethod):
    """θ = θ_base + Σᵢ λᵢ (θᵢ − θ_base) (Ilharco et al., 2023, "Editing Models with Task Arithmetic").

    Args:
        models: the fine-tuned checkpoints.
        base: the common pre-trained checkpoint the task vectors are taken against.
        weights: λᵢ, one per model (default 1.0 each), or one number for all; any finite values, no sum
            constraint. With one model, λ = 0 gives the base and λ = 1 the model: an interpolation. A
            negative λ subtracts a task vector ("task negation", Ilharco et al. §3), so negative weights
            need no ``allow_negative_weights`` here.

    Example::

        merge_models(["ir-run", "sts-run"], "task_arithmetic", "ta-out", base="base-model", weights=[0.7, 0.5])
    """

    name = "task_arithmetic"
    description = "the base model plus weighted task vectors"
    citation = """@inproceedings{ilharco2023editing,
    title={Editing Models with Task Arithmetic},
    author={Ilharco, Gabriel and Ribeiro, Marco Tulio and Wortsman, Mitchell and Gururangan, Suchin and Schmidt, Ludwig and Hajishirzi, Hannaneh and Farhadi, Ali},
    booktitle={International Conference on Learning Representations},
    year={2023},
    url={https://arxiv.org/abs/2212.04089},
}"""
    base: Path | None = None
    weights: list[float] | float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.base is None:
            raise MergeError("task_arithmetic needs base: the checkpoint the task vectors are taken against")
        self.base = Path(self.base)
        if not self.models:
            raise MergeError("task_arithmetic needs at least one model besides the base")
        if self.weights is None:
            self.weights = [1.0] * len(self.models)
        self.weights = check_weights(self.name, self.weights, len(self.models))

    def input_paths(self) -> list[Path]:
        assert self.base is not None
        return [*self.models, *([self.base] if self.base not in self.models else [])]

    def merged_paths(self) -> list[Path]:
        assert self.base is not None
        return list(dict.fromkeys([*self.models, self.base]))

    def input_roles(self) -> dict[Path, list[str]]:
        assert self.base is not None
        roles = super().input_roles()
        roles.setdefault(self.base, []).append("base")
        return roles

    def coefficients(self, group: str) -> dict[Path, float]:
        # θ_base + Σ λᵢ(θᵢ − θ_base) rewritten as (1 − Σλᵢ)·θ_base + Σ λᵢθᵢ: each input is read once.
        assert self.base is not None and isinstance(self.weights, list)
        coefficients = {self.base: 1.0 - sum(self.weights)}
        for model, weight in zip(self.models, self.weights):
            coefficients[model] = coefficients.get(model, 0.0) + weight
        return coefficients

    def group_weights(self, groups: LayerGroups) -> dict[str, dict[str, float]]:
        assert isinstance(self.weights, list)
        row = {f"λ[{index}]": weight for index, weight in enumerate(self.weights)}
        return {group: dict(row) for group in groups}
