"""Training-argument settings that follow the device a run trains on: the fastest correct step by default."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from hf_unified_embed.utils.arguments import checked_arguments

#: Most dataloader workers chosen by default: the collator draws texts and tokenises one batch per call.
#: More did not shorten the wait for a batch (bench/step.py on an H100 and an H200, docs/training.md):
#: all-MiniLM-L6-v2 at 128 rows waited 28-30 ms per step with 2 workers, 34 ms with 4, 31-41 ms with 8 (37-44
#: with 8 and no pinned memory; the same for stock sentence-transformers), 52-85 ms with none; BERT-base at 64
#: rows 13 ms with 4 or 8. Each worker beyond that only takes memory and cores from the training process.
#: Those waits were the workers' restart at each of the bundled sample's short epochs: with workers that
#: persist (the default since) the mean at 128 rows was 16-20 ms and every median about 1 ms (H200).
MAX_DEFAULT_WORKERS = 4

#: Models with fewer parameters get no bf16 default. Their GPU step is bound by the host launching a few hundred
#: small kernels, not by the arithmetic, and autocast only adds a cast before every matmul: all-MiniLM-L6-v2
#: (22.7M) at the shipped recipe's 16 rows took 1.2-1.7x float32's step time with bf16 on an H100 and an H200,
#: and 1.00x with every other default (TF32, workers, pinned memory); BERT-base (110M) at 64 rows took 0.52-0.56x
#: with it (bench/step.py, docs/training.md). The small / base divide of embedding models (MiniLM, bge-small
#: and e5-small at 22-33M; BERT-base, MPNet and bge-base at ~110M) falls between them.
BF16_MIN_PARAMETERS = 50_000_000


@checked_arguments
def device_training_args(
    device: str | None = None, *, explicit: Mapping[str, Any] | None = None, parameters: int | None = None
) -> dict[str, Any]:
    """``SentenceTransformerTrainingArguments`` settings for training on ``device``.

    On CUDA:

    * ``bf16=True`` (bfloat16 autocast; the weights and the optimizer stay float32) where the GPU computes
      bfloat16 natively (``torch.cuda.is_bf16_supported(including_emulation=False)``: Ampere and newer,
      and ROCm), for a model of at least :data:`BF16_MIN_PARAMETERS` parameters (a smaller one trains
      faster in float32 with TF32: its step is bound by launching kernels, which autocast only adds to).
      Not when the launcher set the precision (``ACCELERATE_MIXED_PRECISION``, which ``accelerate
      launch`` always exports: its ``mixed_precision`` decides), nor when ``explicit`` turns on ``fp16``;
    * ``tf32=True`` (float32 matmuls on TF32 tensor cores) on CUDA GPUs of compute capability 8 or more,
      as transformers requires;
    * ``dataloader_pin_memory=True`` and ``dataloader_num_workers``: one fewer than the CPU cores this
      process may use per process on the node (``LOCAL_WORLD_SIZE``), at most
      :data:`MAX_DEFAULT_WORKERS`, so the collator's drawing and tokenising overlap the GPU step.

    On the CPU nothing of this is set: transformers' defaults stay (float32, no workers, which would take
    cores from the step), except that memory is not pinned — pinning only speeds up copies to a CUDA
    device, and without one torch warns at every dataloader. An explicit ``"cpu"`` also sets
    ``use_cpu`` so that a CUDA machine trains on the CPU as asked.

    On any device, wherever the run has dataloader workers (these defaults' or the caller's),
    ``dataloader_persistent_workers=True``: workers that end with each epoch are started again for the
    next, and the first batches of every epoch wait for them (sentence-transformers warns of the same
    for spawned workers). The collator's per-epoch draws reach persistent workers through shared memory
    (:meth:`~hf_unified_embed.training.UnifiedDataCollator.share_epoch`).

    The caller's own settings win: merge them over the result (``{**device_training_args(), **mine}``)
    and pass them as ``explicit`` so that no default conflicts with them (``fp16: true`` and a default
    ``bf16`` cannot both be set; ``use_cpu: true`` means the CPU).

    Args:
        device: ``"cpu"``, ``"cuda"``, ``"cuda:N"``, or ``None`` for what transformers picks (CUDA when
            available).
        explicit: the training arguments the caller sets itself.
        parameters: the model's number of parameters, where known (``None``: taken as large enough for bf16).

    Example::

        mine = {"per_device_train_batch_size": 64}
        args = SentenceTransformerTrainingArguments(
            output_dir="out", **device_training_args(explicit=mine), **mine
        )
    """
    import torch

    explicit = explicit or {}
    on_cpu = explicit.get("use_cpu") is True or (device is not None and str(device).startswith("cpu"))
    cuda = torch.cuda.is_available() and not on_cpu
    settings: dict[str, Any] = {"dataloader_pin_memory": cuda}
    if on_cpu:
        settings["use_cpu"] = True
    if not cuda:
        return {**settings, **_persistent(explicit.get("dataloader_num_workers", 0))}
    # The current device, as transformers checks bf16 and tf32 against it (the trainer's device).
    bf16 = torch.cuda.is_bf16_supported(including_emulation=False)
    major, _ = torch.cuda.get_device_capability()
    launcher_precision = "ACCELERATE_MIXED_PRECISION" in os.environ
    small = parameters is not None and parameters < BF16_MIN_PARAMETERS
    if bf16 and not small and not launcher_precision and not explicit.get("fp16"):
        settings["bf16"] = True
    if torch.version.cuda is not None and major >= 8:
        settings["tf32"] = True
    workers = default_dataloader_workers()
    if workers:
        settings["dataloader_num_workers"] = workers
    return {**settings, **_persistent(explicit.get("dataloader_num_workers", workers))}


def _persistent(workers: int) -> dict[str, bool]:
    """Workers kept from one epoch to the next, where there are workers (torch refuses the setting without)."""
    return {"dataloader_persistent_workers": True} if workers else {}


def default_dataloader_workers() -> int:
    """Dataloader workers for a GPU process: the cores it may use, shared by the processes of its node, less one."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    per_process = cores // max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    return max(0, min(MAX_DEFAULT_WORKERS, per_process - 1))


def process_device(device: str | None = None) -> str | None:
    """The device of this process of a launched run: ``cuda:LOCAL_RANK`` for ``None`` or ``"cuda"`` where
    CUDA is available and the launcher started several processes on this node, ``device`` otherwise.

    ``train`` leaves this to accelerate; commands that only encode (``mine-negatives``, ``evaluate``) place
    their model with it, so that the processes of a node each encode on their own GPU.

    Args:
        device: the device asked for (``None``: the default one).

    Returns:
        The device to load the model on (``None``: sentence-transformers' default).
    """
    import torch

    local_processes = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    if local_processes <= 1 or device not in (None, "cuda") or not torch.cuda.is_available():
        return device
    return f"cuda:{int(os.environ.get('LOCAL_RANK', '0')) % torch.cuda.device_count()}"
