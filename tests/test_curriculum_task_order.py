"""Task order (Data-CUBE Eq. 6–7): the O(1) swap Δ, Held–Karp, annealing and 2-opt."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from hf_unified_embed.curriculum import MAX_EXACT_TASKS, solve_task_order, tour_score
from hf_unified_embed.curriculum.task_order import _anneal, _swap_delta


def random_similarity(m: int, seed: int, clusters: int = 0) -> np.ndarray:
    """Cosine similarities of random task vectors, optionally grouped around a few centres (like real tasks)."""
    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(m, 16))
    if clusters:
        vectors += 3 * rng.normal(size=(clusters, 16))[rng.integers(0, clusters, m)]
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors @ vectors.T


def brute_force_best(similarity: np.ndarray) -> float:
    m = len(similarity)
    return max(tour_score(similarity, (0, *rest)) for rest in itertools.permutations(range(1, m)))


@pytest.mark.parametrize("m", [2, 3, 4, 5, 9])
def test_swap_delta_equals_full_recomputation(m: int) -> None:
    similarity = random_similarity(m, seed=m)
    rng = np.random.default_rng(0)
    for _ in range(20):
        order = rng.permutation(m)
        for i, j in itertools.product(range(m), repeat=2):
            swapped = order.copy()
            swapped[[i, j]] = swapped[[j, i]]
            expected = tour_score(similarity, swapped) - tour_score(similarity, order)
            assert _swap_delta(similarity, order, i, j) == pytest.approx(expected, abs=1e-12)


def test_running_score_of_long_annealing_matches_eq6() -> None:
    # 200k accepted/rejected moves summed incrementally must land on the recomputed score.
    similarity = random_similarity(40, seed=1)
    order = np.random.default_rng(0).permutation(40).astype(np.int64)
    best, best_score, final_score, trace = _anneal(similarity, order, 200_000, 0.5, 0.99997, 3, 1_000)
    assert best_score == pytest.approx(tour_score(similarity, best), abs=1e-9)
    assert np.array_equal(np.sort(best), np.arange(40))
    assert trace.shape == (200, 2)
    assert final_score <= best_score + 1e-12


@pytest.mark.parametrize("m", [4, 5, 6, 7, 8])
def test_held_karp_matches_brute_force(m: int) -> None:
    similarity = random_similarity(m, seed=10 + m)
    result = solve_task_order(similarity, method="exact")
    assert sorted(result.order.tolist()) == list(range(m))
    assert result.score == pytest.approx(brute_force_best(similarity), abs=1e-12)
    assert result.score == pytest.approx(tour_score(similarity, result.order))


@pytest.mark.parametrize(("m", "seed"), [(8, 0), (9, 1), (10, 2), (11, 3), (12, 4), (12, 5), (12, 6), (10, 7)])
def test_annealing_with_two_opt_reaches_held_karp_optimum(m: int, seed: int) -> None:
    similarity = random_similarity(m, seed, clusters=3 if seed % 2 else 0)
    optimum = solve_task_order(similarity, method="exact").score
    found = solve_task_order(similarity, method="annealing", iterations=200_000, seed=seed)
    assert found.score >= optimum - 1e-3 * abs(optimum)
    assert found.score <= optimum + 1e-9
    assert found.score == pytest.approx(tour_score(similarity, found.order))


def test_two_opt_is_a_local_optimum_and_polish_never_hurts() -> None:
    similarity = random_similarity(30, seed=2)
    start = np.random.default_rng(1).permutation(30)
    polished = solve_task_order(similarity, method="two_opt", initial_order=start)
    assert polished.score >= tour_score(similarity, start)
    again = solve_task_order(similarity, method="two_opt", initial_order=polished.order)
    assert again.score == pytest.approx(polished.score)
    assert np.all(np.diff(polished.trace[:, 1]) > 0)
    raw = solve_task_order(similarity, iterations=20_000, polish=False, seed=4)
    assert solve_task_order(similarity, iterations=20_000, polish=True, seed=4).score >= raw.score


def test_annealing_is_deterministic_given_seed_and_reports_parameters() -> None:
    similarity = random_similarity(25, seed=3)
    first = solve_task_order(similarity, iterations=50_000, seed=7)
    second = solve_task_order(similarity, iterations=50_000, seed=7)
    assert np.array_equal(first.order, second.order)
    assert first.parameters["iterations"] == 50_000
    assert 0 < first.parameters["cooling_rate"] < 1
    assert first.parameters["initial_temperature"] > 0
    assert first.trace[0, 0] == 0 and first.trace.shape[1] == 2


def test_tiny_instances_need_no_search() -> None:
    for m in (1, 2, 3):
        result = solve_task_order(np.eye(m))
        assert sorted(result.order.tolist()) == list(range(m))


@pytest.mark.parametrize(
    ("matrix", "kwargs", "message"),
    [
        (np.ones((3, 4)), {}, "square"),
        (
            np.array([[1.0, 0.2, 0.3, 0.1], [0.5, 1, 0.1, 0.2], [0.3, 0.1, 1, 0.4], [0.1, 0.2, 0.4, 1]]),
            {},
            "symmetric",
        ),
        (np.full((4, 4), np.nan), {}, "finite"),
        (random_similarity(MAX_EXACT_TASKS + 1, 0), {"method": "exact"}, "at most"),
        (random_similarity(5, 0), {"method": "greedy"}, "unknown method"),
        (random_similarity(5, 0), {"initial_order": [0, 1, 2, 3, 3]}, "permutation"),
        (random_similarity(5, 0), {"cooling_rate": 1.5}, "cooling_rate"),
    ],
)
def test_bad_input_is_rejected_with_a_clear_message(matrix: np.ndarray, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        solve_task_order(matrix, **kwargs)


def test_annealing_result_is_a_two_opt_local_optimum() -> None:
    # The solver polishes the annealed tour with 2-opt: running 2-opt again on its result finds no improving move.
    similarity = random_similarity(30, seed=5)
    result = solve_task_order(similarity, iterations=5_000, seed=1)
    again = solve_task_order(similarity, method="two_opt", initial_order=result.order)
    assert len(again.trace) == 1, "2-opt still improved the solver's result"
    assert again.score == pytest.approx(result.score, abs=1e-12)


def test_annealing_cools_down_onto_its_best_tour() -> None:
    # With geometric cooling the last tenth of the run is nearly greedy: the current tour's score stays
    # within 1 % of the best one (without cooling it keeps wandering at the start temperature).
    similarity = (random_similarity(30, seed=6) + 1) / 2  # in [0, 1], so a relative bound means something
    result = solve_task_order(similarity, iterations=200_000, seed=2, polish=False)
    last_tenth = result.trace[-len(result.trace) // 10 :, 1]
    assert last_tenth.min() >= 0.99 * result.score
