"""A training run's data: the unified tasks (loaded or streamed, their rows checked first) and the curriculum.

:func:`~hf_unified_embed.recipe.run.prepare_run` calls these after preflight and before the model loads, so
a refused row or a missing ``difficulty`` column stops the run before anything heavy starts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from datasets import DatasetDict

from hf_unified_embed.errors import InputError
from hf_unified_embed.recipe.train_recipe import TrainRecipe
from hf_unified_embed.training.bidirectional_transformer import load_sentence_transformer


def load_tasks(recipe: TrainRecipe) -> DatasetDict:
    """The tasks to train on, their rows checked first with ``validate``'s row check.

    A local folder's rows — the first ``data.max_rows_per_task`` of each task, those the run trains on —
    are checked with pyarrow before ``datasets`` reads the folder (so a refused run leaves nothing in its
    cache); a Hub dataset's once it is loaded. Either way before the model loads.
    """
    from hf_unified_embed.data import load_unified

    data = recipe.data
    limit = data.max_rows_per_task
    tasks = load_unified(data.path, tasks=data.tasks, split=data.split, checked_rows=limit)
    if limit is not None:
        tasks = DatasetDict({name: ds.select(range(min(limit, len(ds)))) for name, ds in tasks.items()})
    return tasks


#: Rows read from each streamed task, spread over its shards, to check its loss and set up its columns,
#: instructions and card.
STREAM_SAMPLE_ROWS = 256

#: The fewest rows read from each shard (Parquet file) of a streamed task, however many shards it has.
STREAM_SAMPLE_ROWS_PER_SHARD = 16


def stream_sample(stream: Any, rows: int = STREAM_SAMPLE_ROWS) -> list[dict[str, Any]]:
    """Rows of ``stream`` from every one of its shards: the first ``rows / shards`` (at least
    :data:`STREAM_SAMPLE_ROWS_PER_SHARD`) of each, so that rows unlike the first file's (without hard
    negatives, without scores) are in the sample the loss check reads, not met at a later step.
    """
    shards = max(int(getattr(stream, "num_shards", 1) or 1), 1)
    if shards == 1:
        return list(stream.take(rows))
    per_shard = max(-(-rows // shards), STREAM_SAMPLE_ROWS_PER_SHARD)
    return [row for index in range(shards) for row in stream.shard(num_shards=shards, index=index).take(per_shard)]


def load_streams(recipe: TrainRecipe) -> tuple[Any, DatasetDict]:
    """A streaming run's task streams and a sample of each read across all its shards (:func:`stream_sample`), checked.

    A local folder's rows are checked in full with pyarrow (as :func:`load_tasks` does, nothing is
    cached); a Hub dataset's sampled rows, the rest as they stream in (the collator names a bad row).
    """
    from datasets import Dataset

    from hf_unified_embed.data import stream_unified
    from hf_unified_embed.data.row_check import check_dataset_rows
    from hf_unified_embed.utils.locations import looks_local

    data = recipe.data
    local = looks_local(data.path)
    streams = stream_unified(data.path, tasks=data.tasks, split=data.split)  # a local folder's rows checked
    samples = DatasetDict(
        {name: Dataset.from_list(stream_sample(stream), features=stream.features) for name, stream in streams.items()}
    )
    if not local:
        for name, sample in samples.items():
            check_dataset_rows(sample, name, f"{data.path}/data/{name}/{data.split}-*.parquet", limit=None)
    return streams, samples


def curriculum_for(
    recipe: TrainRecipe, tasks: DatasetDict, work_dir: Path | None
) -> tuple[DatasetDict, dict[str, Any] | None]:
    """The task order and ``difficulty`` column, from a saved plan or computed with a teacher.

    The plan (when computed) and the similarity heatmap are written to ``work_dir`` unless it is ``None``.
    """
    from hf_unified_embed.curriculum import CurriculumPlan, plan_curriculum, plot_task_similarity

    config = recipe.curriculum
    if config is None:
        return tasks, None
    if config.plan:
        plan = CurriculumPlan.load(config.plan)
        if recipe.sampler.instance_order == "easy_to_hard":
            missing = [name for name, ds in tasks.items() if "difficulty" not in ds.column_names]
            if missing:
                raise InputError(
                    f"{recipe.source}: sampler.instance_order is easy_to_hard but task(s) {missing} of {recipe.data.path} have no "
                    "'difficulty' column; point data.path at the output of `hf-unified-embed curriculum`"
                )
    else:
        teacher = load_sentence_transformer(str(config.teacher))
        result = plan_curriculum(
            teacher,
            tasks,
            teacher_name=str(config.teacher),
            n_samples=config.n_samples,
            method=config.method,  # type: ignore[arg-type]
            iterations=config.iterations,
            seed=recipe.seed,
        )
        plan, tasks = result.plan, result.tasks
        if work_dir is not None:
            plan.save(work_dir / "curriculum_plan.json")
    plots = []
    if work_dir is not None:
        heatmap = plot_task_similarity(plan, work_dir / "task_similarity.png")
        plots.append({"title": "Task similarity in tour order", "path": heatmap.name})
    summary = {
        "method": plan.solver.get("method", "annealing"),
        "score": float(plan.score),
        "task_order": [task for task in plan.order if task in tasks],
        "instance_order": recipe.sampler.instance_order,
        "plots": plots,
    }
    return tasks, summary
