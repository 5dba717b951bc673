"""A launched worker ends with its run: when its launcher dies, ``kill -9`` included, or another node is lost.

``torchrun``, ``accelerate launch`` and ``python -m hf_unified_embed.cli.launch`` run an elastic agent that
starts the workers as its children, each in a process group of its own (so a Ctrl-C at the terminal reaches the
agent alone, which stops them). When the agent itself is killed, nothing stops them: a killed mining run
finished and wrote its output; on two nodes, a node whose agent was killed went on training with the other
to the end. So every worker of an elastic agent watches:

* **its agent** — the parent it was started by. The kernel's parent-death signal (``PR_SET_PDEATHSIG`` on
  Linux) wakes the watch the moment the parent goes; a thread that reads the parent's pid every
  :data:`AGENT_POLL_S` is the watch itself (the signal is tied to the parent *thread* that started the
  worker, and exists only on Linux), so a worker notices within a fraction of a second either way;
* **the other nodes**, on a run of several nodes: local rank 0 of every node counts a heartbeat every
  :data:`HEARTBEAT_S` in the run's own store (the ``TCPStore`` node 0's agent hosts for the workers at
  ``MASTER_ADDR:MASTER_PORT``), and reads the others'. A node whose count stands still for
  :data:`NODE_LOST_AFTER_S` (its agent and workers killed, the machine gone), or a store that does not
  answer as long (node 0 is gone), ends the run on this node too: a collective with the lost node fails
  (gloo: "Connection closed by peer"), but a node working on its own (rank 0 evaluating, writing the
  output) would not notice, and its agent would wait for the lost one at its exit. A node whose command
  returned says so and is not waited for; one whose command ended by an exception falls silent, and the
  others stop too. A worker beats once it has imported torch: a node lost before then is waited for
  :data:`NODE_START_GRACE_S`.

What the watch does on a loss is the caller's (:func:`hf_unified_embed.utils.processes.command_lifetime`
stops the command with one ``error:`` line). Outside an elastic agent's run (no ``TORCHELASTIC_RUN_ID``)
nothing is watched. Importing this module changes nothing; the watch reads the launcher's environment.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

#: How often a worker reads its parent's pid (the parent-death signal wakes it at once where there is one).
AGENT_POLL_S = 0.25
#: How often local rank 0 of each node of a run counts its heartbeat and reads the other nodes'.
HEARTBEAT_S = 1.0
#: A node whose heartbeat stands still this long is lost. Well above a beat: the beating thread needs
#: Python's interpreter lock, which a busy main thread hands over every few milliseconds.
NODE_LOST_AFTER_S = 6.0
#: How long one request to the run's store may take (connecting included) before it counts as unanswered.
STORE_REQUEST_S = 2.0
#: A node that has not beaten yet gets this long to start: its worker beats once it has imported torch, which
#: takes seconds, and nodes start their workers at about the same time (after their rendezvous).
NODE_START_GRACE_S = 60.0
#: Linux ``prctl`` option: the signal a process gets when the thread that started it ends.
_PR_SET_PDEATHSIG = 1
#: The parent-death signal: ignored by default, so a process that no longer watches is not ended by it, and
#: used by nothing else here (it reports out-of-band socket data).
WAKE_SIGNAL = signal.SIGURG
#: Added to a node's count when its command ends: a count this high is a node that is done, not lost.
_DONE = 1 << 40

#: What a watch calls with the reason when the run is lost (from a watch thread).
Stop = Callable[[str], None]


def launched_by_agent() -> bool:
    """Whether this process is a worker of an elastic agent (``torchrun``, ``accelerate launch``, the launcher)."""
    return "TORCHELASTIC_RUN_ID" in os.environ


def local_rank() -> int:
    """This worker's rank among the workers of its node (0 without a launcher)."""
    return int(os.environ.get("LOCAL_RANK", "0"))


class AgentWatch:
    """The watches of one command of a launched worker; :meth:`close` ends them (the command ended)."""

    def __init__(self, stop: Stop) -> None:
        self.stop = stop
        self.closed = threading.Event()
        self.woken = threading.Event()
        self.agent = os.getppid()
        self.nodes: NodeWatch | None = None
        self._previous_wake: Any = None

    def start(self) -> None:
        if self.agent == 1:  # reparented to init already: the agent died before this worker got here
            self.stop(_agent_lost(None))
            return
        self._ask_for_parent_death_signal()
        threading.Thread(target=self._watch_agent, name="watch-agent", daemon=True).start()
        if _several_nodes() and local_rank() == 0:
            self.nodes = NodeWatch(self.stop, self.closed)
            self.nodes.start()

    def close(self, finished: bool = True) -> None:
        """End the watches; ``finished``: this node's command ended (the other nodes are told so)."""
        self.closed.set()
        if self.nodes is not None:
            self.nodes.close(finished)
        if self._previous_wake is not None:
            _prctl(_PR_SET_PDEATHSIG, 0)
            signal.signal(WAKE_SIGNAL, self._previous_wake)

    def _ask_for_parent_death_signal(self) -> None:
        if threading.current_thread() is not threading.main_thread() or not sys.platform.startswith("linux"):
            return
        previous = signal.signal(WAKE_SIGNAL, lambda signum, frame: self.woken.set())
        if _prctl(_PR_SET_PDEATHSIG, int(WAKE_SIGNAL)):
            self._previous_wake = previous
        else:
            signal.signal(WAKE_SIGNAL, previous)

    def _watch_agent(self) -> None:
        while not self.closed.is_set():
            if os.getppid() != self.agent:
                self.stop(_agent_lost(self.agent))
                return
            if self.woken.wait(AGENT_POLL_S):  # the parent-death signal, or only the thread that forked ended
                self.woken.clear()


def _agent_lost(agent: int | None) -> str:
    which = "" if agent is None else f" (pid {agent})"
    return f"the launcher{which} of this worker ended; stopping the run's workers on this node"


def _prctl(option: int, value: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(option, value, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _several_nodes() -> bool:
    """A run of several nodes whose workers share the agents' store (torchrun's default, ``MASTER_ADDR``/``PORT``)."""
    return (
        int(os.environ.get("GROUP_WORLD_SIZE", "1")) > 1
        and os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
        and "MASTER_ADDR" in os.environ
        and "MASTER_PORT" in os.environ
    )


class NodeWatch:
    """Local rank 0's heartbeat in the run's store, and its watch of the other nodes' (several nodes only)."""

    commands = 0  # watched in this process so far

    def __init__(self, stop: Stop, closed: threading.Event) -> None:
        self.stop = stop
        self.closed = closed
        self.node = int(os.environ["GROUP_RANK"])
        self.nodes = int(os.environ["GROUP_WORLD_SIZE"])
        self.address = f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
        run = os.environ.get("TORCHELASTIC_RUN_ID", "")
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        # The nth command of each worker (a script may run several in one process) beats under keys of its own.
        NodeWatch.commands += 1
        self.prefix = f"hf_unified_embed/lifetime/{run}/{attempt}/{NodeWatch.commands}"
        self.store: Any = None
        self.lock = threading.Lock()  # the beating thread and close() share the store's one connection
        # torch is imported here, in the main thread, not in the watch's: an import racing the command's own
        # imports of the same modules could deadlock on their locks.
        from torch.distributed import TCPStore

        self._store_class = TCPStore

    def key(self, what: str, node: int) -> str:
        return f"{self.prefix}/{what}/{node}"

    def start(self) -> None:
        threading.Thread(target=self._watch, name="watch-nodes", daemon=True).start()

    def close(self, finished: bool) -> None:
        if not finished:
            return
        with self.lock, contextlib.suppress(Exception):  # a lost store: the others see this node go anyway
            store = self.store if self.store is not None else self._connect()
            store.add(self.key("beat", self.node), _DONE)

    def _connect(self) -> Any:
        host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
        timeout = timedelta(seconds=STORE_REQUEST_S)
        store = self._store_class(host, port, is_master=False, timeout=timeout, wait_for_workers=False)
        store.set(self.key("host", self.node), socket.gethostname())
        return store

    def _watch(self) -> None:
        started = answered = time.monotonic()
        seen: dict[int, tuple[int, float]] = {}  # node -> (its count, when it last changed)
        while not self.closed.is_set():
            try:
                with self.lock:
                    if self.closed.is_set():
                        return
                    if self.store is None:
                        self.store = self._connect()
                    self.store.add(self.key("beat", self.node), 1)
                    counts = {node: int(self.store.add(self.key("beat", node), 0)) for node in self._others()}
            except Exception as error:
                # The store lives in one node's agent: gone, that node is lost. Every agent uses the store
                # too and stops its workers when it does not answer (the package's launcher with one
                # `error:` line); this is the backstop should an agent not.
                self.store = None
                if time.monotonic() - answered > NODE_LOST_AFTER_S:
                    self.stop(self._store_lost(error))
                    return
                self.closed.wait(HEARTBEAT_S)
                continue
            now = answered = time.monotonic()
            for node, count in counts.items():
                if count >= _DONE:
                    continue
                before = seen.get(node)
                if before is None or before[0] != count:
                    seen[node] = (count, now) if count else (0, started)
                    continue
                if now - before[1] > (NODE_LOST_AFTER_S if count else NODE_START_GRACE_S):
                    self.stop(self._node_lost(node, now - before[1]))
                    return
            self.closed.wait(HEARTBEAT_S)

    def _others(self) -> Iterator[int]:
        return (node for node in range(self.nodes) if node != self.node)

    def _node_lost(self, node: int, silent_s: float) -> str:
        host = ""
        with contextlib.suppress(Exception), self.lock:
            if self.store.check([self.key("host", node)]):
                host = f" (host {self.store.get(self.key('host', node)).decode()})"
        return f"node {node}{host} of the run was lost: no heartbeat for {silent_s:.0f} s; stopping this node too"

    def _store_lost(self, error: BaseException) -> str:
        cause = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        # torchrun's agent of node 0 hosts the store its workers share (MASTER_ADDR:MASTER_PORT).
        return (
            f"node 0 of the run was lost: the run's store it hosts at {self.address} has not answered for "
            f"{NODE_LOST_AFTER_S:.0f} s ({cause[:200]}); stopping this node too"
        )


@contextlib.contextmanager
def watching_the_run(stop: Stop) -> Iterator[AgentWatch | None]:
    """Watch this worker's agent and the run's other nodes while the block runs (nothing outside a launched run)."""
    if not launched_by_agent():
        yield None
        return
    watch = AgentWatch(stop)
    watch.start()
    finished = False
    try:
        yield watch
        finished = True
    finally:
        # A command that ended by an exception (a bug, a stop) leaves its heartbeat to stand still: the other
        # nodes end the run too, also those that would not meet this node in a collective again.
        watch.close(finished)
