"""Artifacts as a user meets them: written, then reloaded from disk in a fresh Python process.

A comparison made before saving proves nothing about the file: a model can encode perfectly in memory
and save weights under names no loader maps back (it then reloads with random weights). So every writer's
test calls :func:`reload`, which runs this module as a script in a new interpreter — nothing of the
writing process (imported modules, patched functions, cached models) is shared — and returns what the
user's own code would get, as JSON:

* ``embeddings FOLDER``: ``SentenceTransformer(FOLDER).encode(TEXTS)``;
* ``rows FOLDER``: every config and split of a dataset folder through ``datasets.load_dataset``;
* ``card FILE``: the card's metadata as ``huggingface_hub`` parses it (``ModelCard``/``DatasetCard``) and its text.

The checks beside it compare that with what was in memory (:func:`assert_same_embeddings`,
:func:`assert_same_rows`), hold a card's metadata to Hub ids (:func:`assert_hub_metadata`), and look
through every file an artifact wrote for a path of the machine (:func:`assert_no_machine_paths`).
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

#: Fixed texts every model artifact is encoded with, in the writing process and in the fresh one.
TEXTS = [
    "what is the capital of france",
    "Paris is the capital and most populous city of France.",
    "A man is playing a guitar.",
    "Someone plays an acoustic guitar on stage.",
    "how does a rocket engine work",
]
#: Largest difference allowed between embeddings in memory and reloaded (float32 models).
EMBEDDING_ATOL = 1e-5

#: The one file and key where a machine path is kept on purpose: PEFT loads an adapter's base from
#: ``base_model_name_or_path``, so a locally trained adapter names its local base (``push`` replaces it
#: with the base's Hub id, see ``hf_unified_embed.hub.publishing``).
LOADER_PATHS = {"adapter_config.json": ("base_model_name_or_path",)}
#: Relative paths that leave the folder they are written in (``../x``, ``..\\x``).
_LEAVING = re.compile(rb"(?:^|[\s\"'`(=:\[,])\.\.[/\\]")
_SAFETENSORS = ".safetensors"


def _read(kind: str, target: str) -> Any:
    if kind == "embeddings":
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(target, device="cpu")
        return model.encode(TEXTS, convert_to_numpy=True).astype("float64").tolist()
    if kind == "rows":
        from datasets import get_dataset_config_names, load_dataset

        rows = {}
        for config in get_dataset_config_names(target):
            splits = load_dataset(target, config)
            rows[config] = {split: splits[split].to_list() for split in splits}
        return rows
    if kind == "card":
        from huggingface_hub import DatasetCard, ModelCard

        path = Path(target)
        card_type = DatasetCard if "configs:" in path.read_text(encoding="utf-8").split("\n---", 1)[0] else ModelCard
        card = card_type.load(path)
        return {"data": card.data.to_dict(), "text": card.text, "type": card_type.__name__}
    raise SystemExit(f"unknown kind {kind!r}")


def _main(argv: list[str]) -> None:
    kind, out, *targets = argv
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    Path(out).write_text(json.dumps([_read(kind, target) for target in targets]), encoding="utf-8")


def reload_all(kind: str, targets: Iterable[str | Path]) -> list[Any]:
    """What one fresh process reads from each of ``targets`` (see the module docs for ``kind``)."""
    from _processes import Expected, failure, run

    targets = [str(target) for target in targets]
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "reloaded.json"
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": ""}
        # Measured on the quiet 2-core machine: ~8 s to start and import sentence-transformers, ~0.5 s a model.
        expected = Expected(10, steps=len(targets), step_s=1)
        completed = run([sys.executable, __file__, kind, str(out), *targets], expected=expected, env=env)
        assert completed.returncode == 0, failure(completed)
        result: list[Any] = json.loads(out.read_text(encoding="utf-8"))
        return result


def reload(kind: str, target: str | Path) -> Any:
    """What a fresh process reads from ``target`` (see the module docs for ``kind``)."""
    return reload_all(kind, [target])[0]


def encode(model: Any) -> Any:
    """:data:`TEXTS` encoded by a model in memory (float64 numpy, as :func:`reload` returns them)."""
    import torch

    with torch.no_grad():
        return model.encode(TEXTS, convert_to_numpy=True).astype("float64")


def assert_same_embeddings(folder: str | Path, in_memory: Any, reloaded: Any = None) -> None:
    """``folder`` reloaded in a fresh process encodes :data:`TEXTS` as ``in_memory`` did (embeddings or a
    model). ``reloaded``: the fresh process's embeddings when :func:`reload_all` already read them."""
    import numpy as np

    expected = in_memory if isinstance(in_memory, np.ndarray) else encode(in_memory)
    reloaded = np.asarray(reload("embeddings", folder) if reloaded is None else reloaded)
    assert reloaded.shape == expected.shape
    difference = float(np.abs(reloaded - expected).max())
    assert difference <= EMBEDDING_ATOL, f"{folder} reloads {difference:.3g} away from the model that wrote it"


def assert_same_rows(folder: str | Path, in_memory: Mapping[str, Mapping[str, Any]]) -> None:
    """Every task and split of ``folder`` loads through ``datasets.load_dataset`` with exactly the rows of
    ``in_memory`` (``{split: {task: Dataset}}``), and there is no other."""
    reloaded = reload("rows", folder)
    written = {(task, split) for task, splits in reloaded.items() if task != "all" for split in splits}
    assert written == {(task, split) for split, tasks in in_memory.items() for task in tasks}
    for split, tasks in in_memory.items():
        for task, dataset in tasks.items():
            assert reloaded[task][split] == dataset.to_list(), f"{folder}: {task}/{split} does not reload as written"


def assert_hub_metadata(metadata: Mapping[str, Any]) -> None:
    """Card metadata names models and datasets by Hub id only (what the Hub can link), never a path."""
    from huggingface_hub.utils import validate_repo_id

    for key in ("base_model", "datasets"):
        value = metadata.get(key)
        for repo_id in [value] if isinstance(value, str) else value or []:
            assert not repo_id.startswith((".", "/", "~")), f"{key}: {repo_id!r} is a path"
            validate_repo_id(repo_id)


def _text_of(path: Path) -> bytes | None:
    """The text of ``path`` a writer puts paths in: a text file (an adapter config less its base), the JSON
    header of a safetensors file, the key-value metadata of a Parquet file; ``None`` for other binaries."""
    data = path.read_bytes()
    if path.suffix == _SAFETENSORS:
        size = int.from_bytes(data[:8], "little")
        return data[8 : 8 + size]
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        metadata = pq.read_metadata(path).metadata or {}
        return b"\n".join(key + b"=" + value for key, value in metadata.items())
    kept = LOADER_PATHS.get(path.name)
    if kept:
        config = json.loads(data)
        return json.dumps({key: value for key, value in config.items() if key not in kept}).encode()
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return data


def machine_roots(*extra: str | Path) -> list[Path]:
    """Folders of this machine whose names must not appear in an artifact: the repository, the virtualenv,
    the home and temporary folders, and ``extra`` (a test's own folders)."""
    roots = [Path(__file__).resolve().parent.parent, Path(sys.prefix), Path.home(), Path(tempfile.gettempdir())]
    return [*roots, *(Path(path) for path in extra)]


def assert_no_machine_paths(folder: str | Path, *roots: str | Path, allow: Iterable[str] = ()) -> None:
    """No file under ``folder`` names a place on this machine: no absolute path under ``roots`` (or
    :func:`machine_roots`), no ``site-packages``, no relative path leaving the folder (``../``).

    Every byte of every file is searched for the machine's folders; text — text files, the safetensors
    header, Parquet metadata — also for ``../`` (compressed data may hold those bytes by chance).
    ``allow``: file names (relative to ``folder``) not checked at all.
    """
    needles: set[bytes] = {b"site-packages"}
    for root in machine_roots(*roots):
        for form in {str(root), str(root.resolve())}:
            if len(form) > 1:
                needles.add(form.encode())
    skipped = set(allow)
    for path in sorted(Path(folder).rglob("*")):
        relative = path.relative_to(folder).as_posix()
        if not path.is_file() or relative in skipped:
            continue
        text = _text_of(path) or b""
        data = text if path.name in LOADER_PATHS else path.read_bytes()
        for needle in needles:
            assert needle not in data, f"{relative} holds the machine path {needle.decode()!r}"
        match = _LEAVING.search(text)
        assert match is None, f"{relative} holds a relative path out of the folder: {text[match.start() :][:80]!r}"


if __name__ == "__main__":
    _main(sys.argv[1:])
