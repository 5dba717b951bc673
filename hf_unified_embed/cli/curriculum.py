"""``hf-unified-embed curriculum``: plan a Data-CUBE curriculum for a unified dataset.

    hf-unified-embed curriculum DATA --teacher MODEL -o OUT

writes OUT as the Hub layout of DATA with a float32 ``difficulty`` column, plus
``curriculum_plan.json`` (task order, similarity, parameters, per-task statistics) and two PNGs.
Encoding the distinct texts — the expensive part — can be split over processes or machines:

    hf-unified-embed curriculum DATA --teacher MODEL -o OUT --shard 0/4    # ... up to 3/4, anywhere
    hf-unified-embed curriculum DATA --teacher MODEL -o OUT --merge        # reads OUT.shards/

or run unchanged under ``torchrun --nproc_per_node=N`` / ``accelerate launch``: each process encodes its
slice of the texts on its own device, every one gets all the embeddings, and the first writes OUT.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hf_unified_embed.cli.arg_types import integer, number, path
from hf_unified_embed.errors import OutputError, UsageError, shown
from hf_unified_embed.utils.model_loading import load_model

if TYPE_CHECKING:
    from hf_unified_embed.curriculum.planner import CurriculumResult
    from hf_unified_embed.utils.distributed_encode import EncodingProcesses

logger = logging.getLogger(__name__)

SIMILARITY_PLOT = "task_similarity.png"
DIFFICULTY_PLOT = "difficulty_histograms.png"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "curriculum",
        help="order tasks and score instance difficulty with a teacher model (Data-CUBE)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("data", help="unified dataset folder or Hub repository (as written by `build`)")
    parser.add_argument("--teacher", required=True, help="sentence-transformers model path or id (the teacher)")
    parser.add_argument("-o", "--output", required=True, help="output folder")  # a str: "" is refused, not "."
    parser.add_argument("--overwrite", action="store_true", help="replace a non-empty output folder")
    parser.add_argument("--tasks", help="comma-separated tasks to plan (default: all)")
    parser.add_argument("--split", default="train", help="split to read (default: train)")
    parser.add_argument("--n-samples", type=integer, default=200, help="queries per task representation (Eq. 4)")
    parser.add_argument("--method", choices=("annealing", "two_opt", "exact"), default="annealing")
    parser.add_argument("--iterations", type=integer, default=2_000_000, help="annealing moves (paper: ~2M)")
    parser.add_argument("--initial-temperature", type=number, help="annealing start temperature (default: auto)")
    parser.add_argument("--cooling-rate", type=number, help="geometric cooling factor per move (default: auto)")
    parser.add_argument("--no-polish", action="store_true", help="skip the 2-opt polish after annealing")
    parser.add_argument("--seed", type=integer, default=0)
    parser.add_argument("--no-difficulty", action="store_true", help="only order tasks; add no difficulty column")
    parser.add_argument(
        "--negative-pool", type=integer, default=1_024, help="rows without negatives: other positives to compare with"
    )
    parser.add_argument("--batch-size", type=integer, default=64, help="encoding batch size")
    parser.add_argument("--device", help="torch device for the teacher (default: the model's choice)")
    parser.add_argument("--shard", help="I/N: only encode shard I (0-based) of N of the distinct texts, then exit")
    parser.add_argument("--merge", action="store_true", help="use the embeddings of all shards instead of encoding")
    parser.add_argument("--shard-dir", type=path, help="folder for shard embeddings (default: OUTPUT.shards)")
    parser.set_defaults(func=run)


def parse_shard(value: str) -> tuple[int, int]:
    try:
        index, count = (int(part) for part in value.split("/"))
    except ValueError:
        raise UsageError(f"--shard {shown(value)}: expected I/N, e.g. 0/4") from None
    if count < 1 or not 0 <= index < count:
        raise UsageError(f"--shard {shown(value)}: need N >= 1 and 0 <= I < N (shards are numbered from 0)")
    return index, count


def run(args: argparse.Namespace) -> int:
    if args.shard and args.merge:
        raise UsageError("--shard encodes one shard and --merge combines them; use one of them")
    if (args.shard or args.merge) and args.no_difficulty:
        raise UsageError("--shard/--merge split the difficulty encoding; they make no sense with --no-difficulty")
    from hf_unified_embed.utils.distributed_encode import launched_processes
    from hf_unified_embed.utils.locations import looks_local
    from hf_unified_embed.utils.model_loading import check_model_location
    from hf_unified_embed.utils.outputs import StagedOutput, check_location, check_output
    from hf_unified_embed.utils.processes import is_main_process, quiet_progress_bars

    check_model_location(args.teacher, "--teacher")  # a mistyped local path: a missing folder, not a Hub lookup
    # The data and a local teacher are inputs: no output may be, hold or lie inside them.
    inputs = [name for name in (args.data, args.teacher) if looks_local(name)]
    output = check_location(args.output, inputs=inputs)
    shard_dir: Path = args.shard_dir or output.with_name(f"{output.name}.shards")
    shard = parse_shard(args.shard) if args.shard else None
    if shard is not None:
        return _encode_shard(args, shard, check_location(shard_dir, inputs=inputs))
    if args.merge:
        inputs.append(shard_dir)  # --merge reads the shards

    # Dataset, plan and plots appear together or not at all. The stage exists before the teacher
    # runs, so an unwritable output fails at once and a killed run leaves only a stale stage. Under a
    # launcher every process encodes its share and the first one writes; the others check the output alike.
    main = is_main_process()
    if not main:
        check_output(args.output, overwrite=args.overwrite, inputs=inputs)
        quiet_progress_bars()  # rank 0 draws the run's bars, and its error line starts a line of its own
    stage = StagedOutput(args.output, overwrite=args.overwrite, inputs=inputs) if main else None
    with stage or contextlib.nullcontext(), launched_processes() as processes:
        result = _plan(args, shard_dir, processes)
        if stage is not None:
            _write(result, stage.path, args.data)
    if stage is None:
        return 0
    plan = result.plan
    print(f"task order ({len(plan.order)} tasks, Eq. 6 score {plan.score:.4f}): {' -> '.join(plan.order)}")
    print(f"wrote {stage.target} (dataset{' with difficulty' if result.difficulty else ''}, plan and plots)")
    if args.merge:
        print(f"the shard embeddings in {shard_dir} are no longer needed")
    return 0


def _encode_shard(args: argparse.Namespace, shard: tuple[int, int], shard_dir: Path) -> int:
    from hf_unified_embed.curriculum import DistinctTexts
    from hf_unified_embed.curriculum.texts import save_shard
    from hf_unified_embed.data import load_unified
    from hf_unified_embed.utils.outputs import MARKER, mark_output

    # Shards of several processes share the folder, so it is not staged: it is the tool's own when it holds
    # the marker (or only shard files), and a rerun replaces its own shard in it, never a file of someone else.
    if shard_dir.exists():
        names = [path.name for path in shard_dir.iterdir()] if shard_dir.is_dir() else [""]
        shards = r"\.?embeddings-\d+-of-\d+\.safetensors(\.staging-.*)?"  # a shard, or another process's stage
        if MARKER not in names and not all(re.fullmatch(shards, name) for name in names):
            raise OutputError(
                f"shard folder {shard_dir} exists and was not written by hf-unified-embed (no {MARKER} marker "
                "in it); choose another --shard-dir"
            )
    try:
        shard_dir.mkdir(parents=True, exist_ok=True)
        mark_output(shard_dir)
    except OSError as error:
        raise OutputError(f"cannot write the shard folder {shard_dir}: {error.strerror} ({error.filename})") from None

    tasks = load_unified(args.data, args.tasks.split(",") if args.tasks else None, split=args.split)
    model = _teacher(args)
    check_instructions(tasks, model)
    distinct = DistinctTexts.from_tasks(tasks)
    index, count = shard
    embeddings = distinct.encode(model, distinct.shard_ids(index, count), batch_size=args.batch_size)
    path = save_shard(shard_dir, index, count, embeddings, distinct.fingerprint(args.teacher))
    print(f"shard {index}/{count}: {len(embeddings)} of {len(distinct)} distinct texts -> {path}")
    return 0


def _plan(args: argparse.Namespace, shard_dir: Path, processes: EncodingProcesses) -> CurriculumResult:
    from hf_unified_embed.curriculum import DistinctTexts, difficulty_from_embeddings, plan_curriculum
    from hf_unified_embed.curriculum.texts import load_shards
    from hf_unified_embed.data import load_unified

    tasks = load_unified(args.data, args.tasks.split(",") if args.tasks else None, split=args.split)
    model = _teacher(args)
    check_instructions(tasks, model)
    difficulty = None
    if args.merge:
        distinct = DistinctTexts.from_tasks(tasks)
        embeddings = load_shards(shard_dir, distinct, distinct.fingerprint(args.teacher))
        difficulty = difficulty_from_embeddings(distinct, embeddings, args.negative_pool, args.seed)
    return plan_curriculum(
        model,
        tasks,
        teacher_name=args.teacher,
        n_samples=args.n_samples,
        method=args.method,
        iterations=args.iterations,
        initial_temperature=args.initial_temperature,
        cooling_rate=args.cooling_rate,
        polish=not args.no_polish,
        seed=args.seed,
        score_instances=not args.no_difficulty,
        difficulty=difficulty,
        negative_pool=args.negative_pool,
        batch_size=args.batch_size,
        processes=processes,
    )


def check_instructions(tasks: Mapping[str, Any], model: Any) -> None:
    """Refuse a task whose instruction leaves the teacher no room for the text, before anything is encoded.

    The teacher encodes every query with its task's ``query_instruction`` (and documents with the
    ``document_instruction``), truncated to its ``max_seq_length``, as ``train`` and ``mine-negatives`` do:
    an instruction that long made every query one vector, and the plan was computed from them without a word.

    Raises:
        InputError: naming the task, the field and the instruction's length in tokens.
    """
    from hf_unified_embed.schema import INSTRUCTION_COLUMNS, task_instruction
    from hf_unified_embed.training.instruction_fit import check_instruction_room

    for task, dataset in tasks.items():
        table = dataset.select_columns(list(INSTRUCTION_COLUMNS)).with_format("arrow")[:]
        for column in INSTRUCTION_COLUMNS:
            check_instruction_room(
                model.tokenizer,
                task_instruction(table, column, task),
                model.max_seq_length,
                f"task {shown(task)}, field {shown(column)}",
            )


def _write(result: CurriculumResult, folder: Path, data: str) -> None:
    from hf_unified_embed.curriculum import plot_difficulty_histograms, plot_task_similarity
    from hf_unified_embed.data.hub_layout import read_card, source_notes, write_unified

    # The input card's sources, licenses and Hub provenance carry over to the new folder.
    write_unified(result.tasks, folder, notes=source_notes(read_card(data)))
    result.plan.save(folder)
    plot_task_similarity(result.plan, folder / SIMILARITY_PLOT)
    if result.difficulty:
        plot_difficulty_histograms(result.difficulty, folder / DIFFICULTY_PLOT, order=result.plan.order)


def _teacher(args: argparse.Namespace) -> Any:
    """The ``--teacher`` model (a bidirectional model this package trained loads too)."""
    from hf_unified_embed.training.bidirectional_transformer import load_sentence_transformer
    from hf_unified_embed.training.devices import process_device

    device = process_device(args.device)  # under a launcher, each process of a node on its own GPU
    return load_model(args.teacher, "--teacher", device=device, loader=load_sentence_transformer)
