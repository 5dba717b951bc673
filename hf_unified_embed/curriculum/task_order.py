"""Task-level curriculum: the training order of tasks as a travelling-salesman tour (Data-CUBE §4.2.2).

The objective is Eq. 6, the cyclic sum of the similarities of neighbouring tasks, to be *maximised*.
Three solvers share one entry point, :func:`solve_task_order`:

* ``"annealing"`` — the paper's simulated annealing (Algorithm 1, lines 1–12): random swap of two
  tasks, accept when the score rises, otherwise with probability ``exp(Δ / T)`` (Δ = new − old < 0),
  geometric cooling ``T ← α·T``. Each move costs O(1): only the four edges around the two swapped
  positions change, so Δ is computed from them instead of re-summing Eq. 6 (O(m)). The loop is
  compiled with numba. By default the best tour seen is then polished with 2-opt.
* ``"two_opt"`` — 2-opt local search (reverse a segment while that raises the score) from a random
  or given tour.
* ``"exact"`` — Held–Karp dynamic programming, O(2^m·m²); for up to :data:`MAX_EXACT_TASKS` tasks.
  Used to check that the heuristics find the optimum.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from hf_unified_embed.errors import shown
from hf_unified_embed.utils.stack import require

# Compiled with numba, which only the curriculum extra installs (with llvmlite, ~200 MB).
numba = require("numba", extra="curriculum", feature="the curriculum planner's task-order solver")

Method = Literal["annealing", "two_opt", "exact"]
METHODS: tuple[str, ...] = ("annealing", "two_opt", "exact")

#: Held–Karp keeps 2^(m−1)·m scores; 13 tasks is 53k states, well under a second.
MAX_EXACT_TASKS = 13
#: With the automatic cooling rate the temperature falls by this factor over the whole run.
FINAL_TEMPERATURE_RATIO = 1e-4
#: Points kept in the annealing trace (the score is sampled evenly over the iterations).
TRACE_POINTS = 1_000


@dataclass(frozen=True)
class TaskOrder:
    """The result of :func:`solve_task_order`.

    Attributes:
        order: task indices (rows of the similarity matrix) in tour order; the tour is cyclic.
        score: Eq. 6 of ``order`` — the sum of the similarities of neighbouring tasks, last→first included.
        method: the solver used.
        trace: ``(k, 2)`` array of ``(step, score)``: for annealing, the current tour's score every
            ``iterations / 1000`` moves (then one row per improving 2-opt move when polishing, the
            step continuing the count); for 2-opt, one row per improving move; for exact, one row.
        parameters: the solver settings actually used (resolved automatic temperature and cooling).
    """

    order: np.ndarray
    score: float
    method: str
    trace: np.ndarray
    parameters: dict[str, Any] = field(default_factory=dict)


def tour_score(similarity: np.ndarray, order: np.ndarray | list[int]) -> float:
    """Eq. 6: ``Σ_i sim(o_i, o_{i+1}) + sim(o_m, o_1)`` for a cyclic tour."""
    tour = np.asarray(order)
    if tour.size < 2:
        return 0.0
    return float(np.asarray(similarity)[tour, np.roll(tour, -1)].sum())


@numba.njit(cache=True)
def _swap_delta(similarity: np.ndarray, order: np.ndarray, i: int, j: int) -> float:
    """Change of Eq. 6 when the tasks at positions ``i`` and ``j`` swap, from the ≤ 4 edges that change."""
    m = order.shape[0]
    if i == j:
        return 0.0
    if i > j:
        i, j = j, i
    a = order[i]
    b = order[j]
    if j == i + 1 or (i == 0 and j == m - 1):
        # Neighbours: with ``first`` directly before ``second`` in the cycle, only the two outer edges change.
        if j == i + 1:
            before, first, second, after = order[i - 1], a, b, order[(j + 1) % m]
        else:
            before, first, second, after = order[j - 1], b, a, order[1]
        if before == second:  # m == 2: the tour is the same either way
            return 0.0
        return (
            similarity[before, second]
            + similarity[first, after]
            - similarity[before, first]
            - similarity[second, after]
        )
    pa, na = order[i - 1], order[i + 1]
    pb, nb = order[j - 1], order[(j + 1) % m]
    old = similarity[pa, a] + similarity[a, na] + similarity[pb, b] + similarity[b, nb]
    new = similarity[pa, b] + similarity[b, na] + similarity[pb, a] + similarity[a, nb]
    return new - old


@numba.njit(cache=True)
def _anneal(
    similarity: np.ndarray,
    order: np.ndarray,
    iterations: int,
    initial_temperature: float,
    cooling_rate: float,
    seed: int,
    trace_every: int,
) -> tuple[np.ndarray, float, float, np.ndarray]:
    np.random.seed(seed)
    m = order.shape[0]
    current = order.copy()
    score = 0.0
    for k in range(m):
        score += similarity[current[k], current[(k + 1) % m]]
    best = current.copy()
    best_score = score
    temperature = initial_temperature
    trace = np.empty((iterations // trace_every + 1, 2))
    n_trace = 0
    for step in range(iterations):
        i = np.random.randint(m)
        j = np.random.randint(m - 1)
        if j >= i:  # a uniformly random pair of distinct positions
            j += 1
        delta = _swap_delta(similarity, current, i, j)
        if delta > 0.0 or (temperature > 0.0 and np.random.random() < math.exp(delta / temperature)):
            current[i], current[j] = current[j], current[i]
            score += delta
            if score > best_score:
                best_score = score
                best[:] = current
        temperature *= cooling_rate
        if step % trace_every == 0:
            trace[n_trace, 0] = step
            trace[n_trace, 1] = score
            n_trace += 1
    return best, best_score, score, trace[:n_trace]


@numba.njit(cache=True)
def _two_opt(similarity: np.ndarray, order: np.ndarray, first_step: int) -> tuple[np.ndarray, np.ndarray]:
    """Best-improvement 2-opt: reverse ``tour[i+1 .. j]`` while some reversal raises the score."""
    m = order.shape[0]
    tour = order.copy()
    score = 0.0
    for k in range(m):
        score += similarity[tour[k], tour[(k + 1) % m]]
    trace = [(float(first_step), score)]
    step = first_step
    while True:
        best_gain = 1e-12  # ignore round-off "improvements" that would cycle forever
        best_i = -1
        best_j = -1
        for i in range(m - 1):
            a, b = tour[i], tour[i + 1]
            # j = m - 1 with i = 0 would reverse the whole tour: the same cycle.
            for j in range(i + 2, m if i > 0 else m - 1):
                c, d = tour[j], tour[(j + 1) % m]
                gain = similarity[a, c] + similarity[b, d] - similarity[a, b] - similarity[c, d]
                if gain > best_gain:
                    best_gain, best_i, best_j = gain, i, j
        if best_i < 0:
            break
        tour[best_i + 1 : best_j + 1] = tour[best_i + 1 : best_j + 1][::-1].copy()
        score += best_gain
        step += 1
        trace.append((float(step), score))
    out = np.empty((len(trace), 2))
    for k in range(len(trace)):
        out[k, 0] = trace[k][0]
        out[k, 1] = trace[k][1]
    return tour, out


@numba.njit(cache=True)
def _held_karp(similarity: np.ndarray) -> np.ndarray:
    """Maximum-score Hamiltonian cycle; task 0 is fixed as the start (a cycle has no start)."""
    m = similarity.shape[0]
    n = m - 1  # tasks 1..m-1 are bits 0..n-1
    full = 1 << n
    best = np.full((full, n), -np.inf)
    parent = np.full((full, n), -1, dtype=np.int64)
    for k in range(n):
        best[1 << k, k] = similarity[0, k + 1]
    for mask in range(1, full):
        for last in range(n):
            value = best[mask, last]
            if value == -np.inf or not (mask >> last) & 1:
                continue
            for nxt in range(n):
                if (mask >> nxt) & 1:
                    continue
                candidate = value + similarity[last + 1, nxt + 1]
                new_mask = mask | (1 << nxt)
                if candidate > best[new_mask, nxt]:
                    best[new_mask, nxt] = candidate
                    parent[new_mask, nxt] = last
    last = 0
    closing = -np.inf
    for k in range(n):
        candidate = best[full - 1, k] + similarity[k + 1, 0]
        if candidate > closing:
            closing, last = candidate, k
    order = np.empty(m, dtype=np.int64)
    order[0] = 0
    mask = full - 1
    for position in range(m - 1, 0, -1):
        order[position] = last + 1
        previous = parent[mask, last]
        mask ^= 1 << last
        last = previous
    return order


def check_similarity(similarity: Any) -> np.ndarray:
    """Return ``similarity`` as a C-contiguous float64 matrix; raise if it is not square, finite and symmetric."""
    matrix = np.ascontiguousarray(similarity, dtype=np.float64)
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise ValueError(f"similarity must be a square matrix, got shape {matrix.shape}")
    if not np.isfinite(matrix).all():
        row, col = np.argwhere(~np.isfinite(matrix))[0]
        raise ValueError(f"similarity[{row}, {col}] is {matrix[row, col]}; all entries must be finite")
    if not np.allclose(matrix, matrix.T, atol=1e-6):
        row, col = np.unravel_index(np.argmax(np.abs(matrix - matrix.T)), matrix.shape)
        raise ValueError(
            f"similarity must be symmetric (the tour has no direction): [{row}, {col}] = {matrix[row, col]} "
            f"but [{col}, {row}] = {matrix[col, row]}"
        )
    return matrix


def _check_order(order: Any, m: int) -> np.ndarray:
    tour = np.asarray(order, dtype=np.int64)
    if tour.shape != (m,) or not np.array_equal(np.sort(tour), np.arange(m)):
        raise ValueError(f"initial_order must be a permutation of 0..{m - 1}, got {shown(order)}")
    return tour.copy()


def auto_initial_temperature(similarity: np.ndarray, order: np.ndarray, seed: int, samples: int = 1_000) -> float:
    """Mean |Δ| of random swaps of ``order``: a typical worsening move starts accepted with probability 1/e."""
    rng = np.random.default_rng(seed)
    m = order.shape[0]
    pairs = rng.integers(0, m, size=(samples, 2))
    deltas = [abs(_swap_delta(similarity, order, int(i), int(j))) for i, j in pairs if i != j]
    mean = float(np.mean(deltas)) if deltas else 0.0
    return mean if mean > 0.0 else 1.0


def solve_task_order(
    similarity: np.ndarray,
    method: Method = "annealing",
    iterations: int = 2_000_000,
    initial_temperature: float | None = None,
    cooling_rate: float | None = None,
    seed: int = 0,
    initial_order: np.ndarray | list[int] | None = None,
    polish: bool = True,
) -> TaskOrder:
    """Order tasks so that neighbours are similar: maximise Eq. 6 of Data-CUBE over cyclic tours.

    Args:
        similarity: symmetric ``(m, m)`` task-similarity matrix (the diagonal is never used).
        method: ``"annealing"`` (the paper's simulated annealing), ``"two_opt"`` or ``"exact"``
            (Held–Karp, at most :data:`MAX_EXACT_TASKS` tasks).
        iterations: annealing moves; the paper stops at about 2 million.
        initial_temperature: annealing start temperature ``τ_s``. ``None`` uses the mean |Δ| of 1,000
            random swaps of the initial tour (the paper gives no value).
        cooling_rate: geometric factor ``α`` applied after every move. ``None`` picks the rate that
            lowers the temperature by :data:`FINAL_TEMPERATURE_RATIO` over ``iterations``.
        seed: seeds the initial shuffle and the moves; the result is deterministic given it.
        initial_order: start tour (a permutation of ``0..m-1``); default a random shuffle, as in the paper.
        polish: after annealing, run 2-opt on the best tour found.

    Returns:
        a :class:`TaskOrder` with the order (task indices), its Eq. 6 score and a trace.
    """
    if method not in METHODS:
        raise ValueError(f"unknown method {shown(method)}; expected one of {list(METHODS)}")
    matrix = check_similarity(similarity)
    m = matrix.shape[0]
    rng = np.random.default_rng(seed)
    start = _check_order(initial_order, m) if initial_order is not None else rng.permutation(m).astype(np.int64)
    parameters: dict[str, Any] = {"method": method, "seed": seed}
    if m <= 3:
        parameters["note"] = "three or fewer tasks: every cyclic order has the same neighbours"
        order = np.arange(m, dtype=np.int64)
        score = tour_score(matrix, order)
        return TaskOrder(order, score, method, np.array([[0.0, score]]), parameters)

    if method == "exact":
        if m > MAX_EXACT_TASKS:
            raise ValueError(f"method='exact' handles at most {MAX_EXACT_TASKS} tasks, got {m}; use 'annealing'")
        order = _held_karp(matrix)
        score = tour_score(matrix, order)
        return TaskOrder(order, score, method, np.array([[0.0, score]]), parameters)

    if method == "two_opt":
        order, trace = _two_opt(matrix, start, 0)
        return TaskOrder(order, tour_score(matrix, order), method, trace, parameters)

    if iterations < 1:
        raise ValueError(f"iterations must be positive, got {iterations}")
    if initial_temperature is None:
        initial_temperature = auto_initial_temperature(matrix, start, seed)
    if cooling_rate is None:
        cooling_rate = FINAL_TEMPERATURE_RATIO ** (1.0 / iterations)
    if initial_temperature < 0 or not 0.0 < cooling_rate <= 1.0:
        raise ValueError(
            f"need initial_temperature >= 0 and 0 < cooling_rate <= 1, got {initial_temperature} and {cooling_rate}"
        )
    parameters |= {
        "iterations": iterations,
        "initial_temperature": float(initial_temperature),
        "cooling_rate": float(cooling_rate),
        "polish": polish,
    }
    trace_every = max(1, iterations // TRACE_POINTS)
    order, _, _, trace = _anneal(
        matrix, start, iterations, float(initial_temperature), float(cooling_rate), seed, trace_every
    )
    if polish:
        order, polish_trace = _two_opt(matrix, order, iterations)
        trace = np.concatenate([trace, polish_trace])
    return TaskOrder(order, tour_score(matrix, order), method, trace, parameters)
