"""``validate`` at read speed: checking a unified folder against reading it.

Times, on the given built unified folders (the generator's 1M / 5M folders of ``bench/sources.py``, say),
in the same run and alternating so that load from other processes falls on both alike:

- ``read``: a fresh Python process reading every Parquet shard whole with ``pyarrow.parquet.read_table``
  (all columns), the baseline;
- ``validate``: ``hf-unified-embed validate FOLDER`` (``python -m hf_unified_embed validate``), a fresh
  process: card, layout, every shard's schema (``data/layout_check.py``) and every row (``data/row_check.py``);
- ``check``: the same check in process (``validate_unified_folder``), without the interpreter and import
  start-up, with the file cache warm from the runs before.

Prints each repeat and the median of ``validate / read`` and ``check / read`` (target: validate <= 1.5x).
Run it under the shared lock: ``flock /tmp/hfue-bench.lock .venv/bin/python bench/validate.py FOLDER...``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

READ = (
    "import sys, pyarrow.parquet as pq, pathlib;"
    "print(sum(pq.read_table(p).num_rows for p in sorted(pathlib.Path(sys.argv[1], 'data').rglob('*.parquet'))))"
)


def timed(command: list[str]) -> float:
    """Wall seconds of a subprocess that must succeed."""
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def check_in_process(folder: Path) -> float:
    from hf_unified_embed.data.row_check import validate_unified_folder

    start = time.perf_counter()
    validate_unified_folder(folder)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folders", nargs="+", type=Path, help="built unified folders")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    os.environ.update(environment)
    for folder in args.folders:
        shards = sorted((folder / "data").rglob("*.parquet"))
        size = sum(path.stat().st_size for path in shards) / 1e6
        print(f"# {folder}: {len(shards)} shards, {size:.0f} MB; load {os.getloadavg()[0]:.2f}", flush=True)
        timed([sys.executable, "-c", READ, str(folder)])  # warm the file cache for every contender alike
        ratios, in_process = [], []
        for repeat in range(args.repeats):
            read = timed([sys.executable, "-c", READ, str(folder)])
            validate = timed([sys.executable, "-m", "hf_unified_embed", "validate", str(folder)])
            check = check_in_process(folder)
            ratios.append(validate / read)
            in_process.append(check / read)
            print(
                f"repeat {repeat}: read {read:.2f} s, validate {validate:.2f} s ({validate / read:.2f}x), "
                f"check in process {check:.2f} s ({check / read:.2f}x)",
                flush=True,
            )
        print(
            f"{folder.name}: median validate / read {statistics.median(ratios):.2f}x, "
            f"check in process / read {statistics.median(in_process):.2f}x (target validate <= 1.5x)",
            flush=True,
        )


if __name__ == "__main__":
    main()
