"""Training-argument settings that follow the device a run trains on."""

from __future__ import annotations

from typing import Any


def device_training_args(device: str | None = None) -> dict[str, Any]:
    """``SentenceTransformerTrainingArguments`` settings for training on ``device``.

    Pinned host memory only speeds up copies to a CUDA device; transformers pins by default, and on a
    machine without an accelerator torch then warns at every dataloader ("'pin_memory' argument is set
    as true but no accelerator is found"). So ``dataloader_pin_memory`` is on only for CUDA, and an
    explicit ``"cpu"`` also sets ``use_cpu`` so that a CUDA machine trains on the CPU as asked.

    Args:
        device: ``"cpu"``, ``"cuda"``, ``"cuda:N"``, or ``None`` for what transformers picks (CUDA when
            available).

    Example::

        args = SentenceTransformerTrainingArguments(output_dir="out", **device_training_args())
    """
    import torch

    on_cpu = device is not None and str(device).startswith("cpu")
    settings: dict[str, Any] = {"dataloader_pin_memory": torch.cuda.is_available() and not on_cpu}
    if on_cpu:
        settings["use_cpu"] = True
    return settings
