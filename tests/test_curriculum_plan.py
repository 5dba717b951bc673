"""Task representations (Eq. 4), CurriculumPlan JSON, the planner pass and the PNG plots."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from _curriculum_helpers import tiny_tasks
from PIL import Image
from sentence_transformers import SentenceTransformer

from hf_unified_embed.curriculum import (
    CurriculumPlan,
    TaskStatistics,
    cosine_similarity_matrix,
    plan_curriculum,
    plot_difficulty_histograms,
    plot_task_similarity,
    task_representations,
    tour_score,
)
from hf_unified_embed.curriculum.representations import sample_query_rows


@pytest.fixture(scope="module")
def teacher(tiny_model_path: str) -> SentenceTransformer:
    return SentenceTransformer(tiny_model_path, device="cpu")


def make_plan(m: int = 4, seed: int = 0) -> CurriculumPlan:
    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(m, 8))
    similarity = cosine_similarity_matrix(vectors)
    tasks = [f"task{i}" for i in range(m)]
    order = [tasks[i] for i in rng.permutation(m)]
    return CurriculumPlan(
        tasks=tasks,
        order=order,
        similarity=similarity.tolist(),
        score=tour_score(similarity, [tasks.index(t) for t in order]),
        solver={"method": "annealing", "iterations": 10, "seed": seed},
        representation={"teacher": "tiny", "n_samples": 5, "seed": seed},
        task_statistics={t: TaskStatistics.from_scores(10, rng.normal(size=10)) for t in tasks},
    )


def test_task_representation_is_the_mean_of_prompted_query_embeddings(teacher: SentenceTransformer) -> None:
    tasks = tiny_tasks()
    representations = task_representations(teacher, tasks, n_samples=4, seed=3, show_progress_bar=False)
    samples = sample_query_rows(tasks, n_samples=4, seed=3)
    assert representations.shape == (3, teacher.get_embedding_dimension())
    for row, (task, dataset) in enumerate(tasks.items()):
        assert len(samples[task]) == 4 and len(set(samples[task].tolist())) == 4
        queries = [dataset[int(i)]["query"] for i in samples[task]]
        prompt = dataset[0]["query_instruction"] or None
        expected = teacher.encode(queries, prompt=prompt, convert_to_numpy=True).mean(axis=0)
        np.testing.assert_allclose(representations[row], expected, atol=1e-5)
    similarity = cosine_similarity_matrix(representations)
    assert np.allclose(np.diag(similarity), 1) and np.array_equal(similarity, similarity.T)


def test_small_task_uses_all_rows_and_empty_task_is_refused() -> None:
    tasks = tiny_tasks()
    assert len(sample_query_rows(tasks, n_samples=100)["beta"]) == 5
    with pytest.raises(ValueError, match="task 'beta' has no rows"):
        sample_query_rows({"beta": tasks["beta"].select([])})


def test_plan_json_round_trip(tmp_path: Path) -> None:
    plan = make_plan()
    path = plan.save(tmp_path)
    assert path.name == "curriculum_plan.json"
    loaded = CurriculumPlan.load(tmp_path)
    assert loaded == plan
    assert loaded.to_dict() == json.loads(path.read_text())
    assert loaded.neighbour_similarities() == pytest.approx(
        [loaded.similarity_matrix(in_order=True)[i, (i + 1) % 4] for i in range(4)]
    )
    assert sum(loaded.neighbour_similarities()) == pytest.approx(loaded.score)


def test_plan_rejects_inconsistent_or_foreign_json(tmp_path: Path) -> None:
    data = make_plan().to_dict()
    for change, message in (
        ({"order": ["task0", "task0", "task1", "task2"]}, "exactly once"),
        ({"version": 99}, "format version 99"),
        ({"score": 123.0}, "differs from Eq. 6"),
    ):
        (tmp_path / "plan.json").write_text(json.dumps({**data, **change}))
        with pytest.raises(ValueError, match=message):
            CurriculumPlan.load(tmp_path / "plan.json")
    (tmp_path / "plan.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"plan\.json: not valid JSON"):
        CurriculumPlan.load(tmp_path / "plan.json")


def test_plan_curriculum_orders_tasks_and_scores_rows(teacher: SentenceTransformer) -> None:
    tasks = tiny_tasks()
    result = plan_curriculum(
        teacher, tasks, teacher_name="tiny", n_samples=4, iterations=2_000, show_progress_bar=False
    )
    plan = result.plan
    assert sorted(plan.order) == sorted(tasks) and plan.tasks == list(tasks)
    assert plan.score == pytest.approx(tour_score(plan.similarity_matrix(), plan.order_indices))
    assert plan.task_statistics["alpha"].rows == 7
    assert plan.difficulty["teacher"] == "tiny" and plan.solver["method"] == "annealing"
    for task in tasks:
        column = np.asarray(result.tasks[task]["difficulty"], dtype=np.float32)
        np.testing.assert_array_equal(column, result.difficulty[task])
        assert plan.task_statistics[task].difficulty_mean == pytest.approx(float(column.mean()), abs=1e-6)
    unscored = plan_curriculum(teacher, tasks, score_instances=False, iterations=100, show_progress_bar=False)
    assert "difficulty" not in unscored.tasks["alpha"].column_names and unscored.plan.difficulty == {}


@pytest.mark.parametrize("m", [4, 30])
def test_plots_are_written_as_png(tmp_path: Path, m: int) -> None:
    plan = make_plan(m)
    rng = np.random.default_rng(0)
    heatmap = plot_task_similarity(plan, tmp_path / "similarity.png")
    histograms = plot_difficulty_histograms(
        {task: rng.normal(size=50) for task in plan.tasks}, tmp_path / "difficulty.png", order=plan.order
    )
    for path in (heatmap, histograms):
        with Image.open(path) as image:
            assert image.format == "PNG" and image.size[0] > 200
    assert sorted(p.name for p in tmp_path.iterdir()) == ["difficulty.png", "similarity.png"]
