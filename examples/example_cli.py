"""The command line every script in ``examples/`` shares (and ``bench/quality.py``).

Every example takes the same options with the same defaults and help texts — ``--base-model``,
``--data-root``, ``--output-dir``, ``--max-steps``, ``--seed``, plus ``--eval-rows``, ``--device`` and
``--offline`` — and adds its own::

    from example_cli import example_parser, parse_example_args, run_example

    def main(argv=None):
        parser = example_parser(__file__, __doc__)
        parser.add_argument("--batch-size", type=int, default=32)
        args = parse_example_args(parser, argv, full_steps=-1)   # -1: one epoch
        ...

    if __name__ == "__main__":
        run_example(main)

It lives next to the scripts (``examples/``), not in the package: a script's own folder is on
``sys.path`` when it runs, so ``from example_cli import ...`` finds it; copy it along with a script
you take out of the repository. Importing it changes nothing in the environment. The Hugging Face
settings are made by :func:`parse_example_args`, which a script calls before it imports the Hugging
Face libraries (``huggingface_hub`` reads ``HF_HUB_OFFLINE`` once, when it is first imported):

* offline mode (``HF_HUB_OFFLINE=1``: nothing is downloaded or uploaded) only where the user asks for
  it (``--offline``) or where the run needs nothing from the Hub — the base model is the packaged
  all-MiniLM-L6-v2 (no ``--base-model``, and the script's default is the packaged model) and the
  script's ``needs_hub`` says no other input or output is on the Hub. A ``--base-model`` such as
  ``BAAI/bge-small-en-v1.5`` leaves the Hub reachable; an ``HF_HUB_OFFLINE`` already in the
  environment wins over the packaged default;
* ``TOKENIZERS_PARALLELISM=false`` unless the environment says otherwise (no warnings about forked
  processes).

The default ``--data-root`` is the shared data folder next to the repository (``../shared/data``); where
it does not exist, the scripts read the bundled sample (``examples/data``) in the same layout and say so
in one line on stderr.

A *smoke run* is ``--max-steps`` between 1 and :data:`SMOKE_MAX_STEPS`: it exists to show the script
still works end to end (CI runs every example that way, ``tests/test_examples.py``), so its
evaluation uses the first :data:`SMOKE_EVAL_ROWS` rows of every set unless ``--eval-rows`` says
otherwise (:func:`evaluation_suite` applies it).
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from hf_unified_embed.errors import HfUnifiedEmbedError, InputNotFoundError, SuiteError

#: ``--max-steps`` up to this is a smoke run.
SMOKE_MAX_STEPS = 10
#: Rows per evaluation set in a smoke run (unless ``--eval-rows`` is given).
SMOKE_EVAL_ROWS = 64
#: Exit code of an input error, as in the ``hf-unified-embed`` command line.
INPUT_ERROR_EXIT_CODE = 2


#: The bundled sample: a few hundred rows of each source the examples read (data/LICENSES.md).
SAMPLE = Path(__file__).resolve().parent / "data"
#: Where each file of the bundled sample lies in the shared data folder's layout (``../shared/data``).
SAMPLE_LAYOUT = {
    "sts/stsbenchmark/sts-train.csv": "stsb-train.tsv",
    "sts/stsbenchmark/sts-dev.csv": "eval/stsb-dev.tsv",
    "sts/sick2014/SICK_train.txt": "sick-train.txt",
    "sts/sick2014/SICK_trial.txt": "eval/sick-trial.txt",
    "ir/wikiqa/train.tsv": "wikiqa-train.tsv",
    "ir/trecqa/train.csv": "trecqa-train.csv",
    "ir/trecqa/dev.csv": "eval/trecqa-test.csv",
    "ir/trecqa/test.csv": "eval/trecqa-test.csv",
    "ir/msmarco-dl-subset": "msmarco-dl-sample",
    "pair/msrp/msr-para-train.tsv": "msrp-train.tsv",
    "pair/msrp/msr-para-test.tsv": "eval/msrp-test.tsv",
}


def default_data_root(script: str | Path) -> Path:
    """``../shared/data`` next to the repository that holds ``script`` (``examples/x.py`` or ``bench/x.py``)."""
    return Path(script).resolve().parent.parent.parent / "shared" / "data"


def lay_out_sample(target: Path, sample: Path = SAMPLE) -> Path:
    """``target`` holding the bundled sample in the shared data folder's layout (:data:`SAMPLE_LAYOUT`).

    Each entry links to the bundled file or folder; where the system refuses links (Windows without the
    privilege), it is a copy (the sample is about a megabyte). Returns ``target``.
    """
    for shared, bundled in SAMPLE_LAYOUT.items():
        source, link = sample / bundled, target / shared
        link.parent.mkdir(parents=True, exist_ok=True)
        try:
            link.symlink_to(source, target_is_directory=source.is_dir())
        except OSError:
            (shutil.copytree if source.is_dir() else shutil.copy2)(source, link)
    return target


def _bundled_sample_root() -> Path:
    """A temporary folder with the bundled sample in the shared layout, removed when the script exits."""
    folder = Path(tempfile.mkdtemp(prefix="hf-unified-embed-sample-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return lay_out_sample(folder)


class _DataRootAction(argparse.Action):
    """Stores ``--data-root`` and notes that it was given (an absent default then falls back to the sample)."""

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: Any = None
    ):
        setattr(namespace, self.dest, values)
        namespace.data_root_given = True


def example_parser(
    script: str | Path,
    description: str | None = None,
    *,
    data_root: str | Path | None = None,
    base_model: str = "the packaged all-MiniLM-L6-v2",
) -> argparse.ArgumentParser:
    """An ``ArgumentParser`` holding the shared options; add the script's own options to it.

    Args:
        script: the script's ``__file__`` (names the program and the default output folder).
        description: the ``--help`` text, usually the script's ``__doc__``.
        data_root: the default ``--data-root``; the shared data next to the repository unless the
            script reads another folder (the demo reads the bundled sample).
        base_model: what ``--base-model`` defaults to, for the help text; a script whose default is
            not the packaged MiniLM parses with ``parse_example_args(..., packaged_base=False)``.
    """
    name = Path(script).stem
    parser = argparse.ArgumentParser(
        prog=Path(script).name, description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    shared = parser.add_argument_group("options every example takes")
    shared.add_argument(
        "--base-model",
        metavar="MODEL",
        help=f"model to start from: a local folder or a Hub id (default: {base_model})",
    )
    shared.add_argument(
        "--data-root",
        type=Path,
        metavar="DIR",
        action=_DataRootAction,
        default=Path(data_root) if data_root is not None else default_data_root(script),
        help="folder the data files are read from (default: %(default)s; without it, the bundled sample)",
    )
    shared.add_argument(
        "--output-dir",
        type=Path,
        metavar="DIR",
        default=Path("outputs") / name,
        help="everything the script writes goes under this folder (default: %(default)s)",
    )
    shared.add_argument(
        "--max-steps",
        type=int,
        metavar="N",
        help=(
            "stop every training run after N optimizer steps (default: the script's full run, see "
            f"docs/examples.md); 1–{SMOKE_MAX_STEPS} is a smoke run, which also evaluates on small slices"
        ),
    )
    shared.add_argument(
        "--seed", type=int, default=42, help="seed of sampling, data order and initialisation (default: %(default)s)"
    )
    shared.add_argument(
        "--eval-rows",
        type=int,
        metavar="N",
        help=f"evaluate on the first N rows of every evaluation set; 0: all (default: all, {SMOKE_EVAL_ROWS} in a smoke run)",
    )
    shared.add_argument("--device", help="cpu, cuda or cuda:N (default: cuda when available, else cpu)")
    shared.add_argument(
        "--offline",
        action="store_true",
        help=(
            "download nothing (HF_HUB_OFFLINE=1); without it, offline only when the base model is the packaged "
            "all-MiniLM-L6-v2 and nothing else comes from the Hub"
        ),
    )
    return parser


def parse_example_args(
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None = None,
    *,
    full_steps: int = -1,
    packaged_base: bool = True,
    needs_hub: Callable[[argparse.Namespace], bool] | None = None,
) -> argparse.Namespace:
    """Parse and resolve the shared options, and make the Hugging Face settings of the run.

    Call it before importing the Hugging Face libraries: offline mode (``HF_HUB_OFFLINE=1``) is set
    here, with ``--offline`` or when the base model is the packaged MiniLM (no ``--base-model`` and
    ``packaged_base``) and ``needs_hub(args)`` is false (a script passes it when another of its
    options may name a Hub id or upload: a teacher, a dataset, ``--repo-id``). A Hub id given as
    ``--base-model`` never turns it on. ``TOKENIZERS_PARALLELISM`` becomes ``false`` unless set.

    Without ``--data-root``, a default folder that does not exist (``../shared/data`` is not part of a
    checkout or an installed package) is replaced by the bundled sample laid out like it
    (:func:`lay_out_sample`, in a temporary folder removed at exit), and one line on stderr says so.

    Afterwards ``base_model`` is a path or id (the packaged MiniLM by default; ``None`` when not given
    and ``packaged_base`` is false, for a script that builds its own), ``max_steps`` an int
    (``full_steps`` when not given; -1 means the epochs decide), ``smoke`` says whether this is a smoke
    run, ``eval_rows`` is ``None`` (all rows) or a row cap, ``device`` is set and ``offline`` says
    whether the run is in offline mode.
    """
    args = parser.parse_args(argv)
    if not getattr(args, "data_root_given", False) and not args.data_root.exists():
        # An installed package or a checkout without the shared data: the bundled sample, in its layout.
        print(
            f"{args.data_root} does not exist: reading the bundled sample ({SAMPLE}) instead; "
            "--data-root DIR reads yours",
            file=sys.stderr,
            flush=True,
        )
        args.data_root = _bundled_sample_root()
    if args.max_steps is not None and args.max_steps == 0:
        parser.error("--max-steps must be a positive number of steps, or -1 for the full run")
    if args.eval_rows is not None and args.eval_rows < 0:
        parser.error("--eval-rows must be 0 (all rows) or a positive number of rows")
    packaged = packaged_base and args.base_model is None and not (needs_hub and needs_hub(args))
    args.offline = hugging_face_environment(offline=args.offline, packaged_default=packaged)

    import torch

    from hf_unified_embed.recipe import packaged_minilm_path

    if packaged_base:
        args.base_model = args.base_model or packaged_minilm_path()
    args.max_steps = full_steps if args.max_steps is None else args.max_steps
    args.smoke = 0 < args.max_steps <= SMOKE_MAX_STEPS
    if args.eval_rows is None:
        args.eval_rows = SMOKE_EVAL_ROWS if args.smoke else 0
    args.eval_rows = args.eval_rows or None
    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.smoke:
        rows = f"the first {args.eval_rows} rows of each set" if args.eval_rows else "whole sets"
        print(f"smoke run: {args.max_steps} step(s) per training run; any evaluation uses {rows}", flush=True)
    return args


def hugging_face_environment(*, offline: bool = False, packaged_default: bool = False) -> bool:
    """Set the environment of the Hugging Face libraries for a run; return whether it is offline.

    ``offline`` (the user asked) sets ``HF_HUB_OFFLINE=1``; ``packaged_default`` (nothing of the run is
    on the Hub) sets it unless the environment already holds a value. ``TOKENIZERS_PARALLELISM``
    becomes ``false`` unless set. ``huggingface_hub`` and ``datasets`` read ``HF_HUB_OFFLINE`` once,
    when first imported; if the script imported them earlier, their copies are updated too.
    """
    if offline:
        os.environ["HF_HUB_OFFLINE"] = "1"
    elif packaged_default:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # As huggingface_hub reads it: either variable, "1", "ON", "YES" or "TRUE".
    setting = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    is_offline = setting.upper() in {"1", "ON", "YES", "TRUE"}
    if is_offline and (offline or packaged_default):
        hub_constants = sys.modules.get("huggingface_hub.constants")
        if hub_constants is not None:
            hub_constants.HF_HUB_OFFLINE = True  # type: ignore[attr-defined]
        datasets_config = sys.modules.get("datasets.config")
        if datasets_config is not None:
            datasets_config.HF_HUB_OFFLINE = datasets_config.HF_DATASETS_OFFLINE = True  # type: ignore[attr-defined]
    return is_offline


def require_files(data_root: Path, *relative: str) -> None:
    """Fail with one located line, naming ``--data-root``, when an input the script needs is missing."""
    missing = [name for name in relative if not (data_root / name).exists()]
    if missing:
        raise InputNotFoundError(
            f"{data_root}: missing {', '.join(missing)}; point --data-root at the folder that holds them"
        )


def sample_recipe(recipe: str | Path, data_root: Path) -> Any:
    """A build recipe whose sources' files are looked up by name in ``data_root``.

    The bundled sample's recipe (``examples/recipes/sample.yaml``) names its files relative to itself;
    with this, ``--data-root`` points a script at another copy of the sample.
    """
    from dataclasses import replace

    from hf_unified_embed.data import BuildRecipe, load_build_recipe

    loaded = load_build_recipe(recipe)
    sources = [
        replace(
            spec,
            data_files=[Path(name).name for name in spec.data_files]
            if isinstance(spec.data_files, list)
            else Path(spec.data_files).name,
        )
        for spec in loaded.sources
    ]
    return BuildRecipe(sources, base_dir=data_root, origin=loaded.origin)


def training_arguments(args: argparse.Namespace, output_dir: str | Path, *, model: Any, **settings: Any) -> Any:
    """``SentenceTransformerTrainingArguments`` for a script that runs the trainer itself on ``model``.

    Shared: ``max_steps`` and ``seed`` from the command line, no checkpoints, no experiment tracker,
    and the device settings of :func:`~hf_unified_embed.training.device_training_args` for ``model``'s size
    (no pinned memory without CUDA; no bf16 default for a small model). ``settings`` win over them.
    """
    from sentence_transformers import SentenceTransformerTrainingArguments

    from hf_unified_embed.training import device_training_args

    parameters = sum(parameter.numel() for parameter in model.parameters())
    device = device_training_args(args.device, explicit=settings, parameters=parameters)
    return SentenceTransformerTrainingArguments(
        output_dir=str(output_dir), **{**recipe_training_args(args), **device, **settings}
    )


def recipe_training_args(args: argparse.Namespace, **settings: Any) -> dict[str, Any]:
    """The ``training_args`` of a training recipe with the shared settings (see :func:`training_arguments`).

    The device's settings are the recipe run's own (``train_from_recipe`` applies
    :func:`~hf_unified_embed.training.device_training_args` with the base model's size); only ``--device
    cpu`` is passed on, as ``use_cpu``, so that a machine with a GPU trains on the CPU as asked.
    """
    return {
        "max_steps": args.max_steps,
        "seed": args.seed,
        "save_strategy": "no",
        "report_to": "none",
        **({"use_cpu": True} if str(args.device).startswith("cpu") else {}),
        **settings,
    }


def evaluation_suite(
    args: argparse.Namespace, suite: str | Path | Mapping[str, Any], *, data_root: str | Path | None = None
) -> dict[str, Any]:
    """An evaluation suite (YAML path or dict) as a dict capped at ``--eval-rows`` rows per set.

    The cap also bounds the texts the embedding-space diagnostics sample.

    A YAML file's relative ``data_root`` is resolved against the file first, so the dict works from
    any folder; ``data_root`` overrides the suite's.
    """
    from hf_unified_embed.utils.yaml_files import read_yaml_mapping

    if isinstance(suite, (str, Path)):
        path = Path(suite)
        loaded = read_yaml_mapping(path, SuiteError)
        if loaded.get("data_root") is not None:
            loaded["data_root"] = str((path.resolve().parent / str(loaded["data_root"])).resolve())
        else:
            loaded["data_root"] = str(path.resolve().parent)
    else:
        loaded = dict(suite)
    if data_root is not None:
        loaded["data_root"] = str(data_root)
    if args.eval_rows:
        loaded["max_rows"] = args.eval_rows
        diagnostics = loaded.get("diagnostics", True)
        if diagnostics is not False and diagnostics is not None:
            settings = dict(diagnostics) if isinstance(diagnostics, Mapping) else {}
            settings["max_texts"] = min(int(settings.get("max_texts", args.eval_rows)), args.eval_rows)
            loaded["diagnostics"] = settings
    return loaded


def run_example(main: Callable[[], Any]) -> None:
    """Run an example's ``main``; an input problem is one ``error: ...`` line and exit code 2, as in the CLI."""
    try:
        main()
    except HfUnifiedEmbedError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(INPUT_ERROR_EXIT_CODE)
