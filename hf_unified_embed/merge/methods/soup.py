"""Model Soups: a uniform or weighted average of checkpoints (CoDiEmb Eq. 10)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hf_unified_embed.errors import MergeError
from hf_unified_embed.merge.methods.merge_method import (
    LayerGroups,
    LinearMergeMethod,
    check_weights,
)
from hf_unified_embed.merge.methods.registry import register_merge_method


@register_merge_method
@dataclasses.dataclass
class Soup(LinearMergeMethod):
    """θ = Σᵢ wᵢ θᵢ over whole checkpoints (Wortsman et al., 2022).

    Args:
        models: two or more checkpoints of one architecture.
        weights: one weight per model; uniform when omitted. They must sum to 1 unless ``normalize``, and
            none may be negative unless the merge allows negative weights (``allow_negative_weights``).
        normalize: divide the weights by their sum instead of requiring that they sum to 1.

    Example::

        merge_models(["run-a", "run-b", "run-c"], "soup", "soup-out", weights=[0.5, 0.25, 0.25])
    """

    name = "soup"
    description = "a weighted average of whole checkpoints, Model Soups"
    citation = """@inproceedings{wortsman2022soups,
    title={Model soups: averaging weights of multiple fine-tuned models improves accuracy without increasing inference time},
    author={Wortsman, Mitchell and Ilharco, Gabriel and Gadre, Samir Yitzhak and Roelofs, Rebecca and Gontijo-Lopes, Raphael and Morcos, Ari S. and Namkoong, Hongseok and Farhadi, Ali and Carmon, Yair and Kornblith, Simon and Schmidt, Ludwig},
    booktitle={International Conference on Machine Learning},
    year={2022},
    url={https://arxiv.org/abs/2203.05482},
}"""
    averaging_weights = ("weights",)
    weights: list[float] | None = None
    normalize: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if len(self.models) < 2:
            raise MergeError(f"soup needs at least two models, got {len(self.models)}")
        if self.weights is None:
            self.weights = [1.0 / len(self.models)] * len(self.models)
            return
        self.weights = check_weights(self.name, self.weights, len(self.models))
        total = math.fsum(self.weights)
        if self.normalize:
            if total == 0.0:
                raise MergeError("soup: weights sum to 0 and cannot be normalized")
            self.weights = [weight / total for weight in self.weights]
        elif abs(total - 1.0) > 1e-6:
            raise MergeError(f"soup: weights {self.weights} sum to {total:g}, not 1 (pass normalize=True to rescale)")

    def coefficients(self, group: str) -> dict[Path, float]:
        assert self.weights is not None
        return dict(zip(self.models, self.weights))

    def recipe(self, path_text: Callable[[Path], str] = str) -> dict[str, Any]:
        # The weights as used, after normalize: the same merge, bit for bit, without dividing again.
        recipe = super().recipe(path_text)
        recipe.pop("normalize")
        return recipe

    def group_weights(self, groups: LayerGroups) -> dict[str, dict[str, float]]:
        assert self.weights is not None
        row = {f"w[{index}]": weight for index, weight in enumerate(self.weights)}
        return {group: dict(row) for group in groups}
