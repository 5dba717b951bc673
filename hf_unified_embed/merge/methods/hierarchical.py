"""CoDiEmb's delta-guided hierarchical fusion of an IR soup and an STS soup (§2.4, Eq. 11–12)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scipy.special import expit

from hf_unified_embed.errors import MergeError, shown
from hf_unified_embed.merge.methods.merge_method import LayerGroups, LinearMergeMethod
from hf_unified_embed.merge.methods.registry import register_merge_method
from hf_unified_embed.utils.figures import optional_figure

if TYPE_CHECKING:
    from hf_unified_embed.merge.analysis import DeltaReport
    from hf_unified_embed.merge.loader import LazyCheckpoint

IR, STS = "IR", "STS"
HEATMAP_FILE = "delta_heatmap.png"


def fusion_weights(delta_ir: float, delta_sts: float, temperature: float) -> float:
    """w_IR of Eq. 11: softmax(δ_IR/τ, δ_STS/τ)[0], written as a logistic so large δ/τ cannot overflow."""
    return float(expit((delta_ir - delta_sts) / temperature))


@register_merge_method
@dataclasses.dataclass
class Hierarchical(LinearMergeMethod):
    """Delta-guided hierarchical fusion (CoDiEmb, Zhang et al., 2025, §2.4).

    Two task-biased soups are formed — θ̃_IR, the mean of ``ir_models``, and θ̃_STS, the mean of
    ``sts_models`` — and fused layer by layer (Eq. 12)::

        θˡ = w_IRˡ · θ̃_IRˡ + (1 − w_IRˡ) · θ̃_STSˡ,   w_IRˡ = e^{δ_IRˡ/τ} / (e^{δ_IRˡ/τ} + e^{δ_STSˡ/τ})   (Eq. 11)

    where δˡ is the L2 norm of layer l's deviation from ``base`` in an IR-only and an STS-only
    specialist fine-tune. A layer is a transformer block; embeddings, final norm, pooler and each
    head module are layers of their own (:mod:`hf_unified_embed.merge.layers`).

    Args:
        models: every checkpoint of the two soups (may be left empty: then ``ir_models`` + ``sts_models``).
        ir_models: checkpoints averaged into the IR soup (paths, or indices into ``models``).
        sts_models: checkpoints averaged into the STS soup (paths, or indices into ``models``).
        base: the pre-trained model both specialists started from.
        ir_specialist: a fine-tune on IR data only.
        sts_specialist: a fine-tune on STS data only.
        deltas: instead of base + specialists, precomputed norms ``{"IR": {group: δ}, "STS": {group: δ}}``
            (for example ``analyze_deltas(...).norms``).
        temperature: τ of Eq. 11 (the paper gives no value; 1.0 by default). Smaller τ sharpens the
            weights towards the task that moved a layer more.

    References:
        Zhang et al., "CoDiEmb: A Collaborative yet Distinct Framework for Unified Representation
        Learning in Information Retrieval and Semantic Textual Similarity", 2025, §2.4 and Figure 4.
    """

    name = "hierarchical"
    description = "CoDiEmb's delta-guided fusion of an IR soup and an STS soup, one weight per layer"
    citation = """@misc{zhang2025codiemb,
    title={CoDiEmb: A Collaborative yet Distinct Framework for Unified Representation Learning in Information Retrieval and Semantic Textual Similarity},
    author={Bowen Zhang and Zixin Song and Chunquan Chen and Qian-Wen Zhang and Di Yin and Xing Sun},
    year={2025},
    url={https://github.com/TencentCloudADP/youtu-embedding},
}"""
    models_optional = True  # ir_models + sts_models name the inputs
    ir_models: list[Path | int] = dataclasses.field(default_factory=list)
    sts_models: list[Path | int] = dataclasses.field(default_factory=list)
    base: Path | None = None
    ir_specialist: Path | None = None
    sts_specialist: Path | None = None
    deltas: dict[str, dict[str, float]] | None = None
    temperature: float = 1.0

    def __post_init__(self) -> None:
        models = [Path(model) for model in self.models]
        self.ir_models = [self._resolve(entry, models, "ir_models") for entry in self.ir_models]
        self.sts_models = [self._resolve(entry, models, "sts_models") for entry in self.sts_models]
        if not models:
            models = list(dict.fromkeys([Path(str(m)) for m in (*self.ir_models, *self.sts_models)]))
        self.models = models
        super().__post_init__()
        for field_name in ("ir_models", "sts_models"):
            entries = getattr(self, field_name)
            if not entries:
                raise MergeError(f"hierarchical needs {field_name}: the checkpoints of that soup")
            if len(set(entries)) != len(entries):
                raise MergeError(f"hierarchical: {field_name} lists a checkpoint twice")
            outside = [str(entry) for entry in entries if entry not in self.models]
            if outside:
                raise MergeError(f"hierarchical: {field_name} entry {outside[0]} is not one of models")
        unused = [str(model) for model in self.models if model not in self.ir_models + self.sts_models]
        if unused:
            raise MergeError(f"hierarchical: model {unused[0]} is in neither ir_models nor sts_models")
        if (
            isinstance(self.temperature, bool)
            or not isinstance(self.temperature, (int, float))
            or self.temperature <= 0
        ):
            raise MergeError(f"hierarchical: temperature must be a positive number, got {shown(self.temperature)}")
        specialists = {"base": self.base, "ir_specialist": self.ir_specialist, "sts_specialist": self.sts_specialist}
        if self.deltas is None:
            missing = [key for key, value in specialists.items() if value is None]
            if missing:
                raise MergeError(
                    f"hierarchical needs {', '.join(missing)} (or precomputed deltas) to weigh the layers"
                )
            self.base, self.ir_specialist, self.sts_specialist = (Path(str(v)) for v in specialists.values())
        else:
            if any(value is not None for value in specialists.values()):
                raise MergeError("hierarchical: give either deltas or base + ir_specialist + sts_specialist, not both")
            if set(self.deltas) != {IR, STS}:
                raise MergeError(
                    f"hierarchical: deltas must have exactly the keys 'IR' and 'STS', got {sorted(self.deltas)}"
                )
        self.report: DeltaReport | None = None
        self._w_ir: dict[str, float] = {}

    @staticmethod
    def _resolve(entry: Path | int | str, models: list[Path], field_name: str) -> Path:
        if isinstance(entry, int) and not isinstance(entry, bool):
            if not 0 <= entry < len(models):
                raise MergeError(f"hierarchical: {field_name} index {entry} is out of range for {len(models)} models")
            return models[entry]
        return Path(str(entry))

    def input_paths(self) -> list[Path]:
        extra = [self.base, self.ir_specialist, self.sts_specialist] if self.deltas is None else []
        return list(dict.fromkeys([*self.models, *(path for path in extra if path is not None)]))

    def input_roles(self) -> dict[Path, list[str]]:
        roles = super().input_roles()
        for label, members in (("IR soup", self.ir_models), ("STS soup", self.sts_models)):
            for model in members:
                roles[Path(str(model))].append(label)
        if self.deltas is None:
            for label, path in (
                ("base", self.base),
                ("IR specialist", self.ir_specialist),
                ("STS specialist", self.sts_specialist),
            ):
                assert path is not None
                roles.setdefault(path, []).append(label)
        return roles

    def recipe(self, path_text: Callable[[Path], str] = str) -> dict[str, Any]:
        # The soups as indices into models, which the written config lists once.
        recipe = super().recipe(path_text)
        for field_name in ("ir_models", "sts_models"):
            recipe[field_name] = [self.models.index(Path(str(model))) for model in getattr(self, field_name)]
        return recipe

    def card_section(self, directory: Path) -> str | None:
        if self.report is None:
            return None
        report = self.report
        heatmap = optional_figure(
            lambda: report.plot(directory / HEATMAP_FILE, title="Layer-wise deviation of the IR and STS specialists"),
            "the layer-wise deviation heatmap",
        )
        picture = f"![Layer-wise parameter deviation]({HEATMAP_FILE})\n\n" if heatmap is not None else ""
        return (
            "### Layer-wise deviation of the specialists\n\n"
            f"{picture}"
            "L2 norm of each layer's deviation from the base model in the IR-only and the STS-only specialist\n"
            "(CoDiEmb, Figure 4). The fusion weight of layer *l* is "
            "w_IR = exp(δ_IR/τ) / (exp(δ_IR/τ) + exp(δ_STS/τ)), "
            f"τ = {self.temperature} (CoDiEmb Eq. 11).\n"
        )

    def prepare(self, checkpoints: Mapping[Path, LazyCheckpoint], groups: LayerGroups) -> None:
        if self.deltas is None:
            from hf_unified_embed.merge.analysis import compute_delta_norms

            assert self.base is not None and self.ir_specialist is not None and self.sts_specialist is not None
            self.report = compute_delta_norms(
                checkpoints[self.base],
                {IR: checkpoints[self.ir_specialist], STS: checkpoints[self.sts_specialist]},
                groups,
            )
            norms = self.report.norms
        else:
            norms = self.deltas
        for group in groups:
            if group not in norms[IR] or group not in norms[STS]:
                raise MergeError(
                    f"hierarchical: deltas give no value for layer group {shown(group)}; groups: {list(groups)}"
                )
        self._w_ir = {group: fusion_weights(norms[IR][group], norms[STS][group], self.temperature) for group in groups}

    def coefficients(self, group: str) -> dict[Path, float]:
        w_ir = self._w_ir[group]
        coefficients: dict[Path, float] = {}
        for members, weight in ((self.ir_models, w_ir), (self.sts_models, 1.0 - w_ir)):
            for model in members:
                coefficients[Path(str(model))] = coefficients.get(Path(str(model)), 0.0) + weight / len(members)
        return coefficients

    def group_weights(self, groups: LayerGroups) -> dict[str, dict[str, float]]:
        norms = self.report.norms if self.report is not None else self.deltas
        assert norms is not None
        return {
            group: {
                "δ_IR": norms[IR][group],
                "δ_STS": norms[STS][group],
                "w_IR": self._w_ir[group],
                "w_STS": 1.0 - self._w_ir[group],
            }
            for group in groups
        }
