"""One-step probes of ``bench/step.py``, each a trainer callback over one optimizer step after the timed ones
(they slow the step they watch): ``torch.profiler``'s table, and the operators that read a value on the host."""

from __future__ import annotations

import resource
from typing import Any


def peak_mb(device: str) -> float:
    """The process's peak memory so far: allocated on the GPU, or resident on the CPU (MiB)."""
    import torch

    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def step_profiler(step: int, device: str) -> Any:
    """A trainer callback that runs ``torch.profiler`` over optimizer step ``step`` (0-based) and keeps its table:
    on CUDA GPU kernel time against host time, sorted both ways (the kernels that fill the GPU, and the
    operators whose launching fills the host); on the CPU the host's operators. ``peak_before``: the process's
    peak memory when that step began."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    from transformers import TrainerCallback

    cuda = device.startswith("cuda")

    class OneStep(TrainerCallback):
        def __init__(self) -> None:
            self.profiler: Any = None
            self.table = ""
            self.peak_before = float("nan")

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.global_step == step:
                self.peak_before = peak_mb(device)
                activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]
                self.profiler = profile(activities=activities)
                self.profiler.__enter__()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self.profiler is not None and not self.table:
                if cuda:
                    torch.cuda.synchronize()
                self.profiler.__exit__(None, None, None)
                events = self.profiler.key_averages()
                host = sum(event.self_cpu_time_total for event in events) / 1e3
                kernels = sum(event.self_device_time_total for event in events) / 1e3
                self.table = "\n".join(
                    [
                        f"one step: GPU kernels {kernels:.1f} ms, host {host:.1f} ms"
                        if cuda
                        else f"one step: host {host:.1f} ms",
                        *([events.table(sort_by="self_cuda_time_total", row_limit=12)] if cuda else []),
                        events.table(sort_by="self_cpu_time_total", row_limit=15),
                    ]
                )

    return OneStep()


def step_reads(step: int, device: str) -> Any:
    """A trainer callback that records, over optimizer step ``step`` (0-based), every operator whose result the
    host reads (``hf_unified_embed.training.host_reads``: on a GPU each waits for the kernels queued before it).
    ``reads``: the records; ``peak_before``: the process's peak memory when that step began."""
    from transformers import TrainerCallback

    from hf_unified_embed.training.host_reads import HostReads

    class OneStepReads(TrainerCallback):
        def __init__(self) -> None:
            self.reads = HostReads()
            self.watching = False
            self.peak_before = float("nan")

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.global_step == step:
                self.peak_before = peak_mb(device)
                self.reads.__enter__()
                self.watching = True

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self.watching:
                self.reads.__exit__(None, None, None)
                self.watching = False

    return OneStepReads()
