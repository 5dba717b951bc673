"""Run under ``torchrun --nproc_per_node=2`` by tests/test_streaming.py (gloo, CPU), and by
tests/test_elastic_stream.py with the ``kill`` under one process count and the ``resume`` under another.

Usage: ``stream_steps.py MODEL_DIR OUT_DIR MODE``. Trains a tiny model for 8 optimizer steps (2 rows per
device, gradient accumulation 2, a checkpoint every 4 steps) from a :class:`MultiTaskStream` of two
tasks with different column counts — ``pairs`` in 4 shards (each process reads its own two) and
``triplets`` in one (every process reads it and keeps every other row) — with cross-device gathering
on, so a step that mixed tasks across devices would fail. Writes the ``(task, rows)`` of every batch
the rank collated to ``OUT_DIR/<MODE>.rank<r>.json``. ``MODE``:

* ``full``: the uninterrupted run;
* ``kill``: the same run, killed (``os._exit``, no clean-up) right after the checkpoint of step 4;
* ``resume``: resumes the killed run from that checkpoint.
"""

from __future__ import annotations

import gc
import json
import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _sampling_helpers import RecordingCollator, two_task_dataset
from sentence_transformers import (
    SentenceTransformer,
    SentenceTransformerTrainer,
    SentenceTransformerTrainingArguments,
)
from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
from transformers import TrainerCallback

from hf_unified_embed.sampling import MultiTaskStream

KILL_AFTER_STEP = 4


class KillAfterCheckpoint(TrainerCallback):
    """Ends every process abruptly once all of them have saved the checkpoint of ``step``."""

    def __init__(self, step: int, record: Any, path: Path) -> None:
        self.step, self.record, self.path = step, record, path

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step == self.step:
            self.path.write_text(json.dumps(self.record.batches))
            dist.barrier()
            os._exit(9)


def main(model_dir: str, out_dir: str, mode: str) -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank = dist.get_rank()
    data = two_task_dataset(pairs=40, triplets=30)
    tasks = {
        "pairs": data["pairs"].to_iterable_dataset(num_shards=4),
        "triplets": data["triplets"].to_iterable_dataset(),
    }
    stream = MultiTaskStream(tasks, weights="equal", shuffle_window=8)
    model = SentenceTransformer(model_dir, device="cpu")
    run_dir = Path(out_dir) / ("full" if mode == "full" else "killed")
    args = SentenceTransformerTrainingArguments(
        output_dir=str(run_dir),
        per_device_train_batch_size=2,
        gradient_accumulation_steps=2,
        max_steps=8,
        save_strategy="steps",
        save_steps=KILL_AFTER_STEP,
        ignore_data_skip=True,
        accelerator_config={"dispatch_batches": False},
        use_cpu=True,
        ddp_backend="gloo",
        report_to="none",
        logging_steps=1,
        seed=7,
    )
    loss = MultipleNegativesRankingLoss(model, gather_across_devices=True)
    trainer = SentenceTransformerTrainer(model=model, args=args, loss={"pairs": loss, "triplets": loss})
    stream.attach(trainer)
    recorder = RecordingCollator(trainer.data_collator)
    trainer.data_collator = recorder
    path = Path(out_dir, f"{mode}.rank{rank}.json")
    if mode == "kill":
        trainer.add_callback(KillAfterCheckpoint(KILL_AFTER_STEP, recorder, path))
    trainer.train(resume_from_checkpoint=str(run_dir / f"checkpoint-{KILL_AFTER_STEP}") if mode == "resume" else None)
    path.write_text(json.dumps(recorder.batches))
    dist.barrier()
    # As in sampling_steps.py: drop the DDP reducer while the process group is alive (pytorch/pytorch#56297).
    del trainer, model, recorder
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:4])
