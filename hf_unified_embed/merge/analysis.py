"""Per-layer deviation norms of fine-tuned checkpoints from their base, and a Figure-4-style heatmap.

CoDiEmb (§2.4, Figure 4) measures, for each layer l, the L2 norm of the parameter change
‖θ_tunedˡ − θ_baseˡ‖₂ of an IR-only and an STS-only fine-tune; the per-layer differences motivate
(and, in :class:`~hf_unified_embed.merge.methods.Hierarchical`, set) the fusion weights.
"""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from hf_unified_embed.merge.checks import check_compatible, check_finite, is_mergeable
from hf_unified_embed.merge.layers import group_tensor_names
from hf_unified_embed.merge.loader import LazyCheckpoint


@dataclass
class DeltaReport:
    """Deviation norms: ``norms[checkpoint label][layer group]`` = ‖θ − θ_base‖₂ over that group's float tensors.

    Attributes:
        base: the base checkpoint's path.
        checkpoints: ``{label: path}`` of the analysed checkpoints.
        groups: the layer groups in depth order, with their tensor names.
        norms: ``{label: {group: L2 norm}}``.
        parameters: number of floating-point parameters per group.
    """

    base: str
    checkpoints: dict[str, str]
    groups: dict[str, list[str]]
    norms: dict[str, dict[str, float]]
    parameters: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "base": self.base,
            "checkpoints": self.checkpoints,
            "groups": self.groups,
            "norms": self.norms,
            "parameters": self.parameters,
        }

    def save_json(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text(json.dumps(self.to_dict(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        return path

    def plot(self, path: str | Path, title: str | None = None) -> Path:
        """A heatmap, checkpoints × layers, colour = deviation norm (like CoDiEmb Figure 4)."""
        import numpy as np

        from hf_unified_embed.utils.figures import pyplot

        plt = pyplot("the deviation heatmap")

        labels = list(self.norms)
        groups = list(self.groups)
        values = np.array([[self.norms[label][group] for group in groups] for label in labels])
        figure, axes = plt.subplots(figsize=(max(6.0, 0.55 * len(groups) + 2.5), 0.6 * len(labels) + 2.2))
        image = axes.imshow(values, cmap="Reds", aspect="auto")
        axes.set_xticks(range(len(groups)), groups, rotation=60, ha="right", fontsize=8)
        axes.set_yticks(range(len(labels)), labels)
        if len(groups) <= 40:
            threshold = values.max() * 0.6 if values.size else 0.0
            for row, col in np.ndindex(values.shape):
                axes.text(
                    col,
                    row,
                    f"{values[row, col]:.3g}",
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="white" if values[row, col] > threshold else "black",
                )
        figure.colorbar(image, ax=axes, label="‖θ − θ_base‖₂")
        axes.set_title(title or "Layer-wise parameter deviation from the base model")
        figure.tight_layout()
        path = Path(path)
        figure.savefig(path, dpi=120)
        plt.close(figure)
        return path


def compute_delta_norms(
    base: LazyCheckpoint,
    checkpoints: Mapping[str, LazyCheckpoint],
    groups: Mapping[str, Sequence[str]],
    show_progress: bool = True,
) -> DeltaReport:
    """Stream the tensors of already-checked checkpoints and sum squared deviations per group (float64)."""
    squares = {label: dict.fromkeys(groups, 0.0) for label in checkpoints}
    parameters = dict.fromkeys(groups, 0)
    total = sum(len(names) for names in groups.values())
    with tqdm(total=total, desc="Deviation norms", unit="tensor", disable=not show_progress) as progress:
        for group, names in groups.items():
            for name in names:
                progress.update()
                if not is_mergeable(base.info(name).dtype):
                    continue
                reference = check_finite(base.get_tensor(name), name, base.path).to(torch.float64)
                parameters[group] += reference.numel()
                for label, checkpoint in checkpoints.items():
                    tuned = check_finite(checkpoint.get_tensor(name), name, checkpoint.path)
                    squares[label][group] += float(torch.sub(tuned, reference).square().sum())
    return DeltaReport(
        base=str(base.path),
        checkpoints={label: str(checkpoint.path) for label, checkpoint in checkpoints.items()},
        groups={group: list(names) for group, names in groups.items()},
        norms={
            label: {group: math.sqrt(value) for group, value in per_group.items()}
            for label, per_group in squares.items()
        },
        parameters=parameters,
    )


def analyze_deltas(
    base: str | Path,
    checkpoints: Mapping[str, str | Path] | Sequence[str | Path],
    *,
    plot_path: str | Path | None = None,
    show_progress: bool = True,
) -> DeltaReport:
    """Per-layer L2 norms of each checkpoint's deviation from ``base``; optionally a heatmap PNG.

    Args:
        base: the pre-trained model folder the checkpoints were fine-tuned from.
        checkpoints: model folders, as ``{label: path}`` (e.g. ``{"IR": ..., "STS": ...}``) or a list
            (labelled by folder name).
        plot_path: where to write the heatmap (checkpoints × layers, like CoDiEmb Figure 4).

    Example::

        report = analyze_deltas("all-MiniLM-L6-v2", {"IR": "ir-only", "STS": "sts-only"}, plot_path="deltas.png")
        report.norms["IR"]["encoder.layer.5"]
    """
    if not isinstance(checkpoints, Mapping):
        labels = [Path(path).name for path in checkpoints]
        if len(set(labels)) < len(labels):
            labels = [str(path) for path in checkpoints]
        checkpoints = dict(zip(labels, checkpoints))
    with tempfile.TemporaryDirectory(prefix="hf-unified-embed-lora-") as scratch:
        base_checkpoint = LazyCheckpoint(base, Path(scratch))
        opened = {label: LazyCheckpoint(path, Path(scratch)) for label, path in checkpoints.items()}
        check_compatible(base_checkpoint, list(opened.values()))
        groups = group_tensor_names(base_checkpoint.names)
        report = compute_delta_norms(base_checkpoint, opened, groups, show_progress)
    if plot_path is not None:
        report.plot(plot_path)
    return report
