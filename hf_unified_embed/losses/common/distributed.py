"""Differentiable all-gather that is also correct on the gloo backend."""

from __future__ import annotations

from typing import Any

import torch
from sentence_transformers.util import all_gather_with_grad as _all_gather_with_grad
from torch import Tensor


class _ContiguousGradient(torch.autograd.Function):
    """Identity whose backward makes the incoming gradient contiguous.

    ``torch.distributed.nn.all_gather`` sends its gradient back with an all-to-all whose receive buffers
    are ``empty_like(grad)``; on gloo a non-contiguous gradient (e.g. after ``einsum`` or a transpose)
    keeps its strides there while the data arrive densely packed, so the elements land scrambled.
    """

    @staticmethod
    def forward(ctx: Any, tensor: Tensor) -> Tensor:
        return tensor.view_as(tensor)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tensor:
        return grad.contiguous()


def all_gather_with_grad(tensor: Tensor) -> Tensor:
    """Concatenate ``tensor`` from every process along dim 0, gradients flowing back to their origin.

    Outside ``torch.distributed`` this returns the tensor itself (sentence-transformers warns once).
    """
    return _ContiguousGradient.apply(_all_gather_with_grad(tensor))
