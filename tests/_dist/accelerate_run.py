"""Run under ``accelerate launch --config_file examples/accelerate/multi_cpu.yaml`` by tests/test_accelerate_launch.py.

Usage: ``accelerate_run.py RECIPE.json OUT_DIR``. With the recipe's losses (gathering across devices),
the unified collator and ``CurriculumBatchSampler``:

1. trains with the recipe's settings (gradient accumulation, a checkpoint every 2 steps), recording
   the ``(task, queries)`` of every batch this process collates;
2. resumes a fresh trainer from ``checkpoint-2`` and records the batches after step 2 again;
3. on the first retrieval batch of each process, computes the gathered loss (each process scores its
   own queries against every process's documents) and the single-process loss on the batches of
   both processes concatenated.

Writes ``OUT_DIR/rank<r>.json``.
"""

from __future__ import annotations

import gc
import json
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from sentence_transformers import SentenceTransformerTrainer

from hf_unified_embed.recipe import recipe_from_dict
from hf_unified_embed.recipe.preflight import preflight
from hf_unified_embed.recipe.run import PreparedRun, prepare_run


class RecordingCollator:
    """Delegates to the unified collator; records each batch's task, queries and collated features."""

    def __init__(self, collator: Any) -> None:
        self.collator = collator
        self.batches: list[tuple[str, list[str]]] = []
        self.features: list[tuple[str, dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.collator, name)

    def __call__(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        features = self.collator(rows)
        self.batches.append((rows[0]["task"], [row["query"] for row in rows]))
        self.features.append((rows[0]["task"], features))
        return features


def train(recipe_path: Path, resume: str | None) -> tuple[RecordingCollator, PreparedRun, SentenceTransformerTrainer]:
    recipe = recipe_from_dict(json.loads(recipe_path.read_text()), origin=str(recipe_path))
    resolved = preflight(recipe, overwrite=True)
    prepared = prepare_run(resolved, None)
    recorder = RecordingCollator(prepared.collator)
    trainer = SentenceTransformerTrainer(
        model=prepared.model,
        args=resolved.training_args,
        train_dataset=prepared.tasks,
        loss=prepared.losses,
        data_collator=recorder,
        callbacks=[prepared.collator.epoch_callback()],
    )
    trainer.train(resume_from_checkpoint=resume)
    return recorder, prepared, trainer


def columns_of(features: dict[str, Any]) -> list[dict[str, Any]]:
    names = [key.removesuffix("_input_ids") for key in features if key.endswith("_input_ids")]
    return [
        {key.removeprefix(f"{name}_"): value for key, value in features.items() if key.startswith(f"{name}_")}
        for name in names
    ]


def main() -> None:
    recipe_path, out = Path(sys.argv[1]), Path(sys.argv[2])
    full, prepared, trainer = train(recipe_path, None)
    resumed, _, _ = train(recipe_path, str(Path(trainer.args.output_dir) / "checkpoint-2"))

    task, features = next(item for item in full.features if item[0] == "wikiqa")
    loss, model = prepared.losses[task], prepared.model
    model.eval()
    with torch.no_grad():
        local = loss.embed_columns(columns_of(features))
        gathered = torch.tensor([loss.compute_loss_from_embeddings(local, None).item()])
        dist.all_reduce(gathered)
        every: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(every, [column.cpu() for column in local])
        loss.gather_across_devices = False
        single = loss.compute_loss_from_embeddings([torch.cat(parts) for parts in zip(*every)], None).item()
    result = {
        "full": full.batches,
        "resumed": resumed.batches,
        "gathered_mean": gathered.item() / dist.get_world_size(),
        "single": single,
    }
    (out / f"rank{dist.get_rank()}.json").write_text(json.dumps(result))
    # As in sampling_steps.py: the DDP reducers must go while the process group is alive, or a gloo thread
    # can still be running when the interpreter exits ("terminate called without an active exception",
    # SIGABRT, seen once in a full suite; pytorch/pytorch#56297).
    del full, resumed, prepared, trainer, loss, model
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
