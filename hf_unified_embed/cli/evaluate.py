"""``hf-unified-embed evaluate MODEL SUITE.yaml``: run an evaluation suite, print a table, write JSON."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from hf_unified_embed.errors import UsageError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "evaluate",
        help="evaluate a model on an evaluation suite",
        description=(
            "Score MODEL on every evaluation set of SUITE (STS, retrieval, reranking, pair classification), "
            "with CoDiEmb's embedding-space diagnostics; print a table and optionally write JSON "
            "(metrics, diagnostics and model-index entries for the model card)."
        ),
    )
    parser.add_argument("model", help="a sentence-transformers model folder or Hub id (offline: must be cached)")
    parser.add_argument("suite", type=Path, help="suite YAML (see examples/suites/)")
    parser.add_argument("-o", "--output", type=Path, help="write the results as JSON here")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing non-empty --output file")
    parser.add_argument("--data-root", type=Path, help="resolve the suite's relative data paths here instead")
    parser.add_argument("--no-diagnostics", action="store_true", help="skip the token-matrix diagnostics (CoDiEmb §4)")
    parser.add_argument("--batch-size", type=int, help="encoding batch size (default: the suite's)")
    parser.add_argument("--device", help="torch device for the model, e.g. cpu or cuda:0")
    parser.set_defaults(func=run_evaluate)


def run_evaluate(args: argparse.Namespace) -> int:
    from hf_unified_embed.evaluation import load_suite, run_suite

    suite = load_suite(args.suite, data_root=args.data_root)
    if args.batch_size is not None:
        if args.batch_size < 1:
            raise UsageError(f"--batch-size must be positive, got {args.batch_size}")
        suite.batch_size = args.batch_size
    output: Path | None = args.output
    if output is not None and output.exists() and output.stat().st_size > 0 and not args.overwrite:
        # Checked before the (long) evaluation, not only when writing.
        raise UsageError(f"{output} exists and is not empty; pass --overwrite to replace it")

    from sentence_transformers import SentenceTransformer

    try:
        model = SentenceTransformer(args.model, device=args.device)
    except OSError as error:
        raise UsageError(f"cannot load model {args.model!r}: {error}") from None
    results = run_suite(model, suite, diagnostics=False if args.no_diagnostics else None)
    if results.model_name == "model":
        results.model_name = Path(args.model).name
    print(results.format_table())
    if output is not None:
        results.save_json(output, overwrite=args.overwrite)
        print(f"\nwrote {output}")
    return 0
