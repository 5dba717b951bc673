"""Named loss parts that wrappers can weight and sum like a tensor, while the trainer still logs each part."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

LossOutput = Tensor | dict[str, Tensor]

#: The key under which a wrapper's own term (e.g. ``AdaptiveLayerLoss``'s KL divergence) joins the parts.
OTHER = "other"


class LossParts(dict[str, Tensor]):
    """The already weighted parts of a multi-part loss; their sum is the loss.

    sentence-transformers' trainer sums a dict returned by a loss and logs every entry. Its loss wrappers
    (``MatryoshkaLoss``, ``Matryoshka2dLoss``, ``AdaptiveLayerLoss``) instead treat the inner loss's result
    as a tensor: ``loss = 0.0``, ``loss += weight * inner(...)``, ``loss + term``. ``LossParts`` supports
    exactly that arithmetic, part by part, so a wrapped multi-part loss still reaches the trainer as a
    dict whose sum is the correctly weighted total and whose parts are logged:

    - ``weight * parts``, ``parts * weight``, ``parts / divisor``: every part scaled;
    - ``parts + parts``: the sum per name (a part missing on one side counts as 0);
    - ``parts + 0``: unchanged (a wrapper's ``0.0`` start value);
    - ``parts + tensor``: the tensor is added under ``"other"`` (a wrapper's own term).
    """

    def __mul__(self, factor: Any) -> LossParts:
        if not isinstance(factor, (int, float, Tensor)):
            return NotImplemented
        return LossParts({name: value * factor for name, value in self.items()})

    __rmul__ = __mul__

    def __truediv__(self, divisor: Any) -> LossParts:
        if not isinstance(divisor, (int, float, Tensor)):
            return NotImplemented
        return LossParts({name: value / divisor for name, value in self.items()})

    def __add__(self, other: Any) -> LossParts:  # type: ignore[override]
        if isinstance(other, Mapping):
            summed = LossParts(self)
            for name, value in other.items():
                summed[name] = summed[name] + value if name in summed else value
            return summed
        if isinstance(other, Tensor):
            return self + {OTHER: other}
        if isinstance(other, (int, float)):
            if other == 0:
                return LossParts(self)
            device = next(iter(self.values())).device if self else None
            return self + {OTHER: torch.as_tensor(other, dtype=torch.float32, device=device)}
        return NotImplemented

    __radd__ = __add__

    def total(self) -> Tensor:
        """The loss: the sum of the parts."""
        return torch.stack(list(self.values())).sum()

    def detach(self) -> LossParts:
        """The parts without their autograd graph."""
        return LossParts({name: value.detach() for name, value in self.items()})


def total_loss(output: Tensor | Mapping[str, Tensor]) -> Tensor:
    """The scalar loss of a loss output: the tensor itself or the sum of its parts (as the trainer sums them)."""
    if isinstance(output, Tensor):
        return output
    return torch.stack(list(output.values())).sum()


def with_means(output: LossOutput, means: Mapping[str, Tensor]) -> LossOutput:
    """``output`` with the ``means`` parts added; a dict of parts becomes :class:`LossParts`."""
    if isinstance(output, Tensor) and not means:
        return output
    parts = LossParts(means)
    return parts + (output if isinstance(output, dict) else {"loss": output})
