"""``hf-unified-embed mine-negatives DATA -o OUT --model M``: hard negatives and teacher scores for retrieval tasks."""

from __future__ import annotations

import argparse
from typing import Any

from hf_unified_embed.cli.arg_types import integer, number, path


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "mine-negatives",
        help="mine hard negatives (and teacher scores) for the retrieval tasks of a unified dataset",
        description=(
            "For every retrieval task of DATA (or --tasks), embed the distinct queries and documents (the task's "
            "own positives and negatives, plus --corpus) with MODEL, search exactly in blocks, drop the query's "
            "positives, a document equal to the query and candidates too close to the positive (margins), "
            "optionally rescore with --cross-encoder, and write negatives, negative_scores and positive_scores "
            "into the new folder OUT (scores: the teacher's similarity mapped onto [0, 1]). Works unchanged under "
            "`torchrun --nproc_per_node=N` or `accelerate launch`: each process encodes a slice of the texts on its "
            "own device and searches its share; the first process writes OUT."
        ),
    )
    parser.add_argument("data", help="unified dataset folder or Hub repository (as written by `build`)")
    parser.add_argument("-o", "--output", required=True, help="output folder (a new unified dataset)")  # "" refused
    parser.add_argument("--model", required=True, help="teacher: sentence-transformers model path or id")
    parser.add_argument("--cross-encoder", help="rescore the candidates with this cross-encoder (path or id)")
    parser.add_argument(
        "--corpus", type=path, help="extra candidates: a BEIR corpus.jsonl (or its folder) or a .txt file"
    )
    parser.add_argument("--tasks", help="comma-separated tasks to mine (default: every retrieval task)")
    parser.add_argument("--split", default="train", help="split to read and write (default: train)")
    parser.add_argument("--overwrite", action="store_true", help="replace a non-empty output folder")
    parser.add_argument("--num-negatives", type=integer, default=4, help="negatives per query (default: 4)")
    parser.add_argument("--range-min", type=integer, default=0, help="skip this many of the hardest candidates")
    parser.add_argument(
        "--range-max", type=integer, help="consider candidates up to this rank (default: as sentence-transformers)"
    )
    parser.add_argument(
        "--absolute-margin", type=number, help="drop candidates scoring above (lowest positive − margin)"
    )
    parser.add_argument(
        "--relative-margin",
        type=number,
        default=0.05,
        help="drop candidates above (1 − margin) × lowest positive score (default 0.05: NV-Retriever's 95%%; "
        "a negative value turns it off)",
    )
    parser.add_argument("--max-score", type=number, help="drop candidates scoring above this")
    parser.add_argument("--min-score", type=number, help="drop candidates scoring below this")
    parser.add_argument("--keep-query-text", action="store_true", help="keep documents identical to the query")
    parser.add_argument("--batch-size", type=integer, default=64, help="encoding batch size")
    parser.add_argument("--query-block", type=integer, default=2_048, help="queries searched together")
    parser.add_argument("--corpus-block", type=integer, default=32_768, help="documents scored per matmul")
    parser.add_argument("--dtype", choices=("float32", "float16"), default="float32", help="embeddings on disk")
    parser.add_argument("--device", help="torch device for the models and the search (default: the model's)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from hf_unified_embed.negatives import HardNegativeConfig, mine_negatives_folder
    from hf_unified_embed.negatives.miner import MINED_TASK_TYPES
    from hf_unified_embed.training.devices import process_device
    from hf_unified_embed.utils.distributed_encode import launched_processes
    from hf_unified_embed.utils.model_loading import check_model_reference
    from hf_unified_embed.utils.processes import is_main_process, quiet_progress_bars

    # A mistyped local model path is a missing folder, not a Hub lookup that "couldn't connect".
    check_model_reference(args.model, "--model")
    check_model_reference(args.cross_encoder, "--cross-encoder")
    config = HardNegativeConfig(
        num_negatives=args.num_negatives,
        range_min=args.range_min,
        range_max=args.range_max,
        absolute_margin=args.absolute_margin,
        relative_margin=args.relative_margin if args.relative_margin >= 0 else None,
        max_score=args.max_score,
        min_score=args.min_score,
        drop_query_text=not args.keep_query_text,
        batch_size=args.batch_size,
        query_block=args.query_block,
        corpus_block=args.corpus_block,
        dtype=args.dtype,
    )
    if not is_main_process():
        quiet_progress_bars()  # rank 0 draws the run's bars, and its error line starts a line of its own
    with launched_processes() as processes:
        output, result = mine_negatives_folder(
            args.data,
            args.output,
            args.model,
            config,
            corpus=args.corpus,
            cross_encoder=args.cross_encoder,
            tasks=args.tasks.split(",") if args.tasks else None,
            split=args.split,
            overwrite=args.overwrite,
            device=process_device(args.device),
            processes=processes,
        )
    if not processes.is_main:
        return 0
    for task, report in result.reports.items():
        dropped = ", ".join(f"{count} {reason.replace('_', ' ')}" for reason, count in report.dropped.items())
        print(
            f"{task}: {report.queries} queries over {report.corpus} documents, {report.negatives} negatives "
            f"({report.short_queries} queries with fewer than {report.num_negatives}); dropped {dropped}"
        )
    # One line: the tasks left out of mining or out of the output, each with the reason.
    left = []
    if result.skipped:
        listed = ", ".join(f"{task} ({why})" for task, why in result.skipped.items())
        left.append(f"not mined (only {' and '.join(MINED_TASK_TYPES)} tasks are), copied unchanged: {listed}")
    if result.left_out:
        left.append("not in the output: " + ", ".join(f"{task} ({why})" for task, why in result.left_out.items()))
    if left:
        print("; ".join(left))
    print(f"wrote {output}")
    return 0
