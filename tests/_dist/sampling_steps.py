"""Run under ``torchrun --nproc_per_node=2`` by tests/test_sampling_multiprocess.py (gloo, CPU).

Usage: ``sampling_steps.py MODEL_DIR OUT_DIR``. Trains a tiny model three times on two tasks with
different column counts and writes, per scenario and rank, the ``(task, rows)`` of every batch the
rank collated, in order, to ``OUT_DIR/<scenario>.rank<r>.json``:

* ``curriculum_g1``: CurriculumBatchSampler, cross-device gathering on;
* ``curriculum_g2``: the same with gradient accumulation 2 (detected from the trainer's args) and a
  padded last step;
* ``proportional``: the stock ProportionalBatchSampler, gathering off (with it on, the mixed-task
  steps this records would hang the run).
"""

from __future__ import annotations

import gc
import json
import sys
from datetime import timedelta
from pathlib import Path

import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _sampling_helpers import RecordingCollator, two_task_dataset
from sentence_transformers import (
    SentenceTransformer,
    SentenceTransformerTrainer,
    SentenceTransformerTrainingArguments,
)
from sentence_transformers.base.sampler import MultiDatasetBatchSamplers
from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

from hf_unified_embed.sampling import CurriculumBatchSampler

SCENARIOS = {
    "curriculum_g1": (CurriculumBatchSampler.configure(batch_sizes={"triplets": 3}), 1, True),
    # drop_last=False overrides the trainer's DDP default: the last triplets step is padded to
    # equal per-device batches, which the gather needs.
    "curriculum_g2": (CurriculumBatchSampler.configure(batch_sizes={"triplets": 3}, drop_last=False), 2, True),
    "proportional": (MultiDatasetBatchSamplers.PROPORTIONAL, 1, False),
}


def main(model_dir: str, out_dir: str) -> None:
    # A hang (mismatched collectives) fails fast instead of blocking the test until its own timeout.
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank = dist.get_rank()
    for name, (sampler, accumulation, gather) in SCENARIOS.items():
        model = SentenceTransformer(model_dir, device="cpu")
        args = SentenceTransformerTrainingArguments(
            output_dir=str(Path(out_dir) / name),
            per_device_train_batch_size=2,
            gradient_accumulation_steps=accumulation,
            num_train_epochs=1,
            multi_dataset_batch_sampler=sampler,
            use_cpu=True,
            ddp_backend="gloo",
            save_strategy="no",
            report_to="none",
            logging_steps=1,
            seed=7,
        )
        trainer = SentenceTransformerTrainer(
            model=model,
            args=args,
            train_dataset=two_task_dataset(pairs=24, triplets=18),
            loss=MultipleNegativesRankingLoss(model, gather_across_devices=gather),
        )
        recorder = RecordingCollator(trainer.data_collator)
        trainer.data_collator = recorder
        trainer.train()
        Path(out_dir, f"{name}.rank{rank}.json").write_text(json.dumps(recorder.batches))
        dist.barrier()
    # The DDP reducer must die while the process group is still registered: if it held the last
    # reference, its destructor (which keeps the GIL) would join gloo's worker threads while one of them
    # waits for the GIL to free a finished all-gather's tensors — a deadlock at exit seen on a busy
    # machine (pytorch/pytorch#56297). destroy_process_group() drops the group without the GIL.
    del trainer, model, recorder
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:3])
