"""A launched run ends with its launcher: ``kill -9``, Ctrl-C or ``kill`` of the launcher (the package's, plain
``torchrun``, ``accelerate launch``) at a drawn moment of each launched command, and of one node's agent of a run
on two nodes, leaves no process of the run alive 10 s after that launcher ended, and no output written as if the
run had finished.

For each command (``mine-negatives``, ``evaluate``, ``train`` with its data in memory and streamed, ``merge``
with a search, ``curriculum``), hypothesis draws the launcher, the signal and the moment, counted from when
both workers' command began. Then:

* ``kill -9``: every worker ends (it watches its launcher), and one ``error:`` line says why;
* Ctrl-C (to the launcher's process group, as a terminal sends it) or ``kill``: the package's launcher prints
  ``interrupted`` once, no traceback, and exits 130 / 143;
* the output is absent, or whole and written before the fault (a run that went on after it would write later).

Two nodes are two agents on this machine (``--nnodes=2``, c10d rendezvous, gloo on the loopback address); one
node's agent gets the signal, and the other node ends too: with the package's launcher, with one ``error:``
line naming the lost node (or its store) and exit code 2, unless its run had finished. The moment is drawn
after both workers have loaded torch (their heartbeat starts then; a node lost before its first heartbeat is
waited for longer, as a slow start).

CI runs one example per command and two for two nodes; ``FAULT_EXAMPLES=N`` runs N times as many.
"""

from __future__ import annotations

import gc
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from _fault_runs import Fault, LaunchOutcome, command_env, run_launched
from _output_project import COMMANDS, project_template
from _processes import free_port
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from hf_unified_embed.utils import agent_watch
from hf_unified_embed.utils.agent_watch import HEARTBEAT_S, NODE_LOST_AFTER_S
from hf_unified_embed.utils.output_manifest import not_written_by_tool, written_by_tool

REPO = Path(__file__).resolve().parent.parent
ACCELERATE_CONFIG = REPO / "examples" / "accelerate" / "multi_cpu.yaml"
SCALE = max(1, int(os.environ.get("FAULT_EXAMPLES", "1")))
#: Seconds within which a moment is drawn, from when both workers' command began: about the rest of the run on
#: a quiet two-core machine (imports, the gloo group, a step or two); a moment past the end draws no fault.
WINDOW_S = {
    "mine-negatives": 12.0,
    "evaluate": 12.0,
    "train": 16.0,
    "train-stream": 16.0,
    "merge-search": 16.0,
    "curriculum": 14.0,
}
#: A file of the output may be written this long after the fault: the worker notices a lost launcher within a
#: quarter of a second, and the output being committed then is whole.
WRITTEN_AFTER_S = 3.0
SIGNALS = ("SIGKILL", "SIGINT", "SIGTERM")


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory, tiny_model_path: str) -> Iterator[Path]:
    with project_template(tmp_path_factory.mktemp("launch-faults"), tiny_model_path) as project:
        recipe = yaml.safe_load((project / "recipe.yaml").read_text())
        recipe["data"]["streaming"] = True
        del recipe["data"]["max_rows_per_task"]
        (project / "recipe-stream.yaml").write_text(yaml.safe_dump(recipe))
        search = {
            "method": "slerp",
            "models": ["model", "model2"],
            "search": {"suite": "suite.yaml", "parameters": {"t": [0.25, 0.75]}, "objective": {"stsb": 1.0}},
        }
        (project / "search.yaml").write_text(yaml.safe_dump(search))
        yield project


def argv_of(command: str, output: str) -> list[str]:
    if command == "train-stream":
        return ["train", "recipe-stream.yaml", "-o", output]
    if command == "merge-search":
        return ["merge", "search.yaml", "-o", output, "--no-progress"]
    return COMMANDS[command][0](output)


def launcher(kind: str, argv: list[str], nodes: str = "") -> list[str]:
    """The command line of ``kind`` (``launch``: the package's; ``torchrun``; ``accelerate``) for two workers."""
    python = sys.executable
    if kind == "accelerate":
        port = ["--main_process_port", str(free_port())]
        return [python, "-m", "accelerate.commands.launch", "--config_file", str(ACCELERATE_CONFIG), *port, "-m", "hf_unified_embed", *argv]  # fmt: skip
    head = (
        [python, "-m", "hf_unified_embed.cli.launch"] if kind == "launch" else [python, "-m", "torch.distributed.run"]
    )
    module = [] if kind == "launch" else ["-m", "hf_unified_embed"]
    where = nodes.split() if nodes else ["--nproc_per_node=2", f"--master_port={free_port()}"]
    return [*head, *where, *module, *argv]


def environment(folder: Path) -> dict[str, str]:
    return {**command_env(folder / "cache"), "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}


def written_at(output: Path) -> float:
    """When the output's last file was written (a commit renames its folder; its files keep their times)."""
    if output.is_file():
        return output.stat().st_mtime
    return max(path.stat().st_mtime for path in output.rglob("*") if path.is_file())


def check_output(output: Path, outcome: LaunchOutcome, what: str, late_s: float) -> None:
    if not output.exists():
        return
    assert written_by_tool(output), f"{what}: a half-written output: {not_written_by_tool(output)}"
    if outcome.faulted_at is not None:
        late = written_at(output) - outcome.faulted_at
        assert late < late_s, f"{what}: the output was written {late:.1f} s after the fault: the run went on"


def lines_of(err: str, prefix: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith(prefix)]


def check_single_node(kind: str, fault: Fault, outcome: LaunchOutcome, what: str) -> None:
    (code,), (err,) = outcome.codes, outcome.errs
    tail = err[-4000:]
    assert not outcome.leftovers, f"{what}: processes outlived the launcher: {outcome.leftovers}\n{tail}"
    if outcome.faulted_at is None:
        assert code == 0, f"{what}: ended before its moment with {code}\n{tail}"
        return
    if fault.kind == "SIGKILL":
        assert code == -9, f"{what}: exit code {code}\n{tail}"
        assert "Traceback" not in err, f"{what}: a worker's traceback\n{tail}"
        # The workers say once why they stop, unless they had ended already.
        assert len(lines_of(err, "error: the launcher")) <= 1, f"{what}: not one error line\n{tail}"
        assert lines_of(err, "error:") == lines_of(err, "error: the launcher"), f"{what}: another error\n{tail}"
    elif kind == "launch":
        expected = {"SIGINT": 130, "SIGTERM": 143}[fault.kind]
        assert code in (0, expected), f"{what}: exit code {code}\n{tail}"
        assert "Traceback" not in err, f"{what}: a traceback\n{tail}"
        if code == expected:
            assert err.splitlines()[-1] == "interrupted" and err.count("interrupted") == 1, f"{what}\n{tail}"
    else:  # torchrun's and accelerate's own report of a signal is theirs; the workers end all the same
        assert code != 0 or "interrupted" not in err, f"{what}: exit code {code}\n{tail}"


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("command", list(WINDOW_S))
def test_a_launched_run_ends_with_its_launcher(template: Path, command: str) -> None:
    @settings(max_examples=SCALE, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(
        kind=st.sampled_from(["launch", "torchrun", "accelerate"]),
        fault=st.builds(Fault, st.sampled_from(SIGNALS), st.floats(0.0, WINDOW_S[command])),
    )
    def search(kind: str, fault: Fault) -> None:
        with tempfile.TemporaryDirectory(dir=template.parent) as folder:
            project = Path(shutil.copytree(template, Path(folder) / "project", symlinks=True))
            output = project / ("out.json" if command == "evaluate" else "out")
            what = f"{command} under {kind} with {fault}"
            outcome = run_launched(
                [launcher(kind, argv_of(command, output.name))], project, environment(Path(folder)), fault
            )
            note(f"{what}: exit codes {outcome.codes}")
            check_single_node(kind, fault, outcome, what)
            check_output(output, outcome, what, WRITTEN_AFTER_S)

    search()


def two_nodes(kind: str, argv: list[str]) -> list[list[str]]:
    port = free_port()
    return [
        launcher(
            kind,
            argv,
            f"--nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:{port} "
            f"--rdzv_id=lifetime-{port} --node_rank={node} --local_addr=127.0.0.1",
        )
        for node in (0, 1)
    ]


@pytest.mark.slow
@pytest.mark.multiprocess
def test_a_lost_node_ends_the_run_on_every_node(template: Path) -> None:
    @settings(max_examples=2 * SCALE, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(
        kind=st.sampled_from(["launch", "torchrun"]),
        command=st.sampled_from(["train", "mine-negatives"]),
        victim=st.sampled_from([0, 1]),
        fault=st.builds(Fault, st.sampled_from(SIGNALS), st.floats(0.0, 8.0)),
    )
    def search(kind: str, command: str, victim: int, fault: Fault) -> None:
        with tempfile.TemporaryDirectory(dir=template.parent) as folder:
            project = Path(shutil.copytree(template, Path(folder) / "project", symlinks=True))
            output = project / "out"
            what = f"{command} on two nodes under {kind}, node {victim} with {fault}"
            outcome = run_launched(
                two_nodes(kind, argv_of(command, output.name)),
                project,
                environment(Path(folder)),
                fault,
                victim=victim,
                workers=1,
                after_torch_s=3 * HEARTBEAT_S,
            )
            note(f"{what}: exit codes {outcome.codes}")
            tails = "\n".join(f"--- node {node}:\n{err[-3000:]}" for node, err in enumerate(outcome.errs))
            assert not outcome.leftovers, f"{what}: processes outlived their agent: {outcome.leftovers}\n{tails}"
            survivor = 1 - victim
            code, err = outcome.codes[survivor], outcome.errs[survivor]
            if outcome.faulted_at is not None and kind == "launch":
                assert code in (0, 2), f"{what}: the other node exited with {code}\n{tails}"
                assert "Traceback" not in err, f"{what}: a traceback on the other node\n{tails}"
                if code == 2:
                    errors = lines_of(err, "error:")
                    assert len(errors) == 1, f"{what}: not one error line on the other node\n{tails}"
                    lost = re.match(rf"error: node {victim}( \(host [^)]*\))? of the run was lost", errors[0])
                    assert lost or "rendezvous store" in errors[0], f"{what}: {errors[0]}"
            # A survivor stops within a heartbeat's silence of the loss, before a run would have ended.
            check_output(output, outcome, what, NODE_LOST_AFTER_S + 2 * HEARTBEAT_S + WRITTEN_AFTER_S)

    search()


# --- the heartbeat of the nodes, against a real store -----------------------------------------------------------


@pytest.fixture
def fast_heartbeat(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """A real ``TCPStore`` (in a list: a test may drop it) as node 0's agent hosts it, the environment torchrun gives a worker of node ``GROUP_RANK``
    of three, and a heartbeat ten times as fast."""
    from torch.distributed import TCPStore

    servers = [TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)]  # the list alone holds it
    monkeypatch.setattr(agent_watch, "HEARTBEAT_S", 0.1)
    monkeypatch.setattr(agent_watch, "NODE_LOST_AFTER_S", 1.0)
    monkeypatch.setattr(agent_watch, "STORE_REQUEST_S", 0.5)
    for name, value in {
        "GROUP_WORLD_SIZE": "3", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(servers[0].port),
        "TORCHELASTIC_RUN_ID": "beats", "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_USE_AGENT_STORE": "True",
    }.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    yield servers


def _beat(store: Any, node: int, count: int = 1) -> None:
    store.add(f"hf_unified_embed/lifetime/beats/0/{agent_watch.NodeWatch.commands}/beat/{node}", count)


def _watch_until_stopped(node: int, during: Callable[[], None]) -> list[str]:
    os.environ["GROUP_RANK"] = str(node)
    stops: list[str] = []
    closed = threading.Event()
    watch = agent_watch.NodeWatch(stops.append, closed)
    watch.start()
    try:
        during()
        deadline = time.monotonic() + 30
        while not stops and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        closed.set()
    return stops


def test_a_silent_node_is_lost_and_a_finished_one_is_not(
    fast_heartbeat: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GROUP_RANK", "0")
    store = fast_heartbeat[0]
    store.set(f"hf_unified_embed/lifetime/beats/0/{agent_watch.NodeWatch.commands + 1}/host/2", "node-two")

    def two_nodes_beat_then_one_finishes_and_one_falls_silent() -> None:
        for _ in range(10):
            _beat(store, 1)
            _beat(store, 2)
            time.sleep(0.1)
        _beat(store, 1, agent_watch._DONE)  # node 1's command ended: it beats no more

    started = time.monotonic()
    stops = _watch_until_stopped(0, two_nodes_beat_then_one_finishes_and_one_falls_silent)
    assert len(stops) == 1 and stops[0].startswith("node 2 (host node-two) of the run was lost"), stops
    assert time.monotonic() - started < 10


def test_a_store_that_does_not_answer_is_node_0_lost(
    fast_heartbeat: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GROUP_RANK", "1")

    def node_0_goes() -> None:
        for _ in range(5):
            _beat(fast_heartbeat[0], 0)
            _beat(fast_heartbeat[0], 2)
            time.sleep(0.1)
        fast_heartbeat.clear()  # the agent of node 0 hosted the store: it is gone with it
        gc.collect()

    stops = _watch_until_stopped(1, node_0_goes)
    assert len(stops) == 1 and stops[0].startswith("node 0 of the run was lost: the run's store"), stops


def test_nothing_is_watched_outside_a_launched_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    before = dict(os.environ)
    with agent_watch.watching_the_run(lambda reason: pytest.fail(reason)) as watch:
        assert watch is None
    assert dict(os.environ) == before
