"""Benchmark: the default recipe's training step against its float32 self and stock sentence-transformers.

One command, one run, three rows side by side, each a real ``hf-unified-embed train`` of the shipped recipe
(``examples/recipes/train.yaml``, through ``train_from_recipe``) on the same data, model and batch sizes:

* ``float32`` — the recipe with the device defaults' precision turned off (``bf16: false``, ``tf32: false``);
* ``defaults`` — the recipe as users run it: :func:`hf_unified_embed.device_training_args` (on GPUs that
  compute them natively TF32 and, for models of 50M parameters or more, bf16 autocast; pinned memory and
  dataloader workers on CUDA; nothing on the CPU);
* ``stock`` — stock sentence-transformers at the same precision as ``defaults``: its
  ``MultipleNegativesRankingLoss`` (retrieval) and ``CoSENTLoss`` (STS), its own ``PROPORTIONAL``
  multi-dataset sampler, the same batch sizes and columns.

For each: optimizer steps per second and samples (rows) per second over the timed steps (the first
``--warmup`` are not timed: CUDA kernels, the sampler's plan), the peak memory (``torch.cuda.max_memory_allocated``
on a GPU; the peak resident set of the process on the CPU — each row runs in a fresh process), and the
ratios to ``float32`` and to ``stock``. Then the precision check: one batch's loss and gradients under bf16
autocast against float32 (relative difference of the loss, cosine of the flattened gradients). With
``--profile``, ``torch.profiler`` over one step of the ``defaults`` row, after its timed ones: on CUDA GPU kernel
time against host (CPU) time, on the CPU the host's operators.

    .venv/bin/python bench/step.py                                  # the bundled sample, MiniLM, this machine
    .venv/bin/python bench/step.py --device cuda --random-weights --profile   # a GPU without the real weights
    .venv/bin/python bench/step.py --smoke                          # seconds on the CPU, a tiny model (a test runs it)

``--repeat K`` runs K rounds, the three rows interleaved in each (a GPU's host-bound step moves by ±15 % from one
process to the next): the table shows each row's median and the ratios of the medians, then every round's
ratios. "waiting for data" is the mean wait for a batch per timed step and, after the slash, the median
(an epoch's first batch waits for the dataloader's workers to start, unless they persist).

``--candidate KEY=VALUE[,KEY=VALUE]`` adds one more row (repeatable): the defaults with those training arguments
added, a candidate for the defaults (``--candidate torch_compile=true``); a candidate row that fails is reported
and the others stand. Each row also prints its median step, which a step that compiles or re-plans does not move.

Every row but a candidate trains one more step after the timed ones, in which every operator whose result the
host reads is counted with the line that asked for it (``hf_unified_embed.training.host_reads``; on a GPU each
such read waits for the kernels queued before it): the table's last column, and where for ``defaults`` and
``stock`` below it.

As each row ends it prints one line: its steps/s and where its process's wall time went (starting, the whole
``train_from_recipe``, ending); ``--json`` is rewritten after every row (``"complete": false`` until the end),
so a run that a time limit ends keeps the rows it measured.

``--data`` trains on a unified folder instead of the bundled sample (built here from
``examples/recipes/sample.yaml``); ``--model`` any model; ``--random-weights`` a randomly initialised model of
all-MiniLM-L6-v2's shape with its tokenizer (the lent GPU machines cannot carry the real weights).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
if str(REPO / "bench") not in sys.path:
    sys.path.insert(0, str(REPO / "bench"))

from _step_probes import peak_mb, step_profiler, step_reads  # noqa: E402
from _timing import every_trainer_calls, step_timer  # noqa: E402

RECIPE = REPO / "examples" / "recipes" / "train.yaml"
SAMPLE = REPO / "examples" / "recipes" / "sample.yaml"
MODES = ("float32", "defaults", "stock")
CANDIDATE = "defaults+"
RANDOM_SHAPES: dict[str, dict[str, int]] = {
    "minilm": {},
    "bert-base": {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072},
    # MiniLM's six layers at width 32: its arithmetic all but vanishes and the operators stay, so on a CPU the
    # step costs what the host spends launching them — a stand-in for a GPU's host-bound step at 16 rows.
    "host": {"hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 64},
}
STOCK_LOSSES = {
    "retrieval": {"name": "MultipleNegativesRankingLoss"},
    "sts": {"name": "CoSENTLoss"},
    "pair_classification": {"name": "CoSENTLoss"},
}


def build_sample(folder: Path) -> Path:
    """The bundled sample built into ``folder`` (what ``make demo`` trains on)."""
    from hf_unified_embed.cli.main import main

    target = folder / "data"
    if main(["build", str(SAMPLE), "-o", str(target)]) != 0:
        raise SystemExit(f"building {SAMPLE} failed")
    return target


def random_model(folder: Path, shape: str) -> Path:
    """A randomly initialised copy of the packaged all-MiniLM-L6-v2 (tokenizer, pooling, normalisation): of its
    shape (``minilm``) or of BERT-base's (``bert-base``: 768 wide, 12 layers, 110M parameters, where a GPU
    step is bound by the GPU's arithmetic rather than by the host launching kernels)."""
    from sentence_transformers import SentenceTransformer, models
    from transformers import AutoConfig, BertModel

    from hf_unified_embed.recipe import packaged_minilm_path

    source = packaged_minilm_path()
    model = SentenceTransformer(source, device="cpu")
    config = AutoConfig.from_pretrained(source, **RANDOM_SHAPES[shape])
    # A freshly initialised BERT of that configuration: random weights, the packaged tokenizer.
    model[0].model = BertModel(config)
    model[1] = models.Pooling(config.hidden_size, "mean")
    target = folder / f"random-{shape}"
    model.save(str(target))
    return target


def parsed_settings(settings: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` training arguments (``--set``, ``--candidate``) as a dict, each value read as YAML."""
    return {key: yaml.safe_load(value) for key, _, value in (setting.partition("=") for setting in settings)}


def recipe_for(mode: str, options: argparse.Namespace, data: Path, model: str | None, output: Path) -> dict[str, Any]:
    """The shipped recipe, pointed at ``data`` and ``model``, as ``mode`` runs it."""
    recipe = yaml.safe_load(RECIPE.read_text())
    recipe["data"]["path"] = str(data)
    if options.tasks:
        recipe["data"]["tasks"] = options.tasks
    if options.max_rows_per_task:
        recipe["data"]["max_rows_per_task"] = options.max_rows_per_task
    if options.batch_size:
        # Every task at this batch size (a GPU's step at the recipe's 16 rows measures kernel launches).
        recipe["sampler"]["batch_sizes"] = dict.fromkeys(recipe["sampler"].get("batch_sizes", {}), options.batch_size)
        recipe["training_args"]["per_device_train_batch_size"] = options.batch_size
    recipe["base_model"] = model
    recipe["evaluation"] = None
    recipe["output_dir"] = str(output / mode)
    training = recipe["training_args"]
    training.pop("num_train_epochs", None)
    training.update(
        {
            "max_steps": options.warmup + options.steps,
            "save_strategy": "no",
            "logging_steps": 10**6,
            "seed": 42,
            "use_cpu": options.device == "cpu",
            "report_to": "none",
        }
    )
    training.update(parsed_settings(options.set))
    if options.workers is not None:
        # A machine whose /dev/shm cannot hold the workers' batches trains with them in the main process.
        training["dataloader_num_workers"] = options.workers
    if mode == "float32":
        training.update({"bf16": False, "tf32": False})
    if mode.startswith(CANDIDATE):
        # A candidate for the defaults: the defaults row with these settings added (``--candidate``).
        training.update(parsed_settings(mode.removeprefix(CANDIDATE).split(",")))
    if mode == "stock":
        recipe["losses"] = STOCK_LOSSES
        recipe["sampler"] = {"kind": "proportional"}  # sentence-transformers' own multi-dataset sampler
    return recipe


def run_mode(
    mode: str, options: argparse.Namespace, data: str, model: str | None, output: str, profiled: bool = False
) -> dict[str, Any]:
    """One row, in a fresh process: train the recipe for warmup + steps optimizer steps and time them; with
    ``profiled``, one more step under ``torch.profiler`` (its table in ``"profile"``)."""
    import torch

    from hf_unified_embed.recipe import recipe_from_dict, train_from_recipe

    recipe = recipe_for(mode, options, Path(data), model, Path(output))
    last = options.warmup + options.steps
    # Steps after the timed ones, each watched by a probe that slows it: the profiler's (with ``profiled``),
    # then the host reads' (not in a candidate row, whose settings may compile the step: a dispatch mode
    # would be traced into it).
    profiler = step_profiler(last, options.device) if profiled else None
    reads = None if mode.startswith(CANDIDATE) else step_reads(last + int(profiled), options.device)
    probes = [probe for probe in (profiler, reads) if probe is not None]
    recipe["training_args"]["max_steps"] += len(probes)
    if options.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    timer = step_timer(options.device)
    begun = time.time()
    with contextlib.ExitStack() as watching:
        for callback in (timer, *probes):
            watching.enter_context(every_trainer_calls(callback))
        train_from_recipe(recipe_from_dict(recipe, origin=f"bench/step.py:{mode}"), overwrite=True)
    ended = time.time()
    timed = timer.stamps[options.warmup : last]
    seconds = timed[-1] - timed[0] if len(timed) > 1 else float("nan")
    steps = max(len(timed) - 1, 0)
    # Each timed step's wait for its batch: from the previous step's end to its own beginning.
    waits = [
        begin - end
        for end, begin in zip(timer.stamps[options.warmup : last - 1], timer.begins[options.warmup + 1 : last])
    ]
    rows = recipe["training_args"]["per_device_train_batch_size"]
    # The probes' own records would count in the peak (on the CPU the profiler's doubled it): taken before them.
    peak = probes[0].peak_before if probes else peak_mb(options.device)
    return {
        "mode": mode,
        "steps_per_s": steps / seconds,
        "samples_per_s": steps * rows / seconds,
        "peak_mb": peak,
        "data_wait_ms": 1e3 * sum(waits) / max(len(waits), 1),
        # The median step (end to end): a step that compiles or re-plans moves the mean, not this.
        "median_step_ms": 1e3 * statistics.median(b - a for a, b in itertools.pairwise(timed))
        if steps
        else float("nan"),
        "waits_ms": [round(1e3 * wait, 2) for wait in waits],
        "profile": profiler.table if profiler is not None else "",
        # Operators of one step whose result the host reads (each a wait for the GPU's queue), and where.
        "host_reads": len(reads.reads.reads) if reads is not None else None,
        "host_reads_where": reads.reads.summary() if reads is not None else "",
        # Wall-clock stamps (time.time()) of the run's phases; run_row turns them into seconds per phase.
        "train_begun": begun,
        "train_ended": ended,
    }


def precision_check(options: argparse.Namespace, data: Path, model: str | None, output: Path) -> dict[str, float]:
    """One batch of the default recipe: loss and gradients under bf16 autocast against float32."""
    import torch
    from sentence_transformers import SentenceTransformerTrainer

    from hf_unified_embed.recipe import recipe_from_dict
    from hf_unified_embed.recipe.preflight import preflight
    from hf_unified_embed.recipe.run import prepare_run

    recipe = recipe_for("float32", options, data, model, output)
    run = prepare_run(preflight(recipe_from_dict(recipe, origin="bench/step.py:precision")), None)
    device = torch.device(options.device)
    run.model.to(device)
    task = next(iter(run.tasks))
    rows = [run.tasks[task][index] for index in range(min(8, len(run.tasks[task])))]
    batch = run.collator([{**row, "dataset_name": task} for row in rows])
    batch.pop("dataset_name", None)
    # The trainer's own split of a collated batch into the model inputs of each column and the labels.
    features, labels = SentenceTransformerTrainer.collect_features(None, batch)  # type: ignore[arg-type]
    features = [
        {key: value.to(device) if isinstance(value, torch.Tensor) else value for key, value in column.items()}
        for column in features
    ]
    labels = labels.to(device) if isinstance(labels, torch.Tensor) else labels
    loss_fn = run.losses[task]

    def loss_and_grad(autocast: bool) -> tuple[float, torch.Tensor]:
        run.model.zero_grad()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            value = loss_fn(features, labels)
        value = sum(value.values()) if isinstance(value, dict) else value
        value.backward()
        grads = torch.cat([p.grad.flatten() for p in run.model.parameters() if p.grad is not None])
        return value.item(), grads.double()

    loss32, grad32 = loss_and_grad(False)
    loss16, grad16 = loss_and_grad(True)
    cosine = float(torch.nn.functional.cosine_similarity(grad32, grad16, dim=0))
    return {
        "task": task,  # type: ignore[dict-item]
        "loss_fp32": loss32,
        "loss_bf16": loss16,
        "loss_rel_diff": abs(loss16 - loss32) / abs(loss32),
        "grad_cosine": cosine,
    }


def median_row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One mode's rounds as one row: the median of each figure, and the median wait over every timed step."""
    waits = sorted(wait for row in rows for wait in row["waits_ms"])
    return {
        "mode": rows[0]["mode"],
        **{
            key: statistics.median(row[key] for row in rows)
            for key in ("steps_per_s", "samples_per_s", "data_wait_ms", "median_step_ms")
        },
        "peak_mb": max(row["peak_mb"] for row in rows),
        "median_wait_ms": statistics.median(waits) if waits else float("nan"),
        "host_reads": rows[0].get("host_reads"),  # the same code path in every round
        "host_reads_where": rows[0].get("host_reads_where", ""),
    }


def run_row(
    mode: str, options: argparse.Namespace, data: Path, model: str | None, work: Path, profiled: bool = False
) -> dict[str, Any]:
    """``run_mode`` in a fresh interpreter, as a user's ``hf-unified-embed train`` runs: its own peak memory,
    and dataloader workers started as the platform starts them (a ``multiprocessing`` child would make
    them spawned, and on CUDA the defaults start workers)."""
    result = work / f"{mode}.json"
    row = {
        "mode": mode,
        "data": str(data),
        "model": model,
        "output": str(work / "runs"),
        "result": str(result),
        "profiled": profiled,
    }
    command = [sys.executable, __file__, *sys.argv[1:], "--row", json.dumps(row)]
    started = time.time()
    if subprocess.run(command, check=False).returncode != 0:
        if mode.startswith(CANDIDATE):  # a candidate that fails (say, a compiler missing) leaves the others
            print(f"the {mode} row failed (its output is above)", file=sys.stderr)
            return {"mode": mode, "failed": True, "waits_ms": [], "peak_mb": float("nan")} | dict.fromkeys(
                ("steps_per_s", "samples_per_s", "data_wait_ms", "median_step_ms"), float("nan")
            )
        raise SystemExit(f"the {mode} row failed (its output is above)")
    figures = dict(json.loads(result.read_text()))
    figures["phases_s"] = row_phases(started, figures.pop("train_begun"), figures.pop("train_ended"), time.time())
    phases = figures["phases_s"]
    # Said as each row ends: a stage cut by a time limit still shows what its rows measured and where
    # their time went (a row's process is mostly not its timed steps).
    print(
        f"row {mode}: {figures['steps_per_s']:.2f} steps/s; its process {phases['process']:.1f} s — "
        f"{phases['start']:.1f} s starting, {phases['train']:.1f} s in train_from_recipe, "
        f"{phases['exit']:.1f} s ending",
        flush=True,
    )
    return figures


def row_phases(started: float, train_begun: float, train_ended: float, finished: float) -> dict[str, float]:
    """Where a row's process spent its wall time: starting (the interpreter, imports, the recipe), the whole
    ``train_from_recipe`` (model, data, dataloader workers, every step, the save), and ending (after training
    until the process was gone: writing the figures, ending workers, the interpreter's exit)."""
    return {
        "process": finished - started,
        "start": train_begun - started,
        "train": train_ended - train_begun,
        "exit": finished - train_ended,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, help="a unified folder (default: the bundled sample, built here)")
    parser.add_argument("--model", help="a model folder or Hub id (default: the packaged all-MiniLM-L6-v2)")
    parser.add_argument("--random-weights", action="store_true", help="all-MiniLM-L6-v2's shape, random weights")
    parser.add_argument(
        "--random-shape",
        choices=RANDOM_SHAPES,
        help="with --random-weights: minilm (the default; host with --smoke), bert-base or host (MiniLM's layers at width 32)",
    )
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    parser.add_argument("--steps", type=int, default=20, help="timed optimizer steps per row")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    parser.add_argument("--tasks", nargs="+", help="the recipe's tasks (default: the recipe's)")
    parser.add_argument("--max-rows-per-task", type=int)
    parser.add_argument("--batch-size", type=int, help="rows per step for every task (default: the recipe's)")
    parser.add_argument("--workers", type=int, help="dataloader workers for every row (default: the device defaults)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a training argument for every row (YAML value), e.g. logging_nan_inf_filter=false",
    )
    parser.add_argument(
        "--candidate",
        action="append",
        default=[],
        metavar="KEY=VALUE[,KEY=VALUE]",
        help="one more row: the defaults with these training arguments added (a candidate default), e.g. torch_compile=true",
    )
    parser.add_argument("--repeat", type=int, default=1, help="rounds of the three rows, interleaved (medians)")
    parser.add_argument("--profile", action="store_true", help="torch.profiler over one more step of the defaults row")
    parser.add_argument(
        "--smoke", action="store_true", help="seconds on the CPU: 1 + 2 steps, small tasks, a width-32 random model"
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--row", help=argparse.SUPPRESS)  # one row, in the process run_row starts
    options = parser.parse_args()
    if options.device is None:
        import torch

        options.device = "cuda" if torch.cuda.is_available() else "cpu"
    if options.smoke:
        # What runs end to end, not what it measures: a test runs it on loaded CI machines, each row in a process
        # of its own. MiniLM's layers at width 32 (``host``) keep every operator at a fraction of the arithmetic.
        options.steps, options.warmup = 2, 1
        options.max_rows_per_task = options.max_rows_per_task or 64
        options.random_weights = options.random_weights or options.model is None
        options.random_shape = options.random_shape or "host"
    options.random_shape = options.random_shape or "minilm"
    if options.row:
        row = json.loads(options.row)
        figures = run_mode(row["mode"], options, row["data"], row["model"], row["output"], row["profiled"])
        Path(row["result"]).write_text(json.dumps(figures))
        return

    with tempfile.TemporaryDirectory(prefix="bench-step-") as scratch:
        work = Path(scratch)
        data = options.data or build_sample(work)
        model = str(random_model(work, options.random_shape)) if options.random_weights else options.model
        modes = [*MODES, *(CANDIDATE + settings for settings in options.candidate)]
        rounds: list[list[dict[str, Any]]] = []
        for _ in range(options.repeat):
            rounds.append([])
            for mode in modes:
                # The profile: one step of the first round's defaults row, after its timed steps.
                profiled = options.profile and mode == "defaults" and len(rounds) == 1
                rounds[-1].append(run_row(mode, options, Path(data), model, work, profiled))
                if options.json:  # what is measured so far, should a time limit end the run here
                    write_figures(options.json, rounds=rounds, complete=False)
        check = precision_check(options, data, model, work / "precision")
    table = next((row["profile"] for row in rounds[0] if row.get("profile")), "")  # a failed row has none

    results = [median_row([round_[index] for round_ in rounds]) for index in range(len(modes))]
    by_mode = {row["mode"]: row for row in results}
    memory = "peak GPU memory" if options.device.startswith("cuda") else "peak RSS"
    print(
        f"device {options.device}; {options.steps} timed steps after {options.warmup}; model {model or 'all-MiniLM-L6-v2'}; "
        f"batch size {options.batch_size or 'as the recipe'}; {options.repeat} round(s), medians"
    )
    print(
        f"| row | steps/s | samples/s | {memory} | waiting for data | median step | step time × float32 | "
        "step time × stock | host reads in a step |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in results:
        versus32 = by_mode["float32"]["steps_per_s"] / row["steps_per_s"]
        versus_stock = by_mode["stock"]["steps_per_s"] / row["steps_per_s"]
        reads = "—" if row.get("host_reads") is None else row["host_reads"]
        print(
            f"| {row['mode']} | {row['steps_per_s']:.2f} | {row['samples_per_s']:.1f} | {row['peak_mb']:,.0f} MB | "
            f"{row['data_wait_ms']:.1f} / {row['median_wait_ms']:.1f} ms/step | {row['median_step_ms']:.1f} ms | "
            f"{versus32:.2f} | {versus_stock:.2f} | {reads} |"
        )
    if options.repeat > 1:
        for round_ in rounds:
            speed = {row["mode"]: row["steps_per_s"] for row in round_}
            print(
                "round: "
                + ", ".join(
                    f"{mode} × float32 {speed['float32'] / speed[mode]:.2f}, × stock {speed['stock'] / speed[mode]:.2f}"
                    for mode in modes[1:2] + modes[3:]
                )
            )
    print(
        f"bf16 vs float32 on one {check['task']} batch: loss {check['loss_fp32']:.5f} vs {check['loss_bf16']:.5f} "
        f"(relative difference {check['loss_rel_diff']:.2e}), gradient cosine {check['grad_cosine']:.5f}"
    )
    for mode in ("defaults", "stock"):  # where the host read a value in one step (on a GPU, a wait each)
        if by_mode[mode].get("host_reads_where"):
            print(f"host reads in one step of the {mode} row (reads, operator, asked for at):")
            print(by_mode[mode]["host_reads_where"])
    if table:
        print(table)
    if options.json:
        write_figures(options.json, rows=results, rounds=rounds, precision=check, profile=table, complete=True)


def write_figures(path: Path, **figures: Any) -> None:
    """The figures as JSON, with the machine that measured them."""
    machine = {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version()}
    path.write_text(json.dumps({**figures, **machine}, indent=1))


if __name__ == "__main__":
    main()
