"""Checks run on headers before any tensor data is read, and on each tensor as it streams by."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import torch

from hf_unified_embed.errors import MergeError, shown
from hf_unified_embed.merge.loader import LazyCheckpoint
from hf_unified_embed.merge.methods.merge_method import MergeMethod


def is_mergeable(dtype: torch.dtype) -> bool:
    """Floating-point tensors are merged; integer and bool buffers (position ids…) are copied."""
    return dtype.is_floating_point


def check_compatible(reference: LazyCheckpoint, others: Sequence[LazyCheckpoint]) -> None:
    """Same architecture, same tensor names, shapes and dtypes, same vocabulary as ``reference``."""
    ref_arch = reference.architecture()
    ref_vocab = reference.vocabulary_fingerprint()
    ref_names = set(reference.names)
    for other in others:
        if other is reference:
            continue
        arch = other.architecture()
        for key in sorted(set(ref_arch) | set(arch)):
            if ref_arch.get(key) != arch.get(key):
                raise MergeError(
                    f"{other.path}: different architecture from the reference {reference.path}: "
                    f"{key} is {shown(arch.get(key))}, expected {shown(ref_arch.get(key))}"
                )
        vocab = other.vocabulary_fingerprint()
        for file in sorted(set(ref_vocab) & set(vocab)):
            if ref_vocab[file] != vocab[file]:
                raise MergeError(
                    f"{other.path}: tokenizer vocabulary ({file}) differs from the reference {reference.path}"
                )
        # Integer buffers such as ``embeddings.position_ids`` are saved by some transformers versions
        # and not by others; they are copied from the reference, never merged, so they may differ.
        shared = ref_names & set(other.names)
        names = {name for name in other.names if is_mergeable(other.info(name).dtype)} | shared
        expected_names = {name for name in ref_names if is_mergeable(reference.info(name).dtype)} | shared
        if missing := sorted(expected_names - names):
            raise MergeError(
                f"{other.path}: tensor {shown(missing[0])} is missing (present in the reference {reference.path})"
            )
        if extra := sorted(names - expected_names):
            raise MergeError(f"{other.path}: extra tensor {shown(extra[0])} (not in the reference {reference.path})")
        for name in sorted(shared):
            expected, found = reference.info(name), other.info(name)
            if expected.shape != found.shape:
                raise MergeError(
                    f"{other.file_of(name)}: tensor {shown(name)} has shape {list(found.shape)}, "
                    f"expected {list(expected.shape)} as in {reference.file_of(name)}"
                )
            if expected.dtype != found.dtype:
                raise MergeError(
                    f"{other.file_of(name)}: tensor {shown(name)} has dtype {found.dtype}, "
                    f"expected {expected.dtype} as in {reference.file_of(name)}"
                )


def all_finite(tensor: torch.Tensor) -> bool:
    """Whether a floating-point tensor holds no NaN or ±inf.

    Any NaN/inf makes the sum non-finite, and a sum in the tensor's own dtype is one fast pass
    with no allocation; only a non-finite sum (which may be a mere overflow) needs the exact mask.
    """
    return math.isfinite(float(tensor.sum())) or bool(torch.isfinite(tensor).all())


def check_finite(tensor: torch.Tensor, name: str, source: Path | str) -> torch.Tensor:
    """Raise if a floating-point tensor holds NaN or ±inf; returns the tensor."""
    if tensor.is_floating_point() and not all_finite(tensor):
        bad = int((~torch.isfinite(tensor)).sum())
        raise MergeError(f"{source}: tensor {shown(name)} holds {bad} NaN/inf value(s)")
    return tensor


def check_nonnegative_weights(method: MergeMethod) -> None:
    """Refuse a negative averaging weight (:attr:`MergeMethod.averaging_weights`): the merge would
    extrapolate rather than average, which takes ``allow_negative_weights`` (``--allow-negative-weights``)."""
    if negative := method.negative_weights():
        raise MergeError(
            f"{method.name}: {negative[0]} is negative, and {method.name} averages its models; "
            "to extrapolate, pass --allow-negative-weights (config: allow_negative_weights: true)"
        )
