"""``hf-unified-embed evaluate MODEL SUITE.yaml``: run an evaluation suite, print a table, write JSON."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
from pathlib import Path
from typing import Any

from hf_unified_embed.cli.arg_types import integer, path
from hf_unified_embed.errors import UsageError, shown


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "evaluate",
        help="evaluate a model on an evaluation suite",
        description=(
            "Score MODEL on every evaluation set of SUITE (STS, retrieval, reranking, pair classification), "
            "with CoDiEmb's embedding-space diagnostics; print a table and optionally write JSON "
            "(metrics, diagnostics and model-index entries for the model card). Works unchanged under "
            "`torchrun --nproc_per_node=N` or `accelerate launch`: each process encodes a slice of every "
            "set's texts on its own device; the first process computes the diagnostics, prints and writes."
        ),
    )
    parser.add_argument("model", help="a sentence-transformers model folder or Hub id (offline: must be cached)")
    parser.add_argument("suite", type=path, help="suite YAML (see examples/suites/)")
    parser.add_argument("-o", "--output", help="write the results as JSON here")  # a str: "" is refused, not "."
    parser.add_argument("--overwrite", action="store_true", help="replace an existing non-empty --output file")
    parser.add_argument("--data-root", type=path, help="resolve the suite's relative data paths here instead")
    parser.add_argument("--no-diagnostics", action="store_true", help="skip the token-matrix diagnostics (CoDiEmb §4)")
    parser.add_argument("--batch-size", type=integer, help="encoding batch size (default: the suite's)")
    parser.add_argument("--device", help="torch device for the model, e.g. cpu or cuda:0")
    parser.add_argument(
        "--only",
        nargs="+",
        metavar="NAME",
        help="score only these evaluation sets of the suite (their names), e.g. the ones added since a model was scored",
    )
    parser.add_argument(
        "--reference",
        help=(
            "a base model (path or Hub id) scored on the same sets: its values are printed beside MODEL's with the "
            "difference, and written under 'reference' in the JSON; 'forgetting' entries compare with it where the "
            "suite names none"
        ),
    )
    parser.set_defaults(func=run_evaluate)


def run_evaluate(args: argparse.Namespace) -> int:
    from hf_unified_embed.evaluation import format_comparison, load_suite, run_suite, set_reference_model
    from hf_unified_embed.evaluation.comparison import reference_section
    from hf_unified_embed.evaluation.suite import check_suite_models, suite_inputs
    from hf_unified_embed.evaluation.suite_rows import load_entry_rows
    from hf_unified_embed.training.devices import process_device
    from hf_unified_embed.utils.distributed_encode import launched_processes
    from hf_unified_embed.utils.locations import looks_local
    from hf_unified_embed.utils.model_loading import check_model_reference
    from hf_unified_embed.utils.outputs import StagedOutput, check_output
    from hf_unified_embed.utils.processes import is_main_process, quiet_progress_bars

    suite = load_suite(args.suite, data_root=args.data_root)
    if args.only:
        names = [entry.name for entry in suite.entries]
        unknown = [name for name in args.only if name not in names]
        if unknown:
            raise UsageError(f"--only {' '.join(unknown)}: not in {args.suite}, whose evaluation sets are {names}")
        suite.entries = [entry for entry in suite.entries if entry.name in args.only]
    check_model_reference(args.model, "model")
    if args.reference:
        check_model_reference(args.reference, "--reference")
        set_reference_model(suite, args.reference)
    check_suite_models(suite)
    if args.batch_size is not None:
        if args.batch_size < 1:
            raise UsageError(f"--batch-size must be positive, got {args.batch_size}")
        suite.batch_size = args.batch_size
    # The target is checked here, its folder on entering: before the long work. It may be none of the inputs:
    # the model folder, the suite and every file the suite reads (the reference model too).
    inputs = [
        args.suite,
        *suite_inputs(suite),
        *(name for name in (args.model, args.reference) if name and looks_local(name)),
    ]
    main = is_main_process()
    stage = None
    if args.output is not None:
        if main:  # under a launcher the first process writes; the others check the output alike
            stage = StagedOutput(args.output, overwrite=args.overwrite, kind="file", inputs=inputs)
        else:
            check_output(args.output, overwrite=args.overwrite, kind="file", inputs=inputs)
    if not main:
        quiet_progress_bars()  # rank 0 draws the run's bars, and its error line starts a line of its own
    results = None
    try:
        with stage or contextlib.nullcontext():
            rows = load_entry_rows(suite)  # every row checked (validate's check for unified folders) before the model
            model = load_model(args.model, process_device(args.device))
            with launched_processes() as processes:
                # The diagnostics read one process's token matrices: the first process computes them, alone.
                diagnostics = False if args.no_diagnostics or not processes.is_main else None
                results = run_suite(model, suite, diagnostics=diagnostics, rows=rows, processes=processes)
                reference = None
                compared = [entry for entry in suite.entries if not entry.evaluation_kind.uses_reference_model]
                if args.reference and compared:
                    del model  # one model in memory at a time
                    base = load_model(args.reference, process_device(args.device))
                    reference = run_suite(
                        base,
                        dataclasses.replace(suite, entries=compared),
                        diagnostics=diagnostics,
                        rows=rows,
                        processes=processes,
                    )
            if not processes.is_main:
                return 0
            if results.model_name == "model":
                results.model_name = Path(args.model).name
            if reference is not None:
                if reference.model_name == "model":
                    reference.model_name = Path(args.reference).name
                results.extra["reference"] = reference_section(reference, results)
            # Printed before the write: a write that fails loses nothing computed.
            print(results.format_table() if reference is None else format_comparison(results, reference))
            if stage is not None:
                stage.kept_note = "the results are printed above, as a table and as JSON"
                stage.path.write_text(results.to_json(), encoding="utf-8")
    except Exception:
        if results is not None and stage is not None:  # computed, not written (a full disk): printed instead
            print(results.to_json(), flush=True)
        raise
    if stage is not None:
        print(f"\nwrote {args.output}")
    return 0


def load_model(name: str, device: str | None) -> Any:
    """The ``SentenceTransformer`` in folder ``name`` or cached Hub repo ``name``; a user error if there is none
    (:func:`hf_unified_embed.utils.model_loading.load_model`: a local path is never looked up on the Hub)."""
    import torch

    from hf_unified_embed.training.bidirectional_transformer import load_sentence_transformer
    from hf_unified_embed.utils.model_loading import load_model as load

    if device is not None:
        try:
            torch.device(device)
        except RuntimeError as error:
            raise UsageError(f"--device {shown(device)}: {error}") from None
    return load(name, "model", device=device, loader=load_sentence_transformer)
