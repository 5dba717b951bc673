"""The installed stack: what each optional path of the package needs from the installed packages.

A library that installed yesterday can break today: transformers 5.22 and later refuse PEFT below
0.22 when an adapter is added, so with PEFT 0.21 every LoRA run stopped deep inside transformers
after the data and the model had loaded. The paths that lean on a package beyond the core — LoRA and
QLoRA (PEFT, bitsandbytes), the FSDP and DeepSpeed engines (torch, deepspeed), mergekit's merge
methods — check the installed versions first and stop with one line that names the package, the
installed and the required versions and the command that fixes it.

What is required comes from two places, never from a table kept here: this package's own declared
ranges (its installed metadata, i.e. ``pyproject.toml``) and the minimums the neighbouring library
states itself (``transformers.integrations.peft.MIN_PEFT_VERSION``, transformers' dependency table,
accelerate's ``FSDP2_PYTORCH_VERSION``).
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata as metadata
from dataclasses import dataclass
from types import ModuleType

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from hf_unified_embed.errors import IncompatibleStackError

DISTRIBUTION = "hf-unified-embed"


@dataclass(frozen=True)
class Need:
    """One package a path needs, within ``specifier``, and who says so.

    ``extra`` names the extra whose declared ranges the path runs under (``"lora"``): a neighbour named in
    ``source`` is blamed only when it lies outside the core's ranges and that extra's.
    """

    package: str
    specifier: SpecifierSet
    source: str
    extra: str | None = None

    @property
    def requirement(self) -> str:
        return f"{self.package}{self.specifier}"


def installed_version(package: str) -> Version | None:
    try:
        return Version(metadata.version(package))
    except metadata.PackageNotFoundError:
        return None


@functools.cache
def declared_ranges(extra: str | None = None) -> dict[str, SpecifierSet]:
    """This package's declared ranges by canonical package name: the core's, and ``extra``'s with it.

    An extra narrows a range for its own path only: ``[lora]`` keeps transformers below the releases that
    refuse the released PEFT, which says nothing about a run without LoRA.
    """
    try:
        requirements = metadata.requires(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return {}
    ranges: dict[str, SpecifierSet] = {}
    for text in requirements:
        requirement = Requirement(text)
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": extra or ""}):
            continue
        name = canonicalize_name(requirement.name)
        ranges[name] = ranges.get(name, SpecifierSet()) & requirement.specifier
    return ranges


def declared(package: str, extra: str | None = None) -> Need:
    """``package`` within the range this package declares for it (in ``extra``, when given, too)."""
    return Need(package, declared_ranges(extra).get(canonicalize_name(package), SpecifierSet()), DISTRIBUTION)


def _fix(need: Need, installed: Version | None, culprit: Need | None) -> str:
    if culprit is not None:
        # The minimum comes from a neighbour that is newer than this package's tested range: going back
        # into the range always works; the neighbour's minimum may not be released yet.
        return (
            f"pip install '{culprit.requirement}' ({DISTRIBUTION}'s tested range), or pip install '{need.requirement}'"
        )
    if installed is None and need.package == "mergekit":
        return f"pip install '{DISTRIBUTION}[merge]'"
    return f"pip install '{need.requirement}'"


def check(feature: str, needs: list[Need], *, origin: str | None = None) -> None:
    """Raise :class:`IncompatibleStackError` for the first of ``needs`` the installed stack misses.

    Args:
        feature: what was asked for, as the user wrote it (``"peft: (LoRA)"``).
        needs: the packages in the order to check; a need whose ``source`` names another package
            (``"transformers 5.24.0"``) is blamed on that package when it is outside its declared range.
        origin: the recipe or config file, for the message.
    """
    for need in needs:
        version = installed_version(need.package)
        if version is not None and need.specifier.contains(version, prereleases=True):
            continue
        culprit = None
        if need.source != DISTRIBUTION:
            neighbour = declared(need.source.split()[0], need.extra)
            neighbour_version = installed_version(neighbour.package)
            if neighbour_version is not None and not neighbour.specifier.contains(neighbour_version, prereleases=True):
                culprit = neighbour
        have = f"{need.package} {version} is installed" if version is not None else f"{need.package} is not installed"
        where = f"{origin}: " if origin else ""
        raise IncompatibleStackError(
            f"{where}{feature} needs {need.requirement} ({need.source} requires it), but {have}; "
            f"fix: {_fix(need, version, culprit)}"
        )


def peft_needs() -> list[Need]:
    """LoRA: PEFT at least at the minimum the installed transformers accepts, and in the declared range.

    A transformers outside the ``lora`` extra's range is blamed (its fix is that range): transformers 5.22+
    refuses PEFT below 0.22, which core installs allow so that an environment without LoRA keeps them.
    """
    from transformers.integrations.peft import MIN_PEFT_VERSION

    transformers_version = metadata.version("transformers")
    return [
        Need("peft", SpecifierSet(f">={MIN_PEFT_VERSION}"), f"transformers {transformers_version}", extra="lora"),
        declared("peft", "lora"),
    ]


def quantization_needs() -> list[Need]:
    """k-bit loading (QLoRA): bitsandbytes, at least the release transformers' integration requires."""
    from transformers.utils import import_utils

    minimum = getattr(import_utils, "BITSANDBYTES_MIN_VERSION", None)
    specifier = SpecifierSet(f">={minimum}" if minimum else "")
    return [Need("bitsandbytes", specifier, f"transformers {metadata.version('transformers')}")]


def fsdp_needs(fsdp_version: int) -> list[Need]:
    """FSDP: torch new enough for the FSDP version accelerate will run (FSDP2 needs torch 2.6)."""
    from accelerate.utils.constants import FSDP2_PYTORCH_VERSION, FSDP_PYTORCH_VERSION

    # FSDP1's minimum carries a local label ("2.1.0.a0+32f93b1"), which a >= specifier cannot hold.
    minimum = Version(FSDP2_PYTORCH_VERSION if fsdp_version == 2 else FSDP_PYTORCH_VERSION).public
    return [Need("torch", SpecifierSet(f">={minimum}"), f"accelerate {metadata.version('accelerate')}")]


def deepspeed_needs() -> list[Need]:
    """DeepSpeed: the package, at least the release transformers' integration requires."""
    from transformers.dependency_versions_table import deps

    return [
        Need("deepspeed", Requirement(deps["deepspeed"]).specifier, f"transformers {metadata.version('transformers')}")
    ]


def require(module: str, *, extra: str, feature: str) -> ModuleType:
    """Import ``module``, a package that only the ``extra`` installs, or stop with one line naming the extra.

    The core install leaves out what only some paths use (numba's compiler for the curriculum solver and
    GUR's pair mining, matplotlib for figures: about 300 MB together), so such a path imports it here,
    when it runs, and a missing package is :class:`IncompatibleStackError` — ``FEATURE needs numba, which is
    not installed; fix: pip install 'hf-unified-embed[curriculum]'`` — never a traceback.
    """
    try:
        return importlib.import_module(module)
    except ImportError:
        raise IncompatibleStackError(
            f"{feature} needs {module}, which is not installed; fix: pip install '{DISTRIBUTION}[{extra}]'"
        ) from None


def mergekit_needs() -> list[Need]:
    """mergekit's merge methods: mergekit in the declared range (its kernels' API)."""
    return [declared("mergekit", "merge")]
