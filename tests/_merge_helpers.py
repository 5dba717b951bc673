"""Checkpoint factories for the merge tests: copies of a saved model with known weight changes."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


def fine_tunes(base: Path, root: Path, count: int = 3) -> list[Path]:
    """``count`` noisy copies of ``base`` whose ``2_Dense`` head also moves (each copy's own seed)."""
    tuned = []
    for seed in range(count):
        path = noisy_copy(base, root / f"tuned-{seed}", seed)
        generator = torch.Generator().manual_seed(100 + seed)
        head = {
            k: v + 0.01 * torch.randn(v.shape, generator=generator) for k, v in read_weights(path / "2_Dense").items()
        }
        save_file(head, str(path / "2_Dense" / "model.safetensors"), metadata={"format": "pt"})
        tuned.append(path)
    return tuned


#: Every mergekit method with inputs and parameters to test it on: ``method → (number of fine-tunes, base
#: given, parameters)`` (``test_merge_mergekit`` gives sentence-transformers the same ``parameters``).
MERGEKIT_CASES: dict[str, tuple[int, bool, dict[str, Any]]] = {
    "linear": (3, False, {"weight": [0.2, 0.3, 0.5]}),
    "ties": (3, True, {"weight": [0.5, 0.3, 0.8], "density": 0.5}),
    "dare_ties": (3, True, {"weight": [0.5, 0.3, 0.8], "density": 0.7}),
    "dare_linear": (2, True, {"weight": [0.6, 0.4], "density": 0.6}),
    "breadcrumbs": (2, True, {"weight": [0.6, 0.4], "density": 0.8, "gamma": 0.05}),
    "breadcrumbs_ties": (3, True, {"weight": 1.0, "density": 0.8, "gamma": 0.05}),
    "della": (3, True, {"weight": [0.5, 0.3, 0.8], "density": 0.6, "epsilon": 0.1}),
    "della_linear": (2, True, {"weight": [0.6, 0.4], "density": 0.6, "epsilon": 0.1}),
    "sce": (3, True, {"select_topk": 0.5}),
    "model_stock": (2, True, {}),
    "karcher": (3, False, {}),
    "nuslerp": (2, False, {"weight": [0.3, 0.7]}),
    "multislerp": (3, False, {"weight": [0.2, 0.3, 0.5]}),
    "slerp": (2, False, {"t": 0.3}),
    "nearswap": (1, True, {"t": 0.01}),
    "arcee_fusion": (1, True, {}),
    "ram": (2, True, {}),
    "ramplus_tl": (2, True, {"r": 0.2, "alpha": 0.3}),
}
