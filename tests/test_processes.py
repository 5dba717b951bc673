"""``utils.processes``: which process this is, and closing the process group before the interpreter exits."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from hf_unified_embed.utils.processes import end_process_group, is_main_process, world_size


@pytest.mark.parametrize(("env", "rank0", "size"), [({}, True, 1), ({"RANK": "1", "WORLD_SIZE": "2"}, False, 2)])
def test_the_launchers_environment_names_the_process(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], rank0: bool, size: int
) -> None:
    for name in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert (is_main_process(), world_size()) == (rank0, size)


def test_without_a_process_group_nothing_happens() -> None:
    import torch.distributed as dist

    assert not dist.is_initialized()
    end_process_group()
    assert not dist.is_initialized()


def test_an_open_process_group_is_closed() -> None:
    """In a fresh interpreter (a group left open would outlive the test): a gloo group of one process is
    open after ``init_process_group`` and closed after ``end_process_group``; the process then exits 0."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    script = (
        "import torch.distributed as dist\n"
        "from hf_unified_embed.utils.processes import end_process_group\n"
        f"dist.init_process_group('gloo', init_method='tcp://127.0.0.1:{port}', rank=0, world_size=1)\n"
        "assert dist.is_initialized()\n"
        "end_process_group()\n"
        "assert not dist.is_initialized()\n"
        "print('closed')\n"
    )
    completed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert completed.stdout.strip() == "closed"


_QUIET = """
import os, warnings
import datasets, huggingface_hub.utils, transformers.utils.logging
from hf_unified_embed.utils.processes import quiet_progress_bars
before = dict(os.environ)
with warnings.catch_warnings():
    warnings.simplefilter("error")  # a warning would be printed by every process but rank 0
    quiet_progress_bars()
print(
    transformers.utils.logging.is_progress_bar_enabled(),
    datasets.is_progress_bar_enabled(),
    huggingface_hub.utils.are_progress_bars_disabled(),
    dict(os.environ) == before,
)
"""


@pytest.mark.parametrize(
    ("env", "shown"),
    [({}, "False False True True"), ({"HF_HUB_DISABLE_PROGRESS_BARS": "0"}, "False False False True")],
)
def test_quiet_progress_bars_turns_off_the_libraries_bars_and_leaves_the_environment(
    env: dict[str, str], shown: str
) -> None:
    """In a fresh interpreter (the libraries' bars are process state): transformers', datasets' and the Hub's
    bars are off, the environment unchanged; a user who forced the Hub's bars on keeps those, and no warning."""
    environment = {k: v for k, v in os.environ.items() if not k.endswith("_DISABLE_PROGRESS_BARS")}
    result = subprocess.run(
        [sys.executable, "-c", _QUIET], capture_output=True, text=True, timeout=120, env={**environment, **env}
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == shown.split()
