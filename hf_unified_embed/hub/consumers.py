"""What someone who loads a published model folder needs, and what would not load for them.

People who use a published model do not install hf-unified-embed: they have sentence-transformers
(or only transformers, or an ONNX runtime). :func:`consumer_needs` reads a model folder the way
their loaders will and says:

* the packages to install: ``sentence-transformers`` for a folder with ``modules.json`` (plain
  ``transformers`` otherwise), ``peft`` for a LoRA adapter, ``sentencepiece`` for a tokenizer that
  exists only as a SentencePiece model, and whatever third-party module the folder's own Python files
  import;
* whether ``trust_remote_code=True`` is needed: ``config.json`` maps its classes to the folder's own
  code (``auto_map``), or ``modules.json`` names a module class outside sentence-transformers;
* warnings for what would not load, or would load wrong, without this package: a ``model_type``
  transformers does not know and no ``auto_map`` for it, an ``auto_map`` or module that points at a
  Python file the folder lacks, code that imports ``hf_unified_embed``, a module class from this
  package, and a decoder trained with bidirectional attention whose folder does not carry the code
  that applies it (plain transformers, an ONNX export and peft would run it causal).

``push --dry-run`` prints it after the card (:meth:`ConsumerNeeds.describe`).
"""

from __future__ import annotations

import ast
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Packages every consumer of a transformers model has; not listed as extras.
_PROVIDED = frozenset(
    {
        "torch",
        "transformers",
        "sentence_transformers",
        # installed with transformers
        "huggingface_hub",
        "numpy",
        "packaging",
        "regex",
        "safetensors",
        "tokenizers",
        "tqdm",
        "yaml",
    }
)
#: Import names whose package is published under another name.
_PACKAGE_NAMES = {"sklearn": "scikit-learn", "PIL": "pillow", "yaml": "pyyaml", "google": "protobuf"}
#: The package a consumer does not have.
_THIS_PACKAGE = "hf_unified_embed"
#: Where a model trained here records its decoder's attention (``config.json`` / ``sentence_bert_config.json``).
_ATTENTION_KEY = "hf_unified_embed_attention"


@dataclass(frozen=True)
class ConsumerNeeds:
    """What loading a folder takes outside this package.

    Attributes:
        packages: pip package names to install, in the order found.
        trust_remote_code: whether loaders must be called with ``trust_remote_code=True``.
        warnings: one line per thing that would not load (or would load wrong) for a consumer.
    """

    packages: list[str] = field(default_factory=list)
    trust_remote_code: bool = False
    warnings: list[str] = field(default_factory=list)

    def describe(self) -> str:
        """The block ``push --dry-run`` prints."""
        lines = [
            "--- consumer needs ---",
            f"pip install -U {' '.join(self.packages)}",
            "trust_remote_code=True: "
            + ("required (the folder carries its own model code)" if self.trust_remote_code else "not needed"),
        ]
        lines += [f"warning: {warning}" for warning in self.warnings]
        return "\n".join(lines)


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _imports(source: Path) -> set[str]:
    """Top-level module names ``source`` imports (absolute imports only; relative ones are the folder's)."""
    try:
        tree = ast.parse(source.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def _auto_map_files(auto_map: dict[str, Any]) -> dict[str, str]:
    """``{class reference: python file}`` of an ``auto_map`` (entries of another repository excluded)."""
    files = {}
    for value in auto_map.values():
        for reference in value if isinstance(value, list) else [value]:
            if isinstance(reference, str) and "--" not in reference and "." in reference:
                files[reference] = reference.rsplit(".", 1)[0].replace(".", "/") + ".py"
    return files


def _known_model_type(model_type: str) -> bool:
    from transformers import CONFIG_MAPPING

    return model_type in CONFIG_MAPPING


def _recorded_attention(*configs: dict[str, Any]) -> tuple[str, int] | None:
    """``("bidirectional", first layer)`` when a config records bidirectional attention, else ``None``."""
    for config in configs:
        setting = config.get(_ATTENTION_KEY)
        if isinstance(setting, dict) and setting.get("attention") == "bidirectional":
            return "bidirectional", int(setting.get("first_bidirectional_layer") or 0)
        if config.get("attention") == "bidirectional":  # a sentence-transformers module's own settings
            return "bidirectional", int(config.get("first_bidirectional_layer") or 0)
        if config.get("is_causal") is False:
            return "bidirectional", 0
    return None


def _modules(folder: Path) -> list[tuple[str, str]]:
    """``(path, class)`` of each module ``modules.json`` lists (none for a plain transformers folder)."""
    try:
        entries = json.loads((folder / "modules.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    entries = entries if isinstance(entries, list) else []
    return [(str(entry.get("path", "")), str(entry.get("type", ""))) for entry in entries if isinstance(entry, dict)]


def _code_of_modules(folder: Path, modules: list[tuple[str, str]]) -> tuple[set[Path], list[str]]:
    """The Python files the module classes of ``modules.json`` come from, and what is wrong with them."""
    files: set[Path] = set()
    warnings: list[str] = []
    for path, kind in modules:
        if not kind or kind.startswith("sentence_transformers."):
            continue
        shipped = folder / path / (kind.rsplit(".", 1)[0].replace(".", "/") + ".py")
        if kind.split(".")[0] == _THIS_PACKAGE:
            warnings.append(
                f"modules.json: module {path or '.'} is {kind}, a class of hf-unified-embed, which its users do not "
                "have: loading fails with \"No module named 'hf_unified_embed'\""
            )
        elif shipped.is_file():
            files.add(shipped)
        else:
            warnings.append(
                f"modules.json: module {path or '.'} is {kind}, but the folder has no {shipped.relative_to(folder)}"
            )
    return files, warnings


def _code_of_configs(folder: Path, model_dirs: list[Path]) -> tuple[set[Path], list[str]]:
    """The Python files the ``auto_map`` of each transformers config points at, and what is missing or unknown."""
    files: set[Path] = set()
    warnings: list[str] = []
    for model_dir in model_dirs:
        config = _json(model_dir / "config.json")
        where = (model_dir / "config.json").relative_to(folder)
        found = config.get("auto_map")
        auto_map: dict[str, Any] = found if isinstance(found, dict) else {}
        for reference, file in _auto_map_files(auto_map).items():
            if (model_dir / file).is_file():
                files.add(model_dir / file)
            else:
                warnings.append(f"{where}: auto_map names {reference}, but the folder has no {file}")
        model_type = config.get("model_type")
        if isinstance(model_type, str) and model_type and not auto_map and not _known_model_type(model_type):
            warnings.append(
                f"{where}: model_type {model_type!r} is unknown to transformers and no auto_map names code for it: "
                "neither SentenceTransformer nor AutoModel can load the folder"
            )
    return files, warnings


def _extra_packages(folder: Path, code_files: set[Path]) -> tuple[list[str], list[str]]:
    """Packages the folder's own code imports beyond what every consumer has; a warning for this package."""
    packages: list[str] = []
    warnings: list[str] = []
    for source in sorted(code_files):
        for name in sorted(_imports(source)):
            if name == _THIS_PACKAGE:
                warnings.append(f"{source.relative_to(folder)} imports hf_unified_embed, which its users do not have")
            elif (
                name not in _PROVIDED
                and name not in sys.stdlib_module_names
                and not (source.parent / f"{name}.py").is_file()
                and not (source.parent / name).is_dir()
            ):
                package = _PACKAGE_NAMES.get(name, name.replace("_", "-"))
                if package not in packages:
                    packages.append(package)
    return packages, warnings


def consumer_needs(folder: str | Path) -> ConsumerNeeds:
    """Inspect the model folder ``folder`` as a loader without this package would (see the module docs)."""
    from hf_unified_embed.training.bidirectional_transformer import bidirectional_adapter_problem

    folder = Path(folder)
    modules = _modules(folder)
    # The folder itself and every module folder: a transformer may be saved in a module folder of its own.
    model_dirs = [
        path
        for path in dict.fromkeys([folder, *(folder / path for path, _ in modules)])
        if (path / "config.json").is_file()
    ]
    adapter = any((path / "adapter_config.json").is_file() for path in [folder, *(folder / p for p, _ in modules)])
    packages = ["sentence-transformers" if modules else "transformers"]
    if adapter:
        packages.append("peft")
    if (folder / "tokenizer.model").is_file() and not (folder / "tokenizer.json").is_file():
        packages.append("sentencepiece")

    module_code, warnings = _code_of_modules(folder, modules)
    config_code, config_warnings = _code_of_configs(folder, model_dirs)
    extra, code_warnings = _extra_packages(folder, module_code | config_code)
    packages += [package for package in extra if package not in packages]
    warnings += config_warnings + code_warnings
    # auto_map code in a config, or a module class outside sentence-transformers: both load only when trusted.
    trust = any(isinstance(_json(path / "config.json").get("auto_map"), dict) for path in model_dirs) or any(
        kind and not kind.startswith("sentence_transformers.") for _, kind in modules
    )

    problem = bidirectional_adapter_problem(folder)
    if problem is not None:
        warnings.append(problem)
    configs = [_json(path / "config.json") for path in model_dirs]
    configs += [_json(folder / path / "sentence_bert_config.json") for path, _ in modules]
    attention = _recorded_attention(*configs)
    if attention is not None and attention[1] > 0 and not adapter and not config_code:
        warnings.append(
            f"the decoder is bidirectional from layer {attention[1]} on, and the folder carries no code (auto_map) "
            "that applies it: AutoModel, text-embeddings-inference and an ONNX export run it causal"
        )
    return ConsumerNeeds(packages, trust, warnings)
