"""Training bridge: unified datasets into an ordinary ``SentenceTransformerTrainer`` run.

* :class:`UnifiedDataCollator` draws fixed ``query, positive_1..K+, negative_1..K−`` columns (and the
  label the loss needs) from unified rows, anew every epoch;
* :func:`prompts_from_unified` and :func:`exclude_instructions_from_pooling` turn the per-task
  instructions into prompts that are not pooled;
* :func:`losses_for_tasks` maps one loss per task type onto the task names the trainer dispatches on;
* :func:`device_training_args` sets the training arguments that depend on the device (pinned memory).
"""

from hf_unified_embed.losses.columns import ColumnLayout
from hf_unified_embed.training.collator import ResampleEachEpochCallback, UnifiedDataCollator, draw_indices
from hf_unified_embed.training.devices import device_training_args
from hf_unified_embed.training.layout import column_layouts, layout_for_loss
from hf_unified_embed.training.loss_mapping import losses_for_tasks
from hf_unified_embed.training.prompts import exclude_instructions_from_pooling, prompts_from_unified

__all__ = [
    "ColumnLayout",
    "ResampleEachEpochCallback",
    "UnifiedDataCollator",
    "column_layouts",
    "device_training_args",
    "draw_indices",
    "exclude_instructions_from_pooling",
    "layout_for_loss",
    "losses_for_tasks",
    "prompts_from_unified",
]
