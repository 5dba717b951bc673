"""LoRA vs full fine-tuning of a small random decoder, causal vs bidirectional attention, and the cost of the
mid-layer InfoNCE term on decoders.

Builds a random Qwen2 decoder (``tests/_tiny_decoders.py``, a test helper; tokenizer trained on the bundled
sample) and runs each configuration in a fresh process, so that peak memory is that configuration's
alone: a training step (forward, backward, AdamW) of ``MultiPositiveInfoNCELoss`` on (query,
positive, negative) rows, last-token pooling with an appended EOS, left padding.

* ``full`` vs ``lora`` (r 8 on q/k/v/o projections) and ``lora+gc`` (gradient checkpointing):
  median step time, peak memory, trainable parameters; ratios against ``full``.
* ``sts`` vs ``sts+mid``: ``CoDiEmbSTSLoss`` without and with the intermediate-layer InfoNCE term
  (``hidden_states[n // 2]`` of the decoder): step-time ratio.
* attention: ``full`` and ``lora`` (causal, last-token pooling of an appended EOS, as the causal anchors
  train) vs ``bidir`` and ``bidir+lora`` (``model.attention: bidirectional`` in every layer, mean
  pooling: transformers' ``is_causal: false``) and ``bidir@half`` (bidirectional from the middle layer,
  BiLLM's start index: the layer hooks of :mod:`hf_unified_embed.training.attention`).

On CPU the table also gives the process's CPU time per step (all threads), which other work on a
shared machine inflates far less than the wall-clock step time.

Peak memory: ``torch.cuda.max_memory_allocated`` on a GPU; on CPU the process's peak RSS and its rise
above the RSS after loading (weights, gradients, optimizer state and activations of training).

``--configs`` runs a subset (``full``, the reference of every ratio, always runs).

Run: ``.venv/bin/python bench/llm.py`` (CPU, ~5 min on 2 quiet cores) or
``python bench/llm.py --device cuda --hidden 1024 --layers 8 --batch 32 --seq 128`` on a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parent.parent

CONFIGS = ("full", "lora", "lora+gc", "sts", "sts+mid", "bidir", "bidir@half", "bidir+lora")


def _tiny_decoders() -> Any:
    """The tiny decoder builder: a test helper in tests/, not part of the package, so it is reached there."""
    tests = str(REPO / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    import _tiny_decoders

    return _tiny_decoders


def _texts(seq: int) -> list[str]:
    bundled_corpus = _tiny_decoders().bundled_corpus
    words = " ".join(bundled_corpus(REPO / "examples" / "data")).split()
    span = max(4, seq // 2)  # about two tokens per word with the small trained vocabulary
    return [" ".join(words[i : i + span]) for i in range(0, len(words) - span, span)]


def worker(args: argparse.Namespace) -> dict[str, Any]:
    import psutil
    import torch
    from peft import LoraConfig

    from hf_unified_embed.losses import CoDiEmbSTSLoss, MultiPositiveInfoNCELoss
    from hf_unified_embed.training.backbones import ModelConfig, build_model

    torch.manual_seed(0)
    device = args.device
    config = args.worker
    if config.startswith("bidir"):  # mean pooling, the default of bidirectional attention
        first = args.layers // 2 if config == "bidir@half" else None
        model_config = ModelConfig(attention="bidirectional", first_bidirectional_layer=first, padding_side="left")
    else:
        model_config = ModelConfig(
            pooling="lasttoken", padding_side="left", gradient_checkpointing=config.endswith("+gc")
        )
    model = build_model(args.model, model_config, max_seq_length=args.seq).to(device)
    if config.startswith("lora") or config.endswith("+lora"):
        model.add_adapter(LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]))
    model.train()
    texts = _texts(args.seq)
    batch = [texts[i % len(texts)] for i in range(3 * args.batch)]
    if config.startswith("sts"):
        loss: Any = CoDiEmbSTSLoss(model, mid_layer_weight=1.0 if config == "sts+mid" else 0.0)
        columns = [batch[: args.batch], batch[args.batch : 2 * args.batch]]
        labels = torch.linspace(0, 1, args.batch, device=device)
    else:
        loss = MultiPositiveInfoNCELoss(model)
        columns = [batch[i * args.batch : (i + 1) * args.batch] for i in range(3)]
        labels = None
    features = [{k: v.to(device) if hasattr(v, "to") else v for k, v in model.preprocess(c).items()} for c in columns]
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-4)
    rss_loaded = psutil.Process().memory_info().rss
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    times, cpu_times = [], []
    for step in range(args.warmup + args.steps):
        start, cpu_start = time.perf_counter(), time.process_time()
        output = loss(features, labels)
        value = sum(output.values()) if isinstance(output, dict) else output
        value.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if device == "cuda":
            torch.cuda.synchronize()
        if step >= args.warmup:
            times.append(time.perf_counter() - start)
            cpu_times.append(time.process_time() - cpu_start)
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {
        "config": config,
        "step_s": statistics.median(times),
        "cpu_s": statistics.median(cpu_times),
        "peak_bytes": torch.cuda.max_memory_allocated() if device == "cuda" else peak_rss,
        "training_bytes": None if device == "cuda" else peak_rss - rss_loaded,
        "trainable": sum(p.numel() for p in trainable),
        "total": sum(p.numel() for p in model.parameters()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--configs", nargs="+", choices=CONFIGS, default=list(CONFIGS), help="configurations to run")
    parser.add_argument("--worker", choices=CONFIGS, help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    if args.worker:
        print(json.dumps(worker(args)))
        return

    tiny = _tiny_decoders()
    bundled_corpus, make_tiny_decoder = tiny.bundled_corpus, tiny.make_tiny_decoder

    with tempfile.TemporaryDirectory() as scratch:
        model_dir = make_tiny_decoder(
            Path(scratch) / "qwen2",
            "qwen2",
            bundled_corpus(REPO / "examples" / "data"),
            hidden_size=args.hidden,
            num_layers=args.layers,
        )
        results = {}
        for config in [name for name in CONFIGS if name == "full" or name in args.configs]:
            command = [sys.executable, __file__, "--worker", config, "--model", str(model_dir)]
            for flag in ("device", "hidden", "layers", "batch", "seq", "steps", "warmup", "threads"):
                command += [f"--{flag}", str(getattr(args, flag))]
            completed = subprocess.run(command, capture_output=True, text=True, check=True)
            results[config] = json.loads(completed.stdout.strip().splitlines()[-1])
            print(f"  {config}: {results[config]}", file=sys.stderr)

    device = torch.cuda.get_device_name() if args.device == "cuda" else f"CPU ({args.threads} threads)"
    print(f"Qwen2 decoder, hidden {args.hidden}, {args.layers} layers, batch {args.batch} x seq {args.seq}, {device}")
    cpu = args.device != "cuda"
    cpu_header = f" {'CPU (s)':>9} {'ratio':>6}" if cpu else ""
    print(
        f"{'config':<10} {'step (s)':>9} {'ratio':>6}{cpu_header} {'peak MB':>9} {'ratio':>6} {'train MB':>9} {'ratio':>6} "
        f"{'trainable':>11}"
    )
    for config in [name for name in CONFIGS if name in results and not name.startswith("sts")]:
        row, base = results[config], results["full"]
        training = row["training_bytes"]
        training_cells = (
            f"{training / 2**20:>9.1f} {training / base['training_bytes']:>6.2f}"
            if training is not None
            else f"{'-':>9} {'-':>6}"
        )
        cpu_cells = f" {row['cpu_s']:>9.4f} {row['cpu_s'] / base['cpu_s']:>6.2f}" if cpu else ""
        print(
            f"{config:<10} {row['step_s']:>9.4f} {row['step_s'] / base['step_s']:>6.2f}{cpu_cells} "
            f"{row['peak_bytes'] / 2**20:>9.1f} {row['peak_bytes'] / base['peak_bytes']:>6.2f} {training_cells} "
            f"{row['trainable']:>11,}"
        )
    if "sts" in results and "sts+mid" in results:
        sts, mid = results["sts"], results["sts+mid"]
        print(f"CoDiEmbSTSLoss step with / without the mid-layer InfoNCE term: {mid['step_s'] / sts['step_s']:.3f}x")
    if "lora" in results and "bidir+lora" in results:
        lora, bidir = results["lora"], results["bidir+lora"]
        ratios = f"{bidir['step_s'] / lora['step_s']:.3f}x" + (
            f" (CPU time {bidir['cpu_s'] / lora['cpu_s']:.3f}x)" if cpu else ""
        )
        print(f"LoRA step, bidirectional / causal: {ratios}")


if __name__ == "__main__":
    main()
