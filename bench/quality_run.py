"""Running the quality report: build each setting's data, train a row through ``train_from_recipe`` (timing
its steps and its peak memory) or merge, score it with the suite, and keep its evaluation for ``--resume``."""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _timing import every_trainer_calls, step_timer
from example_cli import evaluation_suite, recipe_training_args
from quality_recipe import MINED_DATA, is_recipe_row, merged_run, recipe_levers, recipe_row_recipe, recipe_tasks
from quality_report import FORGETTING, KEPT_FLOOR, report
from quality_rows import MERGE_RUNS, ROW_SPECS, bench_recipe, row_recipe
from quality_sources import epoch_steps, gur_documents, many_task_sources, training_sources

REPO = Path(__file__).resolve().parent.parent
SUITE = REPO / "examples" / "suites" / "shared.yaml"
DEV_SUITE = REPO / "examples" / "suites" / "dev.yaml"
#: The kept-merge row's candidates and constraint, fixed before any run.
KEPT_MERGE_WEIGHTS = (0.25, 0.5, 0.75, 1.0)
KEPT_MERGE_EPSILON = 0.005
KEPT_MERGE_FORGETTING = 0.25
#: A recipe row's kept-merge: a finer grid near the run, and the choice rule's floor on kept neighbours as the
#: dev suite's forgetting constraint (overlap at least ``KEPT_FLOOR``), so that the merge aims at what the rule
#: asks of a shipped row while never seeing the report's test sets.
RECIPE_MERGE_WEIGHTS = (0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
RECIPE_MERGE_FORGETTING = round(1.0 - KEPT_FLOOR, 6)


@dataclass
class Trained:
    """A trained model and what its training cost.

    ``timed_steps`` and ``seconds`` cover the optimizer steps after the first of each run: the first
    also pays one-off set-up (dataloader workers, the sampler's plan, card widgets), which would
    dominate a short run and differs between samplers. ``runtime`` is the trainer's whole ``train()``.
    """

    path: Path
    steps: int
    timed_steps: int
    seconds: float
    runtime: float
    peak_memory_mib: float | None = None
    threads: int | None = None


def train_recipe(recipe: Mapping[str, Any], device: str) -> Trained:
    """Train a recipe mapping as ``hf-unified-embed train`` does: ``recipe_from_dict`` + ``train_from_recipe``
    (the model, its card and the recipe land in the recipe's ``output_dir``), timing its steps."""
    import torch

    from hf_unified_embed.recipe import recipe_from_dict, train_from_recipe

    name = Path(recipe["output_dir"]).name
    timer = step_timer(device)
    memory = PeakMemory(device)
    with every_trainer_calls(timer):
        outcome = train_from_recipe(recipe_from_dict(recipe, origin=f"bench/quality.py:{name}"), overwrite=True)
    stamps = timer.stamps
    return Trained(
        Path(outcome.model_dir),
        steps=timer.steps,
        timed_steps=max(0, len(stamps) - 1),
        seconds=stamps[-1] - stamps[0] if len(stamps) > 1 else 0.0,
        runtime=timer.runtime,
        peak_memory_mib=memory.peak_mib(),
        threads=torch.get_num_threads(),
    )


class PeakMemory:
    """The peak memory of a training run: the accelerator's allocated peak on CUDA, the process's peak
    resident set on the CPU (Linux ``VmHWM``, reset at the start so earlier rows of the same process do
    not count; where it cannot be reset, the process's peak since it started)."""

    def __init__(self, device: str) -> None:
        self.cuda = device.startswith("cuda")
        if self.cuda:
            import torch

            torch.cuda.reset_peak_memory_stats()
            return
        with contextlib.suppress(OSError):
            Path("/proc/self/clear_refs").write_text("5", encoding="ascii")  # 5: reset the peak RSS

    def peak_mib(self) -> float | None:
        if self.cuda:
            import torch

            return torch.cuda.max_memory_allocated() / 2**20
        try:
            status = Path("/proc/self/status").read_text(encoding="ascii")
        except OSError:
            import resource

            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
        line = next((line for line in status.splitlines() if line.startswith("VmHWM:")), None)
        return None if line is None else int(line.split()[1]) / 1024


def report_suite(options: argparse.Namespace) -> dict[str, Any]:
    """The suite every model is scored with: shared.yaml, the forgetting entry, MS MARCO reduced if asked."""
    suite = evaluation_suite(options, SUITE, data_root=options.data_root)
    suite["evaluations"] = [*suite["evaluations"], forgetting_entry(options)]
    if options.msmarco_queries:
        folder = reduced_beir(
            options.data_root / "ir" / "msmarco-dl-subset",
            options.output_dir / "msmarco-reduced",
            options.msmarco_queries,
        )
        for entry in suite["evaluations"]:
            if entry["name"] in ("msmarco-dl", FORGETTING):
                entry["data_files"] = str(folder.resolve())  # not relative to the suite's data root
    return suite


@dataclass
class Setting:
    """Training data of a setting: the unified folder a recipe reads, its tasks, and the steps every row trains."""

    path: Path
    tasks: Any  # DatasetDict: sizes and task types for the merge row's split
    steps: int


class Bench:
    """One report run: the settings built so far and the results; makes, evaluates and records rows."""

    def __init__(self, options: argparse.Namespace, argv: list[str] | None) -> None:
        self.options = options
        self.argv = argv
        self.suite = report_suite(options)
        self.settings: dict[str, Setting] = {}
        self.results: dict[str, Any] = {}

    def key(self, row: str, seed: int) -> str:
        """A row's name in the results, the output folder and ``evaluations/``: ``row@seed`` under ``--seeds``
        (so runs of one seed each, ``--resume``-d together, aggregate)."""
        return row if row == "base" or self.options.seeds is None else f"{row}@{seed}"

    def setting(self, name: str) -> Setting:
        """A setting's tasks, built from ``--data-root`` and saved as a unified folder once per run."""
        from hf_unified_embed.data import build_unified, save_unified

        if name not in self.settings:
            options = self.options
            if name == "main":
                sources = training_sources(options.data_root, options.max_rows_per_task, options.main_tasks)
            elif name == "recipe":  # the shipped recipe's data: every task a recipe row may train, instructed
                documents = gur_documents(options.data_root, options.output_dir / "gur-documents")
                sources = training_sources(
                    options.data_root, options.max_rows_per_task, recipe_tasks(), True, documents
                )
            else:
                sources = many_task_sources(
                    options.data_root, options.output_dir / "many-task-sources", options.max_rows_per_task
                )
            tasks = build_unified(sources)
            path = save_unified(tasks, options.output_dir / f"{name}-data", overwrite=True)
            epoch = epoch_steps(tasks, options.batch_size)
            steps = options.max_steps if options.max_steps > 0 else max(1, round(options.epochs * epoch))
            size = f"{name} setting: {len(tasks)} tasks, {sum(len(ds) for ds in tasks.values()):,} rows"
            if name == "recipe":  # its rows train the recipe's tasks, batch sizes and epochs
                print(f"{size}; each row's recipe decides its steps", flush=True)
            else:
                print(f"{size}, {epoch} steps per epoch; every row trains {steps} steps", flush=True)
            self.settings[name] = Setting(Path(path), tasks, steps)
        return self.settings[name]

    def mined_folder(self, setting: str, folder: Path) -> Path:
        """``setting``'s data with its retrieval tasks' negatives mined by the base (four per query, the
        miner's positive-aware filter), saved as ``folder`` once per output folder."""
        from sentence_transformers import SentenceTransformer

        from hf_unified_embed.data import save_unified
        from hf_unified_embed.negatives import HardNegativeConfig, mine_hard_negatives

        if not (folder / "README.md").is_file():  # written whole by save_unified (staged)
            began = time.perf_counter()
            scratch = folder.parent / f"{folder.name}-scratch"
            scratch.mkdir(parents=True, exist_ok=True)
            result = mine_hard_negatives(
                self.setting(setting).tasks,
                SentenceTransformer(self.options.base_model, device=self.options.device),
                HardNegativeConfig(num_negatives=4),
                scratch_dir=scratch,
            )
            # Saved before the scratch goes: the mined tasks are memory-mapped from it, and the writer
            # re-opens them by path (each shard through its own mapping).
            save_unified(result.tasks, folder, overwrite=True)
            shutil.rmtree(scratch, ignore_errors=True)
            print(f"[mining] {setting} negatives mined by the base in {time.perf_counter() - began:.0f} s", flush=True)
        return folder

    def mined(self) -> Setting:
        """The main setting with its retrieval tasks' negatives mined by the base (once per output folder)."""
        from hf_unified_embed.data import load_unified

        if "mined" not in self.settings:
            folder = self.mined_folder("main", self.options.output_dir / "mined-main")
            self.settings["mined"] = Setting(folder, load_unified(folder), self.setting("main").steps)
        return self.settings["mined"]

    def train_shipped(self, row: str, name: str) -> Trained:
        """A row of the shipped recipe (``recipe``, ``recipe+levers``): train.yaml on the report's data."""
        setting = self.setting("recipe")
        if "mined" in recipe_levers(row):
            self.mined_folder("recipe", self.options.output_dir / MINED_DATA)  # the lever points the recipe at it
        run_settings = recipe_training_args(self.options)  # seed, device, no checkpoints; -1 steps: the epochs
        recipe = recipe_row_recipe(row, self.options, setting.path, name, run_settings)
        return train_recipe(recipe, self.options.device)

    def train(self, row: str, name: str) -> Trained:
        """A row with a recipe form: its recipe, trained by ``train_from_recipe``."""
        spec = ROW_SPECS[row]
        assert spec.setting is not None
        setting = self.mined() if spec.mined else self.setting(spec.setting)
        trained = train_recipe(
            row_recipe(row, self.options, setting.path, list(setting.tasks), setting.steps, name),
            self.options.device,
        )
        plan = trained.path / "curriculum_plan.json"  # the recipe run keeps its plan next to the model
        if plan.is_file():
            order = json.loads(plan.read_text(encoding="utf-8"))["order"]
            print(f"[{name}] curriculum task order: {' → '.join(order)}", flush=True)
        return trained

    def make(self, row: str, name: str, seed: int) -> Trained | None:
        """Train (or merge) a row; ``None`` for the base."""
        if is_recipe_row(row):
            run = merged_run(row)
            if run is None:
                return self.train_shipped(row, name)
            return self.kept_merge(name, run, seed, RECIPE_MERGE_WEIGHTS, RECIPE_MERGE_FORGETTING)
        spec = ROW_SPECS[row]
        if spec.setting is None:
            return None
        if spec.merge == "kept":
            assert spec.merges is not None
            return self.kept_merge(name, spec.merges, seed)
        if spec.merge == "hierarchical":
            return self.hierarchical_merge(name)
        return self.train(row, name)

    # The two merges have no recipe form (a recipe trains one model); their training runs are recipe runs.

    def kept_merge(
        self,
        name: str,
        run_row: str,
        seed: int,
        weights: tuple[float, ...] = KEPT_MERGE_WEIGHTS,
        forgetting: float = KEPT_MERGE_FORGETTING,
    ) -> Trained:
        """The seed's ``run_row`` run interpolated with the base, λ among ``weights`` chosen under the
        keep-the-base constraint (dev metrics within ``KEPT_MERGE_EPSILON`` of the base's, the dev suite's
        neighbour overlap within ``forgetting`` of the base's 1)."""
        from hf_unified_embed.merge.search import search_merge

        options = self.options
        run_key = self.key(run_row, seed)
        run = options.output_dir / run_key
        training = self.results.get(run_key, {}).get("training")
        if not (run / "modules.json").is_file() or training is None:
            raise SystemExit(f"{name}: needs the {run_key} row first (put {run_row} before it in --rows)")
        dev = evaluation_suite(options, DEV_SUITE, data_root=options.data_root)
        dev_metrics = [entry["name"] for entry in dev["evaluations"] if entry["kind"] != "forgetting"]
        result = search_merge(
            [run],
            "task_arithmetic",
            options.output_dir / name,
            base=options.base_model,
            suite=dev,
            search={"weights": list(weights)},
            objective={metric: 1.0 / len(dev_metrics) for metric in dev_metrics},
            constraint={"epsilon": {"default": KEPT_MERGE_EPSILON, "forgetting-dev": forgetting}},
            device=options.device,
            overwrite=True,
            show_progress=False,
        )
        print(f"[{name}] chose {result.best.parameters} (admissible: {result.best.admissible})", flush=True)
        return Trained(
            options.output_dir / name,
            steps=training["steps"],
            timed_steps=training["timed_steps"],
            seconds=training["seconds"],
            runtime=training["train_runtime"],
            threads=training.get("threads"),
        )

    def hierarchical_merge(self, name: str) -> Trained:
        """The ``MERGE_RUNS`` recipes, each for its share of the steps, merged hierarchically (CoDiEmb)."""
        from hf_unified_embed.merge import merge_models

        options, main = self.options, self.setting("main")
        tasks = {
            "ir-leaning": [task for task, ds in main.tasks.items() if ds[0]["task_type"] == "retrieval"],
            "sts-leaning": [task for task, ds in main.tasks.items() if ds[0]["task_type"] != "retrieval"],
        }
        # Each run trains its share of the steps: one epoch of its own tasks at the default length.
        ir_tasks = {task: main.tasks[task] for task in tasks["ir-leaning"]}
        share = epoch_steps(ir_tasks, options.batch_size) / epoch_steps(main.tasks, options.batch_size)
        ir_steps = max(1, round(main.steps * share))
        steps = {"ir-leaning": ir_steps, "sts-leaning": max(1, main.steps - ir_steps)}
        runs = {}
        for run, values in MERGE_RUNS.items():
            recipe = bench_recipe(options, main.path, tasks[run], steps[run], run)
            runs[run] = train_recipe({**recipe, **values}, options.device)
        ir_run, sts_run = runs["ir-leaning"], runs["sts-leaning"]
        merged = merge_models(
            [ir_run.path, sts_run.path],
            "hierarchical",
            options.output_dir / name,
            ir_models=[ir_run.path],
            sts_models=[sts_run.path],
            base=options.base_model,
            ir_specialist=ir_run.path,
            sts_specialist=sts_run.path,
            overwrite=True,
            show_progress=False,
        )
        return Trained(
            merged,
            steps=ir_run.steps + sts_run.steps,
            timed_steps=ir_run.timed_steps + sts_run.timed_steps,
            seconds=ir_run.seconds + sts_run.seconds,
            runtime=ir_run.runtime + sts_run.runtime,
        )

    def run_row(self, row: str, seed: int) -> bool | None:
        """Reuse (``--resume``, ``--report-only``) or make and evaluate one row.

        Returns whether the report holds the row: ``True`` once written (after every evaluated row, so an
        interrupted run keeps the rows it finished), ``False`` for a reused row, ``None`` for a row skipped.
        """
        options = self.options
        key = self.key(row, seed)
        saved = options.output_dir / "evaluations" / f"{key}.json"
        if options.report_only and not saved.is_file():
            return None
        if (options.resume or options.report_only) and saved.is_file():
            self.results[key] = json.loads(saved.read_text(encoding="utf-8"))
            print(f"[{key}] reusing {saved}", flush=True)
            if options.resume:
                model_path = options.base_model if row == "base" else str(options.output_dir / key)
                self.results[key] = complete_evaluation(self.results[key], saved, model_path, self.suite, options)
            return False
        from hf_unified_embed.evaluation import run_suite

        row_started = time.perf_counter()
        print(f"\n=== {key} ===", flush=True)
        trained = self.make(row, key, seed)
        model_path = options.base_model if trained is None else str(trained.path)
        evaluation = run_suite(evaluation_model(model_path, options), self.suite, diagnostics=options.diagnostics)
        evaluation.extra["seconds"] = time.perf_counter() - row_started
        evaluation.extra["row"], evaluation.extra["seed"] = row, None if trained is None else seed
        if trained is not None:
            evaluation.extra["training"] = {
                "steps": trained.steps,
                "timed_steps": trained.timed_steps,
                "seconds": trained.seconds,
                "train_runtime": trained.runtime,
                "peak_memory_mib": trained.peak_memory_mib,
                "threads": trained.threads,
            }
        evaluation.save_json(saved, overwrite=True)
        self.results[key] = json.loads(saved.read_text(encoding="utf-8"))
        print(f"[{key}] done in {evaluation.extra['seconds']:.0f} s", flush=True)
        report(self.results, options, self.argv)
        return True


def evaluation_model(model_path: str, options: argparse.Namespace) -> Any:
    """The saved model at ``model_path`` as every row is evaluated: on ``--device``, at ``--eval-max-seq-length``."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(model_path, device=options.device)
    if options.eval_max_seq_length:
        model.max_seq_length = options.eval_max_seq_length
    return model


def complete_evaluation(
    evaluation: dict[str, Any], saved: Path, model_path: str, suite: Mapping[str, Any], options: argparse.Namespace
) -> dict[str, Any]:
    """A reused row's evaluation with the suite entries added since it was scored (its saved model scores
    them; the entries it has are kept as they are), written back to ``saved``."""
    from hf_unified_embed.evaluation import run_suite
    from hf_unified_embed.utils.outputs import StagedOutput

    missing = [entry for entry in suite["evaluations"] if entry["name"] not in evaluation["results"]]
    if not missing:
        return evaluation
    names = [entry["name"] for entry in missing]
    if not Path(model_path).is_dir():
        print(f"  its model {model_path} is gone: {names} stay unscored", flush=True)
        return evaluation
    print(f"  scoring {names}, added to the suite since", flush=True)
    model = evaluation_model(model_path, options)
    added = json.loads(run_suite(model, {**suite, "evaluations": missing}, diagnostics=options.diagnostics).to_json())
    evaluation["results"].update(added["results"])
    evaluation["table"] += added["table"]
    evaluation["model-index"][0]["results"] += added["model-index"][0]["results"]
    with StagedOutput(saved, overwrite=True, kind="file") as stage:
        stage.path.write_text(json.dumps(evaluation, indent=2) + "\n", encoding="utf-8")
    return evaluation


def reduced_beir(source: Path, target: Path, queries: int) -> Path:
    """A BEIR folder with the first ``queries`` queries of ``source`` and only the passages judged for them.

    The CPU setting's MS MARCO: every query keeps all its judged passages (graded nDCG@10 is computed
    over the same judgements), the corpus loses the other queries' pools (so it is smaller and the
    task easier: values are comparable between rows, not with the full corpus).
    """

    def lines(path: Path) -> list[str]:  # not splitlines(): passages hold U+2028 inside their JSON strings
        return [line for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]

    kept = [json.loads(line) for line in lines(source / "queries.jsonl")][:queries]
    ids = {query["_id"] for query in kept}
    qrels = lines(source / "qrels" / "test.tsv")
    header = [qrels.pop(0).split("\t")] if qrels and qrels[0].startswith("query-id") else []
    judgements = [line.split("\t") for line in qrels if line.split("\t")[0] in ids]
    judged = {fields[1] for fields in judgements}
    (target / "qrels").mkdir(parents=True, exist_ok=True)
    with open(target / "corpus.jsonl", "w", encoding="utf-8") as corpus:
        for line in lines(source / "corpus.jsonl"):
            if json.loads(line)["_id"] in judged:
                corpus.write(line + "\n")
    (target / "queries.jsonl").write_text("".join(json.dumps(query) + "\n" for query in kept), encoding="utf-8")
    (target / "qrels" / "test.tsv").write_text(
        "".join("\t".join(f) + "\n" for f in header + judgements), encoding="utf-8"
    )
    return target


def forgetting_entry(options: argparse.Namespace) -> dict[str, Any]:
    """The suite entry of the "kept" column: neighbour overlap@10 with the base over MS MARCO passages (no labels)."""
    return {
        "name": FORGETTING,
        "kind": "forgetting",
        "source": "beir",
        "data_files": "ir/msmarco-dl-subset",
        "split": "test",
        "evaluator": {"reference": str(options.base_model), "k": 10, "max_texts": options.forgetting_texts},
        "diagnostics": False,
    }
