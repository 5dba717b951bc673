"""``hf-unified-embed merge``: a thin layer over :func:`hf_unified_embed.merge.run_merge`.

Either a YAML recipe (see :mod:`hf_unified_embed.merge.merge_config`) or flags for the simple cases::

    hf-unified-embed merge merge.yaml
    hf-unified-embed merge --method soup --models run-1 run-2 run-3 -o soup-out
    hf-unified-embed merge --method slerp --models a b --t 0.3 -o slerp-out
    hf-unified-embed merge --method task_arithmetic --models a b --base base --weights 0.6 0.4 -o ta-out
    hf-unified-embed merge --method my_pkg.methods:MyMethod --models a b --param alpha=0.3 -o mine

Flags given together with a YAML file override its values; ``--param NAME=VALUE`` sets any method
parameter (the value is read as YAML: ``0.3``, ``[0.2, 0.8]``, ``true``). The ``merge_config.yaml``
written into a merged folder is such a recipe, naming local inputs by folder name (relative to the
file's folder, as every path in a recipe): beside the inputs, it merges again::

    cp outputs/merged/merge_config.yaml outputs/again.yaml
    hf-unified-embed merge outputs/again.yaml -o outputs/merged-again

A merge search (a ``search:`` section in the YAML, or ``--suite`` / ``--grid`` / ``--objective``)
scores candidates on dev sets and writes the best (:mod:`hf_unified_embed.merge.search`)::

    hf-unified-embed merge --method task_arithmetic --models run --base base -o best \
        --suite examples/suites/dev.yaml --grid "weights={min: 0, max: 1, steps: 6}" \
        --objective stsb-dev=1 --objective trecqa-dev=1
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import yaml

from hf_unified_embed.cli.arg_types import number
from hf_unified_embed.errors import UsageError, shown
from hf_unified_embed.utils.yaml_files import DuplicateKeyError, load_yaml_text


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "merge",
        help="merge checkpoints (soups, SLERP, task arithmetic, CoDiEmb hierarchical, …) into a new model folder",
        description="Stream-merge model folders of one architecture into a new sentence-transformers folder with a card.",
    )
    parser.add_argument("config", nargs="?", help="YAML merge recipe")
    parser.add_argument("--method", help="a registered method name, or package.module:ClassName for your own")
    parser.add_argument("--models", nargs="+", metavar="PATH", help="input model folders or Hub ids")
    parser.add_argument("-o", "--output-dir", help="folder to create")
    parser.add_argument("--weights", nargs="+", type=number, help="per-model weights (soup, task_arithmetic)")
    parser.add_argument("--normalize", action="store_true", default=None, help="soup: rescale weights to sum to 1")
    parser.add_argument(
        "--t", nargs="+", type=number, help="slerp: one t, or a list (mergekit's gradient over the blocks)"
    )
    parser.add_argument("--base", help="task_arithmetic / hierarchical: the base model")
    parser.add_argument("--temperature", type=number, help="hierarchical: τ of CoDiEmb Eq. 11")
    parser.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="any method parameter, the value read as YAML (repeatable)",
    )
    parser.add_argument(
        "--reference", help="input (index or path) whose config, tokenizer and non-float tensors are used"
    )
    parser.add_argument(
        "--prompts-from", metavar="INPUT", help="the model (index or path) whose prompts to keep if the models differ"
    )
    parser.add_argument("--max-shard-size", help="per safetensors shard, e.g. 2GB")
    parser.add_argument("--precise", action="store_true", default=None, help="compute in float64 instead of float32")
    parser.add_argument(
        "--model-ids",
        nargs="+",
        metavar="ID",
        help="Hub id of each model, for the card's base_model ('-': its recipe's hub.repo_id, its card, or its base)",
    )
    parser.add_argument("--suite", help="search: the evaluation suite of dev sets")
    parser.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="NAME=VALUES",
        help="search: candidate values (YAML list or {min, max, steps})",
    )
    parser.add_argument(
        "--objective",
        action="append",
        default=[],
        metavar="METRIC=WEIGHT",
        help="search: a metric (entry or entry/metric) and its weight",
    )
    parser.add_argument("--model-name", help="Hub id of the merged model, for the card")
    parser.add_argument("--overwrite", action="store_true", default=None, help="replace a non-empty output folder")
    parser.add_argument("--no-card", action="store_true", help="do not write README.md")
    parser.add_argument(
        "--allow-negative-weights",
        action="store_true",
        help="accept negative averaging weights (soup, mergekit's linear/nuslerp/multislerp): an extrapolation",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.set_defaults(func=run)


def _check_not_in_its_output(config: Path) -> None:
    """A ``merge_config.yaml`` run where the merge wrote it names its inputs by folder name, which resolve beside
    the file, inside the merged folder: say so, instead of looking the names up on the Hub."""
    from hf_unified_embed.merge.api import RECIPE_FILE
    from hf_unified_embed.utils.outputs import MARKER
    from hf_unified_embed.utils.yaml_files import read_yaml_mapping

    folder = config.parent
    if config.name != RECIPE_FILE or not (folder / MARKER).is_file():
        return
    models = read_yaml_mapping(config, UsageError).get("models")
    entries = models if isinstance(models, list) else []
    names = [entry.get("path") if isinstance(entry, dict) else entry for entry in entries]
    # A Hub model is written as its id (org/name); a local input as its bare folder name.
    missing = [name for name in names if isinstance(name, str) and "/" not in name and not (folder / name).exists()]
    if missing:
        raise UsageError(
            f"{config}: this file, written by the merge into its output, names its inputs by folder name "
            f"({', '.join(missing[:3])}), relative to the file's own folder; copy it next to the input folders "
            f"(e.g. cp {config} {folder.parent / 'again.yaml'}) and merge from there"
        )


def _recipe(args: argparse.Namespace) -> dict[str, Any]:
    from hf_unified_embed.merge.merge_config import read_merge_config

    # The file's relative paths are relative to its folder; the flags' to the current one.
    data = read_merge_config(args.config, UsageError) if args.config else {}
    if args.config and not args.models:
        _check_not_in_its_output(Path(args.config))
    if not isinstance(data.get("parameters") or {}, dict):
        raise UsageError(f"{args.config}: parameters must be a mapping of the method's parameters")
    parameters = dict(data.get("parameters") or {})
    for flag, key in (
        ("weights", "weights"),
        ("normalize", "normalize"),
        ("base", "base"),
        ("temperature", "temperature"),
    ):
        if getattr(args, flag) is not None:
            parameters[key] = getattr(args, flag)
    if args.t is not None:
        parameters["t"] = args.t[0] if len(args.t) == 1 else args.t
    parameters.update(_assignments("--param", args.param))
    if parameters:
        data["parameters"] = parameters
    overrides = {
        "method": args.method,
        "models": args.models,
        "output_dir": args.output_dir,
        "max_shard_size": args.max_shard_size,
        "overwrite": args.overwrite,
    }
    data.update({key: value for key, value in overrides.items() if value is not None})
    if args.reference is not None:
        data["reference"] = int(args.reference) if args.reference.isdigit() else args.reference
    if args.prompts_from is not None:
        data["prompts_from"] = int(args.prompts_from) if args.prompts_from.isdigit() else args.prompts_from
    if args.model_name is not None:
        data["card"] = {**(data.get("card") or {}), "model_name": args.model_name}
    if args.no_card:
        data["write_card"] = False
    if args.precise:
        data["precise"] = True
    if args.allow_negative_weights:
        data["allow_negative_weights"] = True
    if args.model_ids is not None:
        data["model_ids"] = [None if value == "-" else value for value in args.model_ids]
    if args.suite or args.grid or args.objective:
        search = dict(data.get("search") or {})
        if args.suite:
            search["suite"] = args.suite
        search["parameters"] = {**(search.get("parameters") or {}), **_assignments("--grid", args.grid)}
        objective = _assignments("--objective", args.objective)
        search["objective"] = {**(search.get("objective") or {}), **objective}
        data["search"] = search
    return data


def _assignments(flag: str, items: list[str]) -> dict[str, Any]:
    """``NAME=VALUE`` flags as a mapping, each value read as YAML."""
    values = {}
    for item in items:
        name, separator, value = item.partition("=")
        if not separator or not name.strip():
            raise UsageError(f"{flag} {shown(item)}: expected NAME=VALUE")
        try:
            values[name.strip()] = load_yaml_text(value)
        except DuplicateKeyError as error:
            raise UsageError(f"{flag} {shown(item)}: {error.description}") from None
        except yaml.YAMLError as error:
            raise UsageError(f"{flag} {shown(item)}: the value is not YAML: {error}") from error
    return values


def run(args: argparse.Namespace) -> int:
    from hf_unified_embed.merge import MergeConfig, run_merge
    from hf_unified_embed.merge.search import run_search

    if not args.config and not (args.method and args.models and args.output_dir):
        raise UsageError("give a YAML recipe, or --method, --models and --output-dir")
    from hf_unified_embed.utils.model_loading import check_model_location

    # As typed: a local path that does not exist is reported as such (./typo is a path, never a Hub id).
    for model in args.models or []:
        check_model_location(model, "--models")
    check_model_location(args.base, "--base")  # the whole rule follows for every input (merge's model_folder)
    config = MergeConfig.from_dict(_recipe(args), source=args.config or "command line")
    if args.config:  # the merge recipe is an input too (run_merge checks the output against the models)
        from hf_unified_embed.utils.outputs import check_location

        check_location(config.output_dir, inputs=[args.config])
    if config.search is None:
        print(run_merge(config, show_progress=not args.no_progress))
        return 0
    from hf_unified_embed.utils.distributed_encode import launched_processes
    from hf_unified_embed.utils.processes import is_main_process, quiet_progress_bars

    if not is_main_process():
        quiet_progress_bars()  # rank 0 draws the run's bars, and its error line starts a line of its own
    # Under a launcher every process merges each candidate and encodes its share of the suite; rank 0 writes.
    with launched_processes() as processes:
        result = run_search(config, show_progress=not args.no_progress, processes=processes)
    if not processes.is_main:
        return 0
    for index, candidate in enumerate(result.candidates):
        mark = "*" if index == result.best_index else " "
        print(f"{mark} {index:3d} {candidate.parameters} score {candidate.score:.4f} {candidate.metrics}")
    print(result.output_dir)
    return 0
