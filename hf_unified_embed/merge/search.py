"""``merge search``: try merge parameters on an evaluation suite of dev sets and keep the best.

A search is a merge config plus a ``search:`` section::

    method: task_arithmetic            # θ_base + λ (θ_run − θ_base): λ = 0 is the base, 1 the run
    models: [outputs/codiemb-run]
    parameters: {base: outputs/base-copy}
    output_dir: outputs/codiemb-interpolated
    search:
      suite: examples/suites/dev.yaml  # dev sets only: the test sets stay unseen
      parameters:                      # candidate values, every combination is tried
        weights: {min: 0.0, max: 1.0, steps: 6}
      objective:                       # the score: a weighted sum of suite metrics
        stsb-dev: 1.0                  # an entry's primary metric …
        trecqa-dev/map: 1.0            # … or entry/metric
      in_memory: auto                  # merge candidates in memory (true), via disk (false), auto: < 2 GB
      constraint:                      # optional: keep the base (evaluated too; needs a method with a base)
        epsilon: {default: 0.005, forgetting-dev: 0.3}   # allowed drop below the base per metric
        metrics: null                  # default: the objective's keys + every forgetting entry

Each candidate is merged by the streaming engine — into memory and loaded into one evaluation model
for small models, or written to scratch space and read back shard by shard otherwise — and scored
with :func:`hf_unified_embed.evaluation.run_suite`. The best candidate is written like any merge;
its card adds the search: the objective, a table of every candidate (metrics to 4 digits) and a
plot, and ``model-index`` holds its dev results. ``merge_search.json`` keeps every candidate. This
goes beyond LM-Cocktail's ``mix_models_with_data`` (which weighs models by the loss on a few
examples) and mergekit-evolve (one metric from lm-eval) by optimising retrieval and STS metrics
together.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hf_unified_embed.errors import MergeError
from hf_unified_embed.merge.api import (
    build_method,
    input_labels,
    model_ids_option,
    open_inputs,
    reference_input,
    write_merged_model,
)
from hf_unified_embed.merge.candidate_scoring import CandidateScorer
from hf_unified_embed.merge.card import METRIC_DIGITS
from hf_unified_embed.merge.merge_config import CardConfig, MergeConfig, SearchConfig
from hf_unified_embed.utils.arguments import checked_arguments
from hf_unified_embed.utils.distributed_encode import ONE_PROCESS, EncodingProcesses
from hf_unified_embed.utils.figures import optional_figure
from hf_unified_embed.utils.outputs import StagedOutput, check_output
from hf_unified_embed.utils.redaction import redact

if TYPE_CHECKING:
    from hf_unified_embed.evaluation import SuiteResults

logger = logging.getLogger(__name__)

SEARCH_FILE = "merge_search.json"
PLOT_FILE = "merge_search.png"


@dataclasses.dataclass
class Candidate:
    """One tried parameter setting: its searched values, the metrics of the objective and the score."""

    parameters: dict[str, Any]
    metrics: dict[str, float]
    score: float
    results: SuiteResults | None = dataclasses.field(default=None, repr=False)
    #: Under a constraint: the largest drop below the base beyond its ε over the constrained metrics
    #: (≤ 0: admissible); ``None`` without a constraint.
    violation: float | None = None

    @property
    def admissible(self) -> bool:
        return self.violation is None or self.violation <= 0

    def to_dict(self) -> dict[str, Any]:
        data = {"parameters": self.parameters, "metrics": self.metrics, "score": self.score}
        if self.violation is not None:
            data |= {"violation": self.violation, "admissible": self.admissible}
        return data


@dataclasses.dataclass
class SearchResult:
    """Every candidate in the order tried, and the index of the best one (highest score, first on ties)."""

    candidates: list[Candidate]
    objective: dict[str, float]
    best_index: int
    output_dir: Path | None = None
    #: Under a constraint: ``{"epsilon": {metric: ε}, "base": {metric: the base's value}}``.
    constraint: dict[str, Any] | None = None

    @property
    def best(self) -> Candidate:
        return self.candidates[self.best_index]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], output_dir: Path | None = None) -> SearchResult:
        """A search read back from ``merge_search.json`` (:meth:`to_dict`); suite results are not kept."""
        candidates = [
            Candidate(c["parameters"], c["metrics"], c["score"], violation=c.get("violation"))
            for c in data["candidates"]
        ]
        return cls(candidates, dict(data["objective"]), int(data["best"]), output_dir, data.get("constraint"))

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "objective": self.objective,
            "best": self.best_index,
            "candidates": [candidate.to_dict() for candidate in self.candidates],
        }
        if self.constraint is not None:
            data["constraint"] = self.constraint
        return data

    def markdown(self, plot: str | None = None) -> str:
        """The card section: the objective, one row per candidate (4 digits), the plot."""
        names = list(self.candidates[0].parameters)
        metrics = list(self.candidates[0].metrics)
        formula = " + ".join(f"{weight:g} × {metric}" for metric, weight in self.objective.items())
        constrained = self.constraint is not None
        rule = ""
        if self.constraint is not None:
            bounds = ", ".join(f"{metric} ≥ base − {eps:g}" for metric, eps in self.constraint["epsilon"].items())
            rule = (
                f" Constraint (keep the base): a candidate is admissible only if {bounds}; the best admissible "
                "one is chosen (the least violating one when none is)."
            )
        lines = [
            "## Merge search",
            "",
            f"The merge parameters were chosen on development sets by `hf-unified-embed merge search`: "
            f"{len(self.candidates)} candidates, score = {formula}.{rule} The chosen one is in bold.",
            "",
            "| # | " + " | ".join([*names, *metrics, "score", *(["admissible"] if constrained else [])]) + " |",
            "|--:|" + "--:|" * (len(names) + len(metrics) + 1 + constrained),
        ]
        if self.constraint is not None:
            base = self.constraint["base"]
            cells = ["base" if i == 0 else "" for i in range(len(names))]
            cells += [f"{base[m]:.{METRIC_DIGITS}f}" if m in base else "" for m in metrics]
            lines.append("| — | " + " | ".join([*cells, "", ""]) + " |")
        for index, candidate in enumerate(self.candidates):
            cells = [_cell(candidate.parameters[name]) for name in names]
            cells += [f"{candidate.metrics[metric]:.{METRIC_DIGITS}f}" for metric in metrics]
            cells.append(f"{candidate.score:.{METRIC_DIGITS}f}")
            if constrained:
                cells.append("yes" if candidate.admissible else "no")
            if index == self.best_index:
                cells = [f"**{cell}**" for cell in cells]
            lines.append(f"| {index} | " + " | ".join(cells) + " |")
        if plot:
            lines += ["", f"![Merge search]({plot})"]
        return "\n".join(lines) + "\n"

    def plot(self, path: Path) -> Path:
        """Each objective metric and the score per candidate (against the searched value when only one varies)."""
        from hf_unified_embed.utils.figures import pyplot

        plt = pyplot("the merge search figure")
        varied = [
            name
            for name in self.candidates[0].parameters
            if len({_cell(c.parameters[name]) for c in self.candidates}) > 1
        ]
        values = [candidate.parameters[varied[0]] for candidate in self.candidates] if len(varied) == 1 else []
        scalars = [_scalar(value) for value in values]
        numeric = bool(values) and all(value is not None for value in scalars)
        x: list[float] = (
            [float(v) for v in scalars if v is not None]
            if numeric
            else [float(i) for i in range(len(self.candidates))]
        )
        figure, axes = plt.subplots(figsize=(7.0, 4.2))
        for metric in self.candidates[0].metrics:
            axes.plot(x, [candidate.metrics[metric] for candidate in self.candidates], marker="o", label=metric)
        axes.plot(x, [candidate.score for candidate in self.candidates], marker="s", color="black", label="score")
        axes.axvline(x[self.best_index], color="grey", linestyle="--", linewidth=1)
        axes.set_xlabel(varied[0] if numeric else "candidate")
        axes.set_ylabel("dev metric")
        axes.set_title("Merge search on the development sets")
        axes.legend(fontsize=8)
        figure.tight_layout()
        figure.savefig(path, dpi=120)
        plt.close(figure)
        return path


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list):
        return "[" + ", ".join(_cell(item) for item in value) + "]"
    return str(value)


def _scalar(value: Any) -> float | None:
    """A number, or the one number of a one-element list (``weights: [0.4]``)."""
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def run_search(
    config: MergeConfig, show_progress: bool = True, processes: EncodingProcesses = ONE_PROCESS
) -> SearchResult:
    """Evaluate every candidate of ``config.search`` and write the best merge to ``config.output_dir``.

    With ``processes`` (a launched run) every process calls this alike: each merges every candidate and
    encodes its slice of the suite's texts; the first process writes the output, the others check it as it
    does and keep their candidates in a temporary folder of their own.
    """
    search = config.search
    if search is None:
        raise MergeError("the merge config has no search section")
    settings = search.candidates(config.parameters)
    methods = [build_method(dataclasses.replace(config, parameters=parameters)) for parameters in settings]
    inputs = list(dict.fromkeys(path for method in methods for path in method.input_paths()))
    reference = reference_input(config, methods[0])
    searched = list(search.parameters)
    candidates: list[Candidate] = []
    base = next((path for path, roles in methods[0].input_roles().items() if "base" in roles), None)
    show_progress = show_progress and processes.is_main
    stage: StagedOutput | None = None
    if processes.is_main:
        stage = StagedOutput(config.output_dir, overwrite=config.overwrite, inputs=inputs)
    else:
        check_output(config.output_dir, overwrite=config.overwrite, inputs=inputs)
    with stage or contextlib.nullcontext(), contextlib.ExitStack() as cleanup:
        scratch = (
            stage.scratch
            if stage is not None
            else Path(cleanup.enter_context(tempfile.TemporaryDirectory(prefix=f"merge-search-{processes.rank}-")))
        )
        opened = cleanup.enter_context(open_inputs(inputs, reference, scratch, input_labels(methods[0])))
        evaluator = CandidateScorer(config, search, opened, scratch, base, processes)
        constraint = None
        if search.constraint is not None and base is not None:
            epsilon = {metric: search.epsilon(metric) for metric in evaluator.constrained}
            constraint = {"epsilon": epsilon, "base": evaluator.score_base(base)}
            logger.info("constraint: base %s, epsilon %s", constraint["base"], epsilon)
        for index, method in enumerate(methods):
            metrics, results = evaluator.score(method, show_progress)
            score = math.fsum(weight * metrics[key] for key, weight in search.objective.items())
            values = {name: settings[index][name] for name in searched}
            violation = (
                max(constraint["base"][m] - eps - metrics[m] for m, eps in constraint["epsilon"].items())
                if constraint is not None
                else None
            )
            candidates.append(Candidate(values, metrics, score, results, violation))
            logger.info("candidate %d/%d %s: score %.4f %s", index + 1, len(methods), values, score, metrics)
        best = choose_best(candidates)
        if not candidates[best].admissible:
            logger.warning(
                "no candidate keeps every constrained metric within epsilon of the base; chose the least violating (%s)",
                candidates[best].parameters,
            )
        result = SearchResult(candidates, dict(search.objective), best, config.output_dir, constraint)
        del evaluator

        def section(folder: Path) -> str:
            plot = optional_figure(lambda: result.plot(folder / PLOT_FILE), "the merge search figure")
            (folder / SEARCH_FILE).write_text(json.dumps(redact(result.to_dict()), indent=2) + "\n", encoding="utf-8")
            return result.markdown(PLOT_FILE if plot is not None else None)

        best_results = candidates[best].results
        card = config.card
        if not card.evaluation_results and best_results is not None:
            card = dataclasses.replace(card, evaluation_results=[vars(r) for r in best_results.eval_results()])
        if stage is not None:
            write_merged_model(
                config,
                methods[best],
                opened,
                stage.path,
                show_progress=show_progress,
                card_sections=[section],
                card=card,
            )
    logger.info("Best of %d candidates: %s (score %.4f)", len(candidates), result.best.parameters, result.best.score)
    return result


def choose_best(candidates: Sequence[Candidate]) -> int:
    """The highest score among admissible candidates (first on ties); when none is, the least violating one."""
    admissible = [i for i, candidate in enumerate(candidates) if candidate.admissible]
    if admissible:
        return max(admissible, key=lambda i: (candidates[i].score, -i))
    return min(range(len(candidates)), key=lambda i: (candidates[i].violation, -candidates[i].score, i))


@checked_arguments
def search_merge(
    models: Sequence[str | Path],
    method: str,
    output_dir: str | Path,
    *,
    suite: str | Path | dict[str, Any],
    search: Mapping[str, Any],
    objective: Mapping[str, float],
    in_memory: bool | str = "auto",
    data_root: str | None = None,
    device: str | None = None,
    constraint: Mapping[str, Any] | None = None,
    model_ids: Sequence[str | None] | Mapping[str | Path, str | None] | None = None,
    model_name: str | None = None,
    overwrite: bool = False,
    precise: bool = False,
    show_progress: bool = True,
    **method_params: Any,
) -> SearchResult:
    """Search merge parameters on dev sets and write the best merge; see :mod:`hf_unified_embed.merge.search`.

    Args:
        models: as :func:`hf_unified_embed.merge.merge_models`.
        method: as :func:`hf_unified_embed.merge.merge_models`.
        output_dir: as :func:`hf_unified_embed.merge.merge_models`.
        suite: the evaluation suite of dev sets.
        search: candidate values per parameter (a list, or ``{"min", "max", "steps"}``).
        objective: ``{metric: weight}``, metrics named ``entry`` or ``entry/metric``.
        constraint: ``{"epsilon": ε, "metrics": [...]}``: keep the base (see :class:`SearchConfig`).
        model_ids: as :func:`hf_unified_embed.merge.merge_models`.
        model_name: as :func:`hf_unified_embed.merge.merge_models`.
        overwrite: as :func:`hf_unified_embed.merge.merge_models`.
        precise: as :func:`hf_unified_embed.merge.merge_models`.
        **method_params: the method's fixed parameters, as :func:`hf_unified_embed.merge.merge_models`.

    Example::

        result = search_merge(
            ["outputs/codiemb-run"], "task_arithmetic", "outputs/interpolated",
            base="outputs/base", suite="examples/suites/dev.yaml",
            search={"weights": {"min": 0.0, "max": 1.0, "steps": 6}},
            objective={"stsb-dev": 1.0, "trecqa-dev": 1.0},
        )
        print(result.best.parameters, result.best.score)
    """
    config = MergeConfig(
        models=list(models),  # type: ignore[arg-type]  # parsed into ModelSpec in __post_init__
        method=method,
        output_dir=Path(output_dir),
        parameters=dict(method_params),
        precise=precise,
        overwrite=overwrite,
        model_ids=model_ids_option(model_ids),
        card=CardConfig(model_name=model_name),
        search=SearchConfig(
            suite=suite,
            parameters=dict(search),
            objective=dict(objective),
            in_memory=in_memory,
            data_root=data_root,
            device=device,
            constraint=dict(constraint) if constraint is not None else None,
        ),
    )
    return run_search(config, show_progress=show_progress)
