"""Scoring merge candidates: each merged by the streaming engine and evaluated on the search's suite.

:class:`CandidateScorer` loads one evaluation model from the reference input and, for each candidate,
streams the merge into memory (small models) or into scratch shards read back one by one, copies the
tensors into that model (:func:`load_weights`) and runs the suite; :func:`objective_metrics` picks the
values the search's objective and constraint read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from hf_unified_embed.errors import MergeError, shown
from hf_unified_embed.merge.api import OpenedInputs
from hf_unified_embed.merge.engine import FolderSink, MemorySink
from hf_unified_embed.merge.merge_config import MergeConfig, SearchConfig
from hf_unified_embed.merge.methods import MergeMethod
from hf_unified_embed.training.devices import process_device
from hf_unified_embed.utils.distributed_encode import ONE_PROCESS, EncodingProcesses

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

    from hf_unified_embed.evaluation import SuiteResults

#: Below this many bytes of weights, ``in_memory: auto`` merges candidates in memory.
IN_MEMORY_LIMIT = 2 * 10**9


def objective_metrics(results: SuiteResults, objective: Mapping[str, float] | Sequence[str]) -> dict[str, float]:
    """The value of each objective key (or listed metric) in a suite's results (``entry`` → its primary metric)."""
    metrics = {}
    for key in objective:
        name, _, metric = key.partition("/")
        try:
            entry = results[name]
        except KeyError:
            raise MergeError(f"search.objective: no evaluation {shown(name)} in the suite") from None
        if metric and metric not in entry.metrics:
            raise MergeError(
                f"search.objective: {shown(name)} has no metric {shown(metric)}; it has {sorted(entry.metrics)}"
            )
        metrics[key] = entry.metrics[metric] if metric else entry.primary_value
    return metrics


def load_weights(model: SentenceTransformer, tensors: Mapping[str, torch.Tensor], module_paths: Sequence[str]) -> None:
    """Copy merged tensors (``"2_Dense/linear.weight"`` for heads) into a loaded sentence-transformers model.

    ``module_paths`` are the folders of ``modules.json`` (``""`` for the root); a plain transformers
    folder (no ``modules.json``) is the model's first module. Every floating-point parameter of a
    module with tensors must be assigned.
    """
    for index, folder in enumerate(module_paths or [""]):
        prefix = f"{folder}/" if folder else ""
        own = {
            name[len(prefix) :]: tensor
            for name, tensor in tensors.items()
            if (name.startswith(prefix) if prefix else "/" not in name)
        }
        if not own:
            continue
        module = model[index]
        target = getattr(module, "auto_model", module)  # a Transformer module saves its Hugging Face model
        missing, unexpected = target.load_state_dict(own, strict=False)
        unexpected = [key for key in unexpected if own[key].is_floating_point()]
        if missing or unexpected:
            raise MergeError(
                f"the merged weights do not fit module {index} ({type(module).__name__}): "
                f"missing {missing[:3]}, unexpected {unexpected[:3]}"
            )


class CandidateScorer:
    """Merges candidates and scores them with one evaluation model (loaded once from the reference)."""

    def __init__(
        self,
        config: MergeConfig,
        search: SearchConfig,
        opened: OpenedInputs,
        scratch: Path,
        base: Path | None,
        processes: EncodingProcesses = ONE_PROCESS,
    ) -> None:
        from sentence_transformers import SentenceTransformer

        from hf_unified_embed.evaluation import load_suite, set_reference_model
        from hf_unified_embed.evaluation.suite import check_suite_models
        from hf_unified_embed.evaluation.suite_rows import load_entry_rows

        self.config, self.search, self.opened, self.scratch = config, search, opened, scratch
        self.processes = processes  # every process merges each candidate; they share its evaluation's encoding
        self.suite = load_suite(search.suite, search.data_root)
        if base is not None:
            # Entries that compare with a reference model (forgetting) compare with the merge's base.
            set_reference_model(self.suite, base)
        check_suite_models(self.suite)
        # Read (and row-checked) once, before the evaluation model loads; every candidate is scored on them.
        self.rows = load_entry_rows(self.suite)
        names = {entry.name for entry in self.suite.entries}
        self.metrics = list(search.objective)
        self.constrained: list[str] = []
        if search.constraint is not None:
            if base is None:
                raise MergeError("search.constraint: the method has no base to keep; give the merge a 'base'")
            referenced = [e.name for e in self.suite.entries if e.evaluation_kind.uses_reference_model]
            constrained = search.constraint["metrics"] or list(dict.fromkeys([*search.objective, *referenced]))
            self.metrics = list(dict.fromkeys([*self.metrics, *constrained]))
            self.constrained = constrained
        for key in self.metrics:
            if key.partition("/")[0] not in names:
                raise MergeError(
                    f"search.objective: no evaluation {shown(key.partition('/')[0])}; the suite has {sorted(names)}"
                )
        self.device = process_device(search.device) or ("cuda" if torch.cuda.is_available() else "cpu")
        self.model = SentenceTransformer(str(opened.reference.path), device=self.device)
        size = sum(opened.reference.info(name).nbytes for name in opened.reference.names)
        self.in_memory = search.in_memory if isinstance(search.in_memory, bool) else size < IN_MEMORY_LIMIT

    def score_base(self, base: Path) -> dict[str, float]:
        """The base model's values of the constrained metrics (what a candidate may not fall below by more than ε)."""
        from sentence_transformers import SentenceTransformer

        from hf_unified_embed.evaluation import run_suite

        results = run_suite(
            SentenceTransformer(str(self.opened.folders.get(base, base)), device=self.device),
            self.suite,
            diagnostics=False,
            show_progress_bar=False,
            rows=self.rows,
            processes=self.processes,
        )
        return objective_metrics(results, self.constrained)

    def score(self, method: MergeMethod, show_progress: bool) -> tuple[dict[str, float], SuiteResults]:
        from hf_unified_embed.evaluation import run_suite

        opened = self.opened
        method.prepare(opened.checkpoints, opened.groups)
        module_paths = opened.reference.module_paths()
        folder = self.scratch / "candidate"
        sink = (
            MemorySink(opened.reference)
            if self.in_memory
            else FolderSink(folder, opened.reference, self.config.max_shard_size, {})
        )
        opened.stream(method, sink, precise=self.config.precise, show_progress=show_progress and not self.in_memory)
        if isinstance(sink, MemorySink):
            load_weights(self.model, sink.tensors, module_paths)
        else:
            from safetensors.torch import load_file

            sink.close()
            for shard in sorted(folder.rglob("*.safetensors")):
                prefix = shard.parent.relative_to(folder).as_posix()
                tensors = {(f"{prefix}/{k}" if prefix != "." else k): v for k, v in load_file(str(shard)).items()}
                load_weights(self.model, tensors, module_paths)
                shard.unlink()
        results = run_suite(
            self.model,
            self.suite,
            diagnostics=False,
            show_progress_bar=False,
            rows=self.rows,
            processes=self.processes,
        )
        return objective_metrics(results, self.metrics), results
