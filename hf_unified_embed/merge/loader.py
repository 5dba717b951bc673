"""Lazy tensor access to one model folder, one tensor at a time.

A :class:`LazyCheckpoint` reads only headers when it opens; :meth:`LazyCheckpoint.get_tensor` then
reads a single tensor and :meth:`LazyCheckpoint.read_block` a slice of one into a caller's buffer.
safetensors files (single or sharded with ``model.safetensors.index.json``) are opened once: the
header is checked with ``safetensors.safe_open`` and tensor bytes are read with ``os.preadv``
straight into the destination buffer; ``pytorch_model.bin`` files are opened with
``torch.load(weights_only=True, mmap=True)`` so that only the tensors asked for are paged in.

Which weights make up a model:

* a sentence-transformers folder (``modules.json``): every module folder that holds weights — the
  transformer (usually the root) and heads such as ``2_Dense/``. Tensors of a module in a sub-folder
  are named ``"<folder>/<tensor>"`` (``2_Dense/linear.weight``);
* a plain transformers folder: its root weights;
* a PEFT LoRA adapter folder (``adapter_config.json`` without full weights): the adapter is merged
  into its base model with ``peft`` first (``merge_and_unload``) and the merged weights are read
  from a scratch folder. This is the one case that holds a whole model in memory, once.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
from safetensors import SafetensorError, safe_open

from hf_unified_embed.errors import InputNotFoundError, MergeError, shown
from hf_unified_embed.training.attention import family_of, register_bidirectional_classes, saved_attention

logger = logging.getLogger(__name__)

SAFETENSORS_FILE = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
TORCH_FILE = "pytorch_model.bin"
TORCH_INDEX = "pytorch_model.bin.index.json"
ADAPTER_CONFIG = "adapter_config.json"
WEIGHT_FILE_NAMES = (SAFETENSORS_INDEX, SAFETENSORS_FILE, TORCH_INDEX, TORCH_FILE)
# Files that describe weights or a previous card: never copied from the reference input.
_NOT_SUPPORT_FILES = (".safetensors", ".bin", ".safetensors.index.json", ".bin.index.json")
_ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin")
# What a training run leaves beside its model (hf-unified-embed's recipe, trainer arguments,
# evaluation, plots for its card): true of the reference input, false of the merge.
_RUN_FILES = ("hf_unified_embed_recipe.yaml", "trainer_args.json", "training_args.bin", "evaluation.json")
_RUN_SUFFIXES = (".png",)
_VOCAB_FILES = ("vocab.txt", "vocab.json", "merges.txt", "spiece.model", "sentencepiece.bpe.model", "tokenizer.model")

_SAFETENSORS_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "F8_E4M3": torch.float8_e4m3fn,
    "F8_E5M2": torch.float8_e5m2,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}


@dataclass(frozen=True)
class TensorInfo:
    """Shape and dtype of a stored tensor, known without reading its data."""

    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def numel(self) -> int:
        count = 1
        for size in self.shape:
            count *= size
        return count

    @property
    def nbytes(self) -> int:
        return self.numel * torch.empty((), dtype=self.dtype).element_size()


class _TensorFile(Protocol):
    path: Path

    def names(self) -> list[str]: ...
    def info(self, key: str) -> TensorInfo: ...
    def read(self, key: str, out: torch.Tensor | None = None, start: int = 0) -> torch.Tensor: ...
    def close(self) -> None: ...


def _byte_view(tensor: torch.Tensor) -> memoryview:
    """A writable view of a contiguous tensor's bytes, whatever its dtype (bfloat16 included)."""
    return tensor.reshape(-1).view(torch.uint8).numpy().data


class _SafetensorsFile:
    """One safetensors file, opened once: its header is checked on open, tensor bytes read with ``preadv``.

    ``safetensors.safe_open`` validates the header against the file size; the data offsets come from
    the header itself. Reads go straight from the page cache into the caller's buffer (no memory
    mapping), so reading an input never adds its pages to the resident set.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            with safe_open(str(path), framework="pt") as handle:
                infos = {key: self._info(handle, key) for key in handle.keys()}  # noqa: SIM118
            with path.open("rb") as stream:
                (header_size,) = struct.unpack("<Q", stream.read(8))
                header = json.loads(stream.read(header_size))
        except (SafetensorError, OSError, ValueError, struct.error) as error:
            raise MergeError(f"{path}: not a readable safetensors file (truncated or corrupt?): {error}") from error
        self._infos = infos
        data_start = 8 + header_size
        self._offsets = {key: data_start + int(header[key]["data_offsets"][0]) for key in infos}
        # A file object rather than a bare descriptor: it is closed when garbage-collected too.
        self._file = path.open("rb", buffering=0)
        os.posix_fadvise(self._file.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)

    def _info(self, handle: Any, key: str) -> TensorInfo:
        view = handle.get_slice(key)
        dtype = _SAFETENSORS_DTYPES.get(view.get_dtype())
        if dtype is None:
            raise MergeError(f"{self.path}: tensor {shown(key)} has unsupported dtype {view.get_dtype()}")
        return TensorInfo(tuple(view.get_shape()), dtype)

    def names(self) -> list[str]:
        return list(self._infos)

    def info(self, key: str) -> TensorInfo:
        return self._infos[key]

    def read(self, key: str, out: torch.Tensor | None = None, start: int = 0) -> torch.Tensor:
        info = self._infos[key]
        if out is None:
            out = torch.empty(info.shape, dtype=info.dtype)
        view = _byte_view(out)
        offset = self._offsets[key] + start * out.element_size()
        done = 0
        while done < len(view):  # preadv may return less than asked (large reads, signals)
            count = os.preadv(self._file.fileno(), [view[done:]], offset + done)
            if count == 0:
                raise MergeError(f"{self.path}: tensor {shown(key)} ends past the end of the file (truncated?)")
            done += count
        return out

    def close(self) -> None:
        self._file.close()


class _TorchBinFile:
    """A ``pytorch_model.bin`` loaded with ``weights_only=True`` and memory-mapped."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except Exception as error:  # torch raises RuntimeError, UnpicklingError, EOFError… for bad files
            raise MergeError(f"{path}: cannot load with torch.load(weights_only=True): {error}") from error
        if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
            raise MergeError(f"{path}: expected a state dict of tensors")
        self._state: dict[str, torch.Tensor] = state

    def names(self) -> list[str]:
        return list(self._state)

    def info(self, key: str) -> TensorInfo:
        tensor = self._state[key]
        return TensorInfo(tuple(tensor.shape), tensor.dtype)

    def read(self, key: str, out: torch.Tensor | None = None, start: int = 0) -> torch.Tensor:
        # A copy either way: .bin state dicts may hold views that share storage.
        tensor = self._state[key]
        if out is None:
            return tensor.clone()
        return out.copy_(tensor.reshape(-1)[start : start + out.numel()])

    def close(self) -> None:
        self._state = {}


def _read_json(path: Path) -> Any:
    """A JSON file of an input folder; a broken one is the input's fault, named in the error."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise MergeError(f"{path}: not valid JSON: {error}") from error


def _open_weight_files(directory: Path) -> list[_TensorFile]:
    """The weight files of one folder, preferring safetensors over .bin as transformers does."""
    for index_name, opener in ((SAFETENSORS_INDEX, _SafetensorsFile), (TORCH_INDEX, _TorchBinFile)):
        index_path = directory / index_name
        if index_path.is_file():
            try:
                weight_map: dict[str, str] = json.loads(index_path.read_text(encoding="utf-8"))["weight_map"]
            except (json.JSONDecodeError, KeyError) as error:
                raise MergeError(f"{index_path}: not a weight index (expected a 'weight_map'): {error}") from error
            files: list[_TensorFile] = []
            for shard in dict.fromkeys(weight_map.values()):
                if not (directory / shard).is_file():
                    raise MergeError(f"{index_path}: shard {shown(shard)} is missing")
                files.append(opener(directory / shard))
            listed = set(weight_map)
            stored = {key for file in files for key in file.names()}
            if listed != stored:
                missing = sorted(listed - stored)[:3] or sorted(stored - listed)[:3]
                raise MergeError(f"{index_path}: index and shards disagree on tensors such as {missing}")
            return files
    if (directory / SAFETENSORS_FILE).is_file():
        return [_SafetensorsFile(directory / SAFETENSORS_FILE)]
    if (directory / TORCH_FILE).is_file():
        return [_TorchBinFile(directory / TORCH_FILE)]
    return []


def _merge_lora_adapter(adapter_dir: Path, scratch_dir: Path) -> Path:
    """Merge a LoRA adapter into its base with peft and save the result; returns the saved folder."""
    from peft import PeftConfig, PeftModel
    from transformers import AutoModel

    try:
        config = PeftConfig.from_pretrained(str(adapter_dir))
    except (ValueError, OSError, TypeError) as error:
        raise MergeError(f"{adapter_dir / ADAPTER_CONFIG}: not a readable PEFT adapter config: {error}") from error
    base_path = config.base_model_name_or_path
    if not base_path or not Path(base_path).is_dir():
        raise MergeError(
            f"{adapter_dir / ADAPTER_CONFIG}: base_model_name_or_path {shown(base_path)} must be a local model folder"
        )
    logger.info("Merging the LoRA adapter %s into %s", adapter_dir, base_path)
    register_bidirectional_classes()  # a self-contained bidirectional base loads as the class its config names
    base = AutoModel.from_pretrained(base_path, dtype="auto")
    merged = PeftModel.from_pretrained(base, str(adapter_dir)).merge_and_unload()
    target = scratch_dir / hashlib.sha1(str(adapter_dir.resolve()).encode()).hexdigest()[:12]
    merged.save_pretrained(str(target))
    return target


class LazyCheckpoint:
    """Headers of every weight file of one model folder; tensors are read on request.

    Args:
        path: the model folder.
        scratch_dir: where a LoRA adapter input is materialised after merging into its base.
            Required only for adapter folders.
    """

    def __init__(self, path: str | Path, scratch_dir: Path | None = None) -> None:
        self.path = Path(path)
        if not self.path.exists():
            raise InputNotFoundError(f"input model {self.path} does not exist")
        if not self.path.is_dir():
            raise MergeError(f"{self.path}: not a model folder")
        self.adapter_base: Path | None = None
        self._sources: dict[str, tuple[_TensorFile, str]] = {}
        self._support_dirs: list[tuple[str, Path]] = []
        for prefix, directory in self._module_dirs():
            files = _open_weight_files(directory)
            if not files and (directory / ADAPTER_CONFIG).is_file():
                if scratch_dir is None:
                    raise MergeError(f"{directory}: a LoRA adapter folder needs a scratch folder to merge into")
                merged_dir = _merge_lora_adapter(directory, scratch_dir)
                self.adapter_base = Path(_read_json(directory / ADAPTER_CONFIG)["base_model_name_or_path"])
                # Files of the base (config.json…) come first so that the adapter folder's own files win.
                self._support_dirs.append((prefix, self.adapter_base))
                files = _open_weight_files(merged_dir)
            for file in files:
                for key in file.names():
                    self._sources[prefix + key] = (file, key)
        if not self._sources:
            raise MergeError(
                f"{self.path}: no weights found (expected one of {', '.join(WEIGHT_FILE_NAMES)} or a LoRA adapter)"
            )
        self._support_dirs.append(("", self.path))

    def module_paths(self) -> list[str]:
        """Folders of the sentence-transformers modules ("" for the root); empty for a plain folder."""
        modules_file = self.path / "modules.json"
        if not modules_file.is_file():
            return []
        try:
            modules = json.loads(modules_file.read_text(encoding="utf-8"))
            return [str(module.get("path", "")) for module in modules]
        except (json.JSONDecodeError, AttributeError, TypeError) as error:
            raise MergeError(f"{modules_file}: not a sentence-transformers modules list: {error}") from error

    def _module_dirs(self) -> Iterator[tuple[str, Path]]:
        paths = self.module_paths()
        if not paths:
            yield "", self.path
            return
        for module_path in paths:
            directory = self.path / module_path
            if any((directory / name).is_file() for name in (*WEIGHT_FILE_NAMES, ADAPTER_CONFIG)):
                yield (f"{module_path}/" if module_path else ""), directory

    def __repr__(self) -> str:
        return f"LazyCheckpoint({shown(str(self.path))}, tensors={len(self._sources)})"

    @property
    def names(self) -> list[str]:
        return list(self._sources)

    def __contains__(self, name: object) -> bool:
        return name in self._sources

    def info(self, name: str) -> TensorInfo:
        file, key = self._sources[name]
        return file.info(key)

    def file_of(self, name: str) -> Path:
        return self._sources[name][0].path

    def get_tensor(self, name: str) -> torch.Tensor:
        """The whole tensor, in a new buffer."""
        file, key = self._sources[name]
        return file.read(key)

    def read_block(self, name: str, out: torch.Tensor, start: int) -> torch.Tensor:
        """Elements ``start … start + out.numel()`` of the flattened tensor, into ``out`` (same dtype)."""
        file, key = self._sources[name]
        return file.read(key, out, start)

    def close(self) -> None:
        """Close the weight files (the checkpoint cannot be read afterwards)."""
        for file in {id(file): file for file, _ in self._sources.values()}.values():
            file.close()

    def __enter__(self) -> LazyCheckpoint:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def architecture(self) -> dict[str, Any]:
        """What must agree between inputs: model type and architectures of config.json, module types.

        A LoRA adapter input answers for its base (read first) overridden by the adapter folder.
        """
        signature: dict[str, Any] = {}
        for _, directory in self._support_dirs:
            config_file = directory / "config.json"
            if config_file.is_file():
                config = _read_json(config_file)
                # A self-contained bidirectional config names its family's classes with a prefix; the
                # attention itself is compared below, so a merged and an adapter input of one run agree.
                signature["model_type"] = family_of(config.get("model_type"))
                signature["architectures"] = [
                    str(name).removeprefix("Bidirectional") for name in config.get("architectures") or []
                ] or config.get("architectures")
            modules_file = directory / "modules.json"
            if modules_file.is_file():
                modules = _read_json(modules_file)
                # The class path moved between sentence-transformers versions; the class name did not. A
                # bidirectional adapter's module is a Transformer too (its attention is compared below).
                signature["modules"] = [
                    (m.get("path", ""), str(m.get("type", "")).rsplit(".", 1)[-1].removeprefix("Bidirectional"))
                    for m in modules
                ]
        # A decoder's attention (causal, bidirectional from a layer) is part of what the weights were trained for.
        signature["attention"] = saved_attention([directory for _, directory in self._support_dirs])
        return signature

    def vocabulary_fingerprint(self) -> dict[str, str]:
        """Hashes of the vocabulary files, so that inputs with different token ids are caught."""
        fingerprint = {}
        files = self.support_files()
        for name in _VOCAB_FILES:
            if name in files:
                fingerprint[name] = hashlib.sha256(files[name].read_bytes()).hexdigest()
        if "tokenizer.json" in files and not fingerprint:  # parsing it is slow; plain vocab files suffice
            model = _read_json(files["tokenizer.json"]).get("model", {})
            fingerprint["tokenizer.json"] = hashlib.sha256(
                json.dumps(model.get("vocab"), sort_keys=True).encode()
            ).hexdigest()
        return fingerprint

    def support_files(self) -> dict[str, Path]:
        """Non-weight files (configs, tokenizer, module folders) by relative output path.

        Only the top level and the folders named in ``modules.json`` are looked at, so trainer
        leftovers (``checkpoint-*/``, ``runs/``) are never picked up.
        """
        files: dict[str, Path] = {}
        for prefix, directory in self._support_dirs:
            for file in sorted(directory.iterdir()):
                if file.is_file():
                    files[prefix + file.name] = file
        for module_path in filter(None, self.module_paths()):
            for file in sorted((self.path / module_path).rglob("*")):
                if file.is_file():
                    files[f"{module_path}/{file.relative_to(self.path / module_path).as_posix()}"] = file
        return {
            name: file
            for name, file in files.items()
            if not file.name.endswith(_NOT_SUPPORT_FILES)
            and file.name not in _ADAPTER_FILES
            and file.name not in _RUN_FILES
            and not file.name.endswith(_RUN_SUFFIXES)
            and not file.name.startswith(".")
            and name != "README.md"
        }
