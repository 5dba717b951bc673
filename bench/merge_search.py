"""Quality-report row: the CoDiEmb run interpolated with its base by ``merge search`` on the dev sets.

A strong base model tends to lose some retrieval quality when fine-tuned on small answer-selection
data; interpolating back toward it is the cheap cure. This script

1. takes the ``codiemb`` run of ``bench/quality.py`` (``--run``; by default
   ``outputs/quality/codiemb``, trained by ``bench/quality.py --rows codiemb`` if missing);
2. searches λ in θ = θ_base + λ (θ_run − θ_base) (``task_arithmetic`` with one model: λ = 0 is
   the base, λ = 1 the run) over ``--steps`` evenly spaced values on ``examples/suites/dev.yaml``
   (STS-B dev, SICK trial, TrecQA dev, MSRP validation) with the objective
   ``0.5 stsb-dev + 0.5 sick-trial + 1.0 trecqa-dev`` (STS and retrieval weighed alike);
3. evaluates the base, the run and the chosen merge on ``examples/suites/shared.yaml`` and reports
   whether every retrieval column of the merge is at or above the base and how much of the run's
   STS gain (mean of STS12–15) it keeps.

STS-B dev and SICK trial are both searched on and shown in ``shared.yaml``; the held-out columns
are STS12–15, MS MARCO, TrecQA test and MSRP test.

    flock /tmp/hfue-bench.lock .venv/bin/python bench/merge_search.py --output-dir outputs/merge-search
    # on a GPU machine, evaluation uses CUDA automatically
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parent.parent
DEV_SUITE = REPO / "examples" / "suites" / "dev.yaml"
TEST_SUITE = REPO / "examples" / "suites" / "shared.yaml"
OBJECTIVE = {"stsb-dev": 0.5, "sick-trial": 0.5, "trecqa-dev": 1.0}
STS_HELD_OUT = ("sts12", "sts13", "sts14", "sts15")
#: Column → (suite entry, metric key pattern), as in bench/quality.py.
RETRIEVAL = {"MS MARCO nDCG@10": ("msmarco-dl", r"(cosine_)?ndcg@10"), "TrecQA MAP": ("trecqa-test", r"(cosine_)?map")}


def codiemb_run(options: argparse.Namespace) -> Path:
    """The quality report's ``codiemb`` row: reused if present, else trained by ``bench/quality.py`` itself
    (``--rows codiemb`` into ``--run``'s parent folder, which names the run after its row)."""
    if (options.run / "modules.json").is_file():
        print(f"reusing the CoDiEmb run in {options.run}", flush=True)
        return options.run
    if options.run.name != "codiemb":
        raise SystemExit(f"--run {options.run}: no model there; bench/quality.py trains its row into a folder codiemb")
    command = [sys.executable, str(REPO / "bench" / "quality.py"), "--rows", "codiemb"]
    command += ["--max-steps", str(options.max_steps), "--output-dir", str(options.run.parent)]
    command += ["--data-root", str(options.data_root)]
    if options.base_model:
        command += ["--base-model", options.base_model]
    if options.device:
        command += ["--device", options.device]
    subprocess.run(command, check=True)
    return options.run


def summary(results: Any) -> dict[str, float]:
    row = {"STS12–15 mean ρ": statistics.fmean(results[name].primary_value for name in STS_HELD_OUT)}
    row["STS-B dev ρ"] = results["stsb-dev"].primary_value
    row["SICK trial ρ"] = results["sick-trial"].primary_value
    for column, (entry, pattern) in RETRIEVAL.items():
        (key,) = [key for key in results[entry].metrics if re.fullmatch(pattern, key)]
        row[column] = results[entry].metrics[key]
    row["MSRP AP"] = results["msrp-test"].primary_value
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=Path, default=Path("outputs/quality/codiemb"), help="the CoDiEmb run folder")
    parser.add_argument("--base-model", help="default: the packaged all-MiniLM-L6-v2")
    parser.add_argument("--data-root", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--max-steps", type=int, default=200, help="when the run has to be trained")
    parser.add_argument("--device", help="cpu, cuda or cuda:N (default: cuda when available, else cpu)")
    parser.add_argument("--steps", type=int, default=6, help="λ values tried, evenly spaced in [0, 1]")
    parser.add_argument("--output-dir", type=Path, default=Path("outputs/merge-search"))
    parser.add_argument("--resume", action="store_true", help="reuse a finished search and saved test results")
    options = parser.parse_args(argv)

    import torch
    from sentence_transformers import SentenceTransformer

    from hf_unified_embed.evaluation import run_suite
    from hf_unified_embed.merge.search import SEARCH_FILE, SearchResult, search_merge
    from hf_unified_embed.recipe import DEFAULT_BASE_MODEL_ID, packaged_minilm_path

    started = time.perf_counter()
    options.base_model = options.base_model or packaged_minilm_path()
    options.device = options.device or ("cuda" if torch.cuda.is_available() else "cpu")
    run = codiemb_run(options)
    merged = options.output_dir / "interpolated"
    if options.resume and (merged / SEARCH_FILE).is_file():
        print(f"reusing the search in {merged}", flush=True)
        result = SearchResult.from_dict(json.loads((merged / SEARCH_FILE).read_text()), merged)
    else:
        result = search_merge(
            [run],
            "task_arithmetic",
            merged,
            base=options.base_model,
            suite=DEV_SUITE,
            data_root=str(options.data_root),
            search={"weights": {"min": 0.0, "max": 1.0, "steps": options.steps}},
            objective=OBJECTIVE,
            model_ids={str(options.base_model): DEFAULT_BASE_MODEL_ID}
            if options.base_model == packaged_minilm_path()
            else None,
            model_name="codiemb-interpolated-with-base",
            device=options.device,
            overwrite=True,
        )
    print("\nλ      " + "  ".join(f"{key:>10}" for key in OBJECTIVE) + "       score")
    for index, candidate in enumerate(result.candidates):
        mark = "*" if index == result.best_index else " "
        values = "  ".join(f"{candidate.metrics[key]:10.4f}" for key in OBJECTIVE)
        print(f"{mark}{candidate.parameters['weights']:<6g}{values}  {candidate.score:10.4f}")

    rows = {}
    for name, path in (
        ("base", options.base_model),
        ("codiemb", run),
        ("codiemb ⊕ base (merge search)", result.output_dir),
    ):
        model = SentenceTransformer(str(path), device=options.device)
        rows[name] = summary(run_suite(model, TEST_SUITE, data_root=options.data_root, diagnostics=False))
    base, tuned, merged = rows["base"], rows["codiemb"], rows["codiemb ⊕ base (merge search)"]
    columns = list(base)
    print("\n| model | " + " | ".join(columns) + " |\n|---|" + "--:|" * len(columns))
    for name, row in rows.items():
        print(f"| {name} | " + " | ".join(f"{row[c]:.4f}" for c in columns) + " |")
    keeps_retrieval = all(merged[c] >= base[c] for c in RETRIEVAL)
    gain = tuned["STS12–15 mean ρ"] - base["STS12–15 mean ρ"]
    kept = (merged["STS12–15 mean ρ"] - base["STS12–15 mean ρ"]) / gain if gain else float("nan")
    print(f"\nchosen λ = {result.best.parameters['weights']:g}")
    print(f"every retrieval column at or above the base: {keeps_retrieval}")
    print(f"share of the run's held-out STS gain kept: {kept:.2f} (gain of the run: {gain:+.4f})")
    report = {
        "base_model_id": DEFAULT_BASE_MODEL_ID,
        "objective": OBJECTIVE,
        "search": result.to_dict(),
        "test": rows,
        "keeps_retrieval": keeps_retrieval,
        "sts_gain_kept": kept,
        "minutes": (time.perf_counter() - started) / 60,
    }
    (options.output_dir / "merge_search_report.json").write_text(
        json.dumps(report, indent=2, ensure_ascii=False) + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
