"""Checkpoint factories for the merge tests: copies of a saved model with known weight changes."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

Edit = Callable[[str, torch.Tensor], torch.Tensor]


def read_weights(folder: str | Path, file: str = "model.safetensors") -> dict[str, torch.Tensor]:
    return load_file(str(Path(folder) / file))


def edited_copy(source: str | Path, target: Path, edit: Edit, file: str = "model.safetensors") -> Path:
    """Copy a model folder and rewrite one weights file with ``edit(name, tensor)`` applied to float tensors."""
    shutil.copytree(source, target)
    weights = read_weights(target, file)
    edited = {name: edit(name, t) if t.is_floating_point() else t for name, t in weights.items()}
    save_file({name: t.contiguous() for name, t in edited.items()}, str(target / file), metadata={"format": "pt"})
    return target


def noisy_copy(
    source: str | Path, target: Path, seed: int, scale: float = 0.01, file: str = "model.safetensors"
) -> Path:
    """A copy whose float tensors get Gaussian noise (a stand-in for a short fine-tune)."""
    generator = torch.Generator().manual_seed(seed)
    return edited_copy(source, target, lambda _, t: t + scale * torch.randn(t.shape, generator=generator), file)
