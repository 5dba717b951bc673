"""Upload a model or dataset folder to the Hugging Face Hub with ``huggingface_hub``.

``push_folder`` creates the repository if needed (and the branch, for ``revision``) and uploads the
folder in one commit; ``dry_run`` returns what would be sent without touching the network. Before
anything is sent every file is searched for the active access token (the one given, ``HF_TOKEN`` or
the stored login): a folder that holds it is refused with :class:`~hf_unified_embed.errors.SecretLeakError`.
``push_unified`` does the same for a unified dataset (a folder written by ``save_unified`` or an
in-memory ``DatasetDict``).

A dry run checks what a push checks before it sends anything: the repository id
(``huggingface_hub.utils.validate_repo_id``) and that the folder is what the push says it is — a model
folder (``modules.json``, ``config.json``, an adapter or weights) for a model repository, not a model for
a dataset repository, a unified dataset (its card declares the task configs) for ``push_unified``.

A LoRA adapter of a bidirectional decoder is refused: peft and transformers would load its causal base, so
its merged form is what publishes. A model's card names the folder it was saved in
(:mod:`hf_unified_embed.hub.card_ids`); the uploaded copy names ``repo_id`` instead, and a dry run shows
exactly that copy, followed by what a user of the model needs to load it
(:mod:`hf_unified_embed.hub.consumers`). The local folder is never changed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import huggingface_hub
from datasets import DatasetDict
from huggingface_hub import ModelCard
from huggingface_hub.errors import HfHubHTTPError

from hf_unified_embed.data.check_record import CHECK_RECORD
from hf_unified_embed.errors import (
    HfUnifiedEmbedError,
    HubError,
    InputError,
    InputNotFoundError,
    SecretLeakError,
    one_line,
    shown,
)
from hf_unified_embed.hub.card_ids import with_repo_id
from hf_unified_embed.hub.consumers import ConsumerNeeds, consumer_needs
from hf_unified_embed.utils.arguments import checked_arguments
from hf_unified_embed.utils.locations import looks_local
from hf_unified_embed.utils.outputs import MARKER
from hf_unified_embed.utils.redaction import find_secrets, remember_secret

RepoType = Literal["model", "dataset"]

ADAPTER_CONFIG = "adapter_config.json"
#: Files that make a folder a model folder (sentence-transformers, transformers, PEFT adapter, weights).
MODEL_FILES = (
    "modules.json",
    "config.json",
    ADAPTER_CONFIG,
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)

# Never uploaded: local caches, editor/OS clutter, the marker of a folder the tool wrote (it says that
# `--overwrite` may replace this local folder; it means nothing in a repository) and the record of what was
# checked in it (it holds the local files' modification times).
IGNORE_PATTERNS = [
    ".git/*",
    "**/.ipynb_checkpoints/*",
    "**/__pycache__/*",
    ".cache/*",
    "**/.DS_Store",
    MARKER,
    f"**/{MARKER}",
    CHECK_RECORD,
]


@dataclass(frozen=True)
class PushPlan:
    """What a push sends (returned by ``dry_run=True``): the repository, files, the card as uploaded and,
    for a model, what its users need (:func:`~hf_unified_embed.hub.consumers.consumer_needs`)."""

    repo_id: str
    repo_type: str
    files: list[str]
    card: str | None
    private: bool
    revision: str | None
    create_pr: bool
    commit_message: str
    consumers: ConsumerNeeds | None = None

    def describe(self) -> str:
        target = f"{self.repo_type} repo {self.repo_id}" + (f" @ {self.revision}" if self.revision else "")
        lines = [
            f"would upload {len(self.files)} file(s) to {'a PR on ' if self.create_pr else ''}{target} ({'private' if self.private else 'public'}):"
        ]
        lines += [f"  {name}" for name in self.files]
        if self.card is not None:
            lines += ["--- README.md ---", self.card.rstrip()]
        if self.consumers is not None:
            lines.append(self.consumers.describe())
        return "\n".join(lines)


def _plan(
    folder: Path,
    repo_id: str,
    repo_type: str,
    private: bool,
    revision: str | None,
    create_pr: bool,
    commit_message: str,
) -> PushPlan:
    from huggingface_hub.utils import filter_repo_objects

    files = sorted(str(path.relative_to(folder)) for path in folder.rglob("*") if path.is_file())
    files = list(filter_repo_objects(files, ignore_patterns=IGNORE_PATTERNS))
    readme = folder / "README.md"
    card = readme.read_text(encoding="utf-8") if readme.is_file() else None
    if repo_type != "model":
        return PushPlan(repo_id, repo_type, files, card, private, revision, create_pr, commit_message)
    uploaded = with_repo_id(card, repo_id, folder) if card is not None else None
    return PushPlan(
        repo_id, repo_type, files, uploaded, private, revision, create_pr, commit_message, consumer_needs(folder)
    )


@checked_arguments
def push_folder(
    folder: str | Path,
    repo_id: str,
    repo_type: RepoType = "model",
    private: bool = False,
    revision: str | None = None,
    create_pr: bool = False,
    token: str | None = None,
    commit_message: str | None = None,
    dry_run: bool = False,
) -> PushPlan | Any:
    """Upload ``folder`` to ``repo_id``; return the :class:`PushPlan` (dry run) or the commit info.

    Args:
        folder: the local folder (its ``README.md`` becomes the repository card).
        repo_id: ``"user/name"`` on the Hub.
        repo_type: ``"model"`` or ``"dataset"``.
        private: create the repository as private (an existing repository keeps its visibility).
        revision: branch to commit to; created from the default branch if missing.
        create_pr: open a pull request instead of committing directly.
        token: a Hub token (default: the logged-in user's).
        commit_message: defaults to "Upload <repo_type> with hf-unified-embed".
        dry_run: only list what would be uploaded.
    """
    if repo_type not in ("model", "dataset"):
        raise ValueError(f"repo_type must be 'model' or 'dataset', got {shown(repo_type)}")
    check_repo_id(repo_id, repo_type)
    folder = Path(folder)
    if not folder.is_dir():
        raise InputNotFoundError(f"{folder} is not a folder")
    remember_secret(token)
    message = commit_message or f"Upload {repo_type} with hf-unified-embed"
    plan = _plan(folder, repo_id, repo_type, private, revision, create_pr, message)
    if not plan.files:
        raise InputNotFoundError(f"{folder} has no files to upload")
    leaks = [path for path in find_secrets(folder) if str(path.relative_to(folder)) in plan.files]
    if leaks:
        raise SecretLeakError(
            f"refusing to upload {folder}: {', '.join(str(path) for path in leaks)} contain(s) the active access token"
        )
    check_folder_kind(folder, repo_type)
    if repo_type == "model":
        from hf_unified_embed.training.bidirectional_transformer import bidirectional_adapter_problem

        # Its users would run it causal (peft loads the causal base): the merged form is what publishes.
        problem = bidirectional_adapter_problem(folder)
        if problem is not None:
            raise InputError(f"refusing to upload {problem}")
    if dry_run:
        return plan
    with _hub_failures(f"cannot push to the {repo_type} repo {repo_id}"):
        huggingface_hub.create_repo(repo_id, token=token, private=private, repo_type=repo_type, exist_ok=True)
        if revision is not None and not create_pr:
            huggingface_hub.create_branch(repo_id, branch=revision, token=token, repo_type=repo_type, exist_ok=True)
        with _publishable(folder, plan.card if repo_type == "model" else None) as upload:
            return huggingface_hub.upload_folder(
                repo_id=repo_id,
                folder_path=str(upload),
                repo_type=repo_type,
                revision=revision,
                create_pr=create_pr,
                token=token,
                commit_message=message,
                ignore_patterns=IGNORE_PATTERNS,
            )


def check_repo_id(repo_id: str, repo_type: str = "model") -> str:
    """``repo_id`` if the Hub accepts it as a repository id (``name`` or ``user/name``); an
    :class:`~hf_unified_embed.errors.InputError` saying why otherwise."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError as error:
        raise InputError(
            f"{shown(repo_id)} is not a valid Hub {repo_type} repository id (expected 'user/name'): {one_line(error, 300)}"
        ) from None
    return repo_id


def is_model_folder(folder: Path) -> bool:
    """Whether ``folder`` holds a model: a file of :data:`MODEL_FILES` or a ``*.safetensors`` file at its top."""
    return any((folder / name).is_file() for name in MODEL_FILES) or any(folder.glob("*.safetensors"))


def _is_unified_dataset(folder: Path) -> bool:
    from hf_unified_embed.data.hub_layout import read_card, unified_tasks

    try:
        return bool(unified_tasks(read_card(folder)))
    except (HfUnifiedEmbedError, OSError, ValueError):
        return False


def check_folder_kind(folder: Path, repo_type: str) -> None:
    """Refuse a folder that is not what a push of ``repo_type`` uploads: a model repository gets a model
    folder, a dataset repository no model folder."""
    if repo_type == "model" and not is_model_folder(folder):
        if _is_unified_dataset(folder):
            raise InputError(
                f"{folder} is a unified dataset folder, not a model: upload it with `hf-unified-embed push-dataset` "
                "(push_unified)"
            )
        raise InputError(
            f"{folder} is not a model folder: it has none of {', '.join(MODEL_FILES[:3])} or weights (*.safetensors)"
        )
    if repo_type == "dataset" and is_model_folder(folder):
        found = next((name for name in MODEL_FILES if (folder / name).is_file()), "*.safetensors")
        raise InputError(
            f"{folder} is a model folder (it has {found}), not a dataset: upload it with `hf-unified-embed push` "
            "(repo_type='model')"
        )


#: What a Hub request raises when the Hub cannot be reached or refuses it: ``OSError`` (offline mode,
#: a missing token, every HTTP error status) and the HTTP library's own base error, which a failed
#: connection raises unwrapped (httpx or httpx2, depending on the huggingface_hub release).
HUB_FAILURES: tuple[type[BaseException], ...] = (
    OSError,
    *(base for base in HfHubHTTPError.__mro__[1:] if base.__name__ == "HTTPError"),
)


@contextlib.contextmanager
def _hub_failures(action: str) -> Iterator[None]:
    """Turn an unreachable or refusing Hub into a :class:`~hf_unified_embed.errors.HubError` naming ``action``."""
    try:
        yield
    except HfUnifiedEmbedError:
        raise
    except HUB_FAILURES as error:
        raise HubError(f"{action}: {type(error).__name__}: {one_line(error, 500) or 'no message'}") from error


@contextlib.contextmanager
def _publishable(folder: Path, card: str | None) -> Iterator[Path]:
    """``folder``, or a hard-linked copy holding what the Hub copy needs instead: ``card`` as its README
    (naming the repository, see :func:`~hf_unified_embed.hub.card_ids.with_repo_id`), and an adapter config
    that names the base model's Hub id.

    A LoRA adapter trained from a local base keeps that path in ``adapter_config.json`` so it loads
    where it was trained; on the Hub it must name the base by id, which the card's ``base_model`` holds.
    """
    readme = folder / "README.md"
    replaced: dict[str, str] = {}
    if card is not None and readme.is_file() and card != readme.read_text(encoding="utf-8"):
        replaced["README.md"] = card
    config_path = folder / ADAPTER_CONFIG
    config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.is_file() else {}
    base = str(config.get("base_model_name_or_path") or "")
    if config and looks_local(base):
        hub_base = ModelCard.load(readme).data.base_model if readme.is_file() else None
        if not isinstance(hub_base, str) or looks_local(hub_base):
            raise InputError(
                f"{config_path}: the adapter's base model is the local path {base}; give the card a base_model "
                "Hub id (the training recipe's base_model_id) so the uploaded adapter can find its base"
            )
        replaced[ADAPTER_CONFIG] = json.dumps({**config, "base_model_name_or_path": hub_base}, indent=2) + "\n"
    if not replaced:
        yield folder
        return
    with tempfile.TemporaryDirectory(prefix=f".{folder.name}.upload-", dir=folder.parent) as scratch:
        copy = Path(scratch) / folder.name
        shutil.copytree(folder, copy, copy_function=_link_or_copy)
        for name, text in replaced.items():
            (copy / name).unlink()  # a hard link: never write through it into the original
            (copy / name).write_text(text, encoding="utf-8")
        yield copy


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


@checked_arguments
def push_unified(
    dir_or_datasetdict: str | Path | DatasetDict,
    repo_id: str,
    private: bool = False,
    token: str | None = None,
    revision: str | None = None,
    create_pr: bool = False,
    dry_run: bool = False,
) -> PushPlan | Any:
    """Upload a unified dataset: a folder written by ``save_unified`` or a ``DatasetDict`` (saved first)."""
    from hf_unified_embed.data.hub_layout import read_card, save_unified, unified_tasks

    check_repo_id(repo_id, "dataset")
    kwargs: dict[str, Any] = dict(
        repo_type="dataset", private=private, revision=revision, create_pr=create_pr, token=token, dry_run=dry_run
    )
    if isinstance(dir_or_datasetdict, DatasetDict):
        with tempfile.TemporaryDirectory(prefix="push-unified-") as scratch:
            folder = save_unified(dir_or_datasetdict, Path(scratch) / "data")
            return push_folder(
                folder, repo_id, commit_message="Upload unified dataset with hf-unified-embed", **kwargs
            )
    folder = Path(dir_or_datasetdict)
    if folder.is_dir():
        check_folder_kind(folder, "dataset")
    if not unified_tasks(read_card(folder)):
        raise InputError(
            f"{folder}/README.md declares no task configs; write the folder with save_unified / `hf-unified-embed build`"
        )
    return push_folder(folder, repo_id, commit_message="Upload unified dataset with hf-unified-embed", **kwargs)
