"""Run a training recipe: unified data → (curriculum) → losses, collator, sampler → ``SentenceTransformerTrainer``.

Nothing here replaces sentence-transformers' machinery: the trainer is the stock one, the parts
from :mod:`hf_unified_embed` go in as its ordinary arguments (``loss=`` dict per task,
``data_collator=``, ``multi_dataset_batch_sampler=``). Multi-device runs therefore work with
``torchrun``/``accelerate launch`` unchanged; only the main process writes the final folder.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml
from datasets import DatasetDict
from torch import nn

from hf_unified_embed.model_card import UnifiedModelCardData
from hf_unified_embed.recipe import TrainRecipe

logger = logging.getLogger(__name__)

RECIPE_FILENAME = "hf_unified_embed_recipe.yaml"
EVALUATION_FILENAME = "evaluation.json"


@dataclass
class TrainingOutcome:
    """What :func:`train_from_recipe` produced."""

    model_dir: Path
    train_loss: float | None
    evaluation: Any | None  # hf_unified_embed.evaluation.SuiteResults


def resolve_loss_class(name: str) -> type[nn.Module]:
    """A loss class by name: this package's losses first, then sentence-transformers' own."""
    from sentence_transformers.sentence_transformer import losses as st_losses

    from hf_unified_embed import losses as unified_losses

    for module in (unified_losses, st_losses):
        candidate = getattr(module, name, None)
        if isinstance(candidate, type) and issubclass(candidate, nn.Module):
            return candidate
    raise ValueError(f"unknown loss {name!r}: not in hf_unified_embed.losses nor sentence-transformers' losses")


def _load_tasks(recipe: TrainRecipe) -> DatasetDict:
    from hf_unified_embed.data import load_unified

    tasks = load_unified(recipe.data.path, tasks=recipe.data.tasks, split=recipe.data.split)
    limit = recipe.data.max_rows_per_task
    if limit is not None:
        tasks = DatasetDict({name: ds.select(range(min(limit, len(ds)))) for name, ds in tasks.items()})
    return tasks


def _curriculum(recipe: TrainRecipe, tasks: DatasetDict, work_dir: Path) -> tuple[DatasetDict, dict[str, Any] | None]:
    """The task order and ``difficulty`` column, from a saved plan or computed with a teacher."""
    from hf_unified_embed.curriculum import CurriculumPlan, plan_curriculum, plot_task_similarity

    config = recipe.curriculum
    if config is None:
        return tasks, None
    if config.plan:
        plan = CurriculumPlan.load(config.plan)
        if recipe.sampler.instance_order == "easy_to_hard":
            missing = [name for name, ds in tasks.items() if "difficulty" not in ds.column_names]
            if missing:
                raise ValueError(
                    f"sampler.instance_order is easy_to_hard but task(s) {missing} of {recipe.data.path} have no "
                    "'difficulty' column; point data.path at the output of `hf-unified-embed curriculum`"
                )
    else:
        from sentence_transformers import SentenceTransformer

        teacher = SentenceTransformer(str(config.teacher))
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
        plan.save(work_dir / "curriculum_plan.json")
    heatmap = plot_task_similarity(plan, work_dir / "task_similarity.png")
    summary = {
        "method": plan.solver.get("method", "annealing"),
        "score": float(plan.score),
        "task_order": [task for task in plan.order if task in tasks],
        "instance_order": recipe.sampler.instance_order,
        "plots": [{"title": "Task similarity in tour order", "path": heatmap.name}],
    }
    return tasks, summary


def _card_data(recipe: TrainRecipe, tasks: DatasetDict) -> UnifiedModelCardData:
    from hf_unified_embed.data.hub_layout import task_summary

    unified_tasks = [{"task": name, **task_summary(dataset)} for name, dataset in tasks.items()]
    dataset_id = None if Path(recipe.data.path).exists() else recipe.data.path
    return UnifiedModelCardData(
        model_name=recipe.model_name,
        model_id=recipe.hub.repo_id if recipe.hub else None,
        base_model_id=recipe.base_model_id,
        unified_dataset_id=dataset_id,
        unified_tasks=unified_tasks,
        train_datasets=[{"name": name, **({"id": dataset_id} if dataset_id else {})} for name in tasks],
        local_files_only=True,
        # Widget examples would be drawn from the unified columns (task names, instructions), not texts.
        generate_widget_examples=False,
    )


def _batch_sampler(recipe: TrainRecipe, task_order: list[str] | None) -> Any:
    """The ``multi_dataset_batch_sampler`` argument: ours (a factory) or a stock sentence-transformers one."""
    config = recipe.sampler
    if config.kind != "curriculum":
        from sentence_transformers.base.sampler import MultiDatasetBatchSamplers

        return MultiDatasetBatchSamplers(config.kind)
    from hf_unified_embed.sampling import CurriculumBatchSampler

    return CurriculumBatchSampler.configure(
        task_order=task_order,
        interleave=config.interleave,
        instance_order=config.instance_order,
        batch_sizes=dict(config.batch_sizes),
        balance=config.balance,
    )


def _sampler_card(recipe: TrainRecipe, args: Any) -> dict[str, Any]:
    config = recipe.sampler
    if config.kind != "curriculum":
        section: dict[str, Any] = {"class": f"sentence-transformers MultiDatasetBatchSamplers.{config.kind.upper()}"}
    else:
        section = {
            "class": "CurriculumBatchSampler",
            "interleave": config.interleave,
            "instance_order": config.instance_order,
            "batch_sizes": dict(config.batch_sizes) or "per_device_train_batch_size",
            "balance": config.balance,
        }
    return {**section, "world_size": args.world_size, "gradient_accumulation_steps": args.gradient_accumulation_steps}


def _training_arguments(recipe: TrainRecipe, checkpoint_dir: Path, task_order: list[str] | None) -> Any:
    from sentence_transformers import SentenceTransformerTrainingArguments

    settings: dict[str, Any] = {"report_to": "none", "save_strategy": "no", "seed": recipe.seed}
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.cuda.is_available():
        # transformers only sets up DDP on CPU when told to; otherwise every process trains alone.
        settings.update(use_cpu=True, ddp_backend="gloo")
    settings.update(recipe.training_args)
    settings.setdefault("output_dir", str(checkpoint_dir))
    return SentenceTransformerTrainingArguments(
        multi_dataset_batch_sampler=_batch_sampler(recipe, task_order), **settings
    )


def _write_atomically(source: Path, target: Path, overwrite: bool) -> None:
    if target.exists():
        if not overwrite:
            raise FileExistsError(f"{target} exists; pass overwrite=True (CLI: --overwrite)")
        shutil.rmtree(target)
    os.replace(source, target)


def train_from_recipe(recipe: TrainRecipe, *, overwrite: bool = False) -> TrainingOutcome:
    """Train as ``recipe`` says and write the model, its card and the resolved recipe to ``output_dir``.

    The model folder is assembled in a temporary sibling and renamed at the end, so an interrupted
    run leaves no half-written model. Trainer checkpoints go to ``training_args.output_dir``
    (default ``<output_dir>-checkpoints``), where ``resume_from_checkpoint`` finds them.
    """
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer

    from hf_unified_embed.training import UnifiedDataCollator, exclude_instructions_from_pooling, losses_for_tasks

    output_dir = Path(recipe.output_dir)
    if output_dir.exists() and any(output_dir.iterdir()) and not overwrite:
        raise FileExistsError(f"{output_dir} exists and is not empty; pass overwrite=True (CLI: --overwrite)")
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{output_dir.name}.", dir=output_dir.parent))
    try:
        tasks = _load_tasks(recipe)
        tasks, curriculum = _curriculum(recipe, tasks, staging)
        card = _card_data(recipe, tasks)
        model = SentenceTransformer(recipe.resolved_base_model(), model_card_data=card)
        # A trained model gets a freshly generated card, not the base model's README.
        model._model_card_text = None
        if recipe.max_seq_length is not None:
            model.max_seq_length = recipe.max_seq_length
        if recipe.peft:
            from peft import LoraConfig

            model.add_adapter(LoraConfig(**recipe.peft))
        if recipe.instructions:
            exclude_instructions_from_pooling(model)
        specs = {
            key: (resolve_loss_class(spec["name"]), {k: v for k, v in spec.items() if k != "name"})
            for key, spec in recipe.losses.items()
        }
        losses = losses_for_tasks(model, tasks, specs)
        collator = UnifiedDataCollator.for_losses(
            model,
            tasks,
            losses,
            negatives_per_query=recipe.negatives_per_query,
            seed=recipe.seed,
            prompts=None if recipe.instructions else {},
        )
        checkpoint_dir = Path(recipe.training_args.get("output_dir", f"{output_dir}-checkpoints"))
        args = _training_arguments(recipe, checkpoint_dir, curriculum["task_order"] if curriculum else None)
        trainer = SentenceTransformerTrainer(
            model=model,
            args=args,
            train_dataset=tasks,
            loss=losses,
            data_collator=collator,
            callbacks=[collator.epoch_callback()],
        )
        result = trainer.train(resume_from_checkpoint=recipe.training_args.get("resume_from_checkpoint"))
        if not trainer.is_world_process_zero():
            shutil.rmtree(staging, ignore_errors=True)
            return TrainingOutcome(output_dir, result.training_loss, None)

        card.task_losses = _task_losses(tasks, losses)
        card.sampler = _sampler_card(recipe, args)
        card.curriculum = curriculum
        evaluation = None
        if recipe.evaluation:
            evaluation = _evaluate(model, recipe, staging)
        model.save(str(staging))
        (staging / RECIPE_FILENAME).write_text(
            yaml.safe_dump(recipe.to_dict(), sort_keys=False, allow_unicode=True), encoding="utf-8"
        )
        (staging / "trainer_args.json").write_text(args.to_json_string(), encoding="utf-8")
        _write_atomically(staging, output_dir, overwrite)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if recipe.hub:
        from hf_unified_embed.publishing import push_folder

        push_folder(
            output_dir,
            recipe.hub.repo_id,
            repo_type="model",
            private=recipe.hub.private,
            revision=recipe.hub.revision,
            create_pr=recipe.hub.create_pr,
        )
    return TrainingOutcome(output_dir, result.training_loss, evaluation)


def _task_losses(tasks: DatasetDict, losses: dict[str, nn.Module]) -> dict[str, dict[str, Any]]:
    """Loss per task type for the card (the trainer's own card lists them per dataset too)."""
    by_type: dict[str, dict[str, Any]] = {}
    for name, loss in losses.items():
        task_type = tasks[name][0]["task_type"] if len(tasks[name]) else "unknown"
        get_config = getattr(loss, "get_config_dict", None)
        config = get_config() if callable(get_config) else {}
        by_type.setdefault(
            task_type, {"name": type(loss).__name__, "config": json.loads(json.dumps(config, default=str))}
        )
    return by_type


def _evaluate(model: Any, recipe: TrainRecipe, staging: Path) -> Any:
    from hf_unified_embed.evaluation import run_suite

    results = run_suite(model, recipe.evaluation, data_root=recipe.evaluation_data_root)  # type: ignore[arg-type]
    attach_evaluation(model.model_card_data, results)
    results.save_json(staging / EVALUATION_FILENAME, overwrite=True)
    return results


def attach_evaluation(card: Any, results: Any) -> None:
    """Put suite results (table, ``model-index``, diagnostics) into a :class:`UnifiedModelCardData`."""
    card.evaluation = [
        {"name": row["evaluation"], "kind": row["kind"], "metric": row["metric"], "value": row["value"]}
        for row in results.table
    ]
    card.model_index_results = [result for index in results.model_index() for result in index.get("results", [])]
    card.diagnostics = {name: diag.to_dict() for name, diag in results.diagnostics.items()}
