"""Training bridge: unified datasets into an ordinary ``SentenceTransformerTrainer`` run.

* :class:`UnifiedDataCollator` draws fixed ``query, positive_1..K+, negative_1..K−`` columns (and the
  label the loss needs) from unified rows, anew every epoch;
* :func:`prompts_from_unified` and :func:`exclude_instructions_from_pooling` turn the per-task
  instructions into prompts that are not pooled; :func:`publish_prompts` gives the trained model those
  instructions as its named prompts (``encode_query``, ``encode(prompt_name=task)``), and
  :func:`prompt_table` lists a model's prompts as a card shows them;
* :func:`losses_for_tasks` maps one loss per task type onto the task names the trainer dispatches on;
* :func:`unified_training` returns all of these as the keyword arguments of a stock
  ``SentenceTransformerTrainer`` (``SentenceTransformerTrainer(**unified_training(model, train, losses, args))``);
* :func:`freeze_lower_layers` and :func:`layerwise_lr_mapping` limit which weights move and how far
  (the recipe's ``model.freeze_layers`` and ``model.layerwise_lr_decay``);
* :func:`device_training_args` sets the training arguments that depend on the device (on CUDA bf16
  autocast where native, TF32, pinned memory, dataloader workers; on the CPU none of these);
* :mod:`~hf_unified_embed.training.backbones` builds the model a recipe's ``model:`` section describes
  (encoders, decoder LLMs with last-token pooling, LoRA adapters merged on request).

Names load on first use: the recipe's ``model:`` section (``backbones.ModelConfig``) is read before a
run decides to import torch and sentence-transformers, so that a recipe typo is reported at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hf_unified_embed.utils.lazy_exports import lazy_attribute

_EXPORTS = {
    "ColumnLayout": "hf_unified_embed.losses.columns",
    "ResampleEachEpochCallback": "hf_unified_embed.training.collator",
    "UnifiedDataCollator": "hf_unified_embed.training.collator",
    "draw_indices": "hf_unified_embed.training.collator",
    "device_training_args": "hf_unified_embed.training.devices",
    "column_layouts": "hf_unified_embed.training.layout",
    "layout_for_loss": "hf_unified_embed.training.layout",
    "losses_for_tasks": "hf_unified_embed.training.loss_mapping",
    "freeze_lower_layers": "hf_unified_embed.training.partial_updates",
    "layerwise_lr_mapping": "hf_unified_embed.training.partial_updates",
    "exclude_instructions_from_pooling": "hf_unified_embed.training.prompts",
    "prompts_from_unified": "hf_unified_embed.training.prompts",
    "prompt_table": "hf_unified_embed.training.published_prompts",
    "publish_prompts": "hf_unified_embed.training.published_prompts",
    "unified_training": "hf_unified_embed.training.trainer_arguments",
}

if TYPE_CHECKING:
    from hf_unified_embed.losses.columns import ColumnLayout
    from hf_unified_embed.training.collator import ResampleEachEpochCallback, UnifiedDataCollator, draw_indices
    from hf_unified_embed.training.devices import device_training_args
    from hf_unified_embed.training.layout import column_layouts, layout_for_loss
    from hf_unified_embed.training.loss_mapping import losses_for_tasks
    from hf_unified_embed.training.partial_updates import freeze_lower_layers, layerwise_lr_mapping
    from hf_unified_embed.training.prompts import exclude_instructions_from_pooling, prompts_from_unified
    from hf_unified_embed.training.published_prompts import prompt_table, publish_prompts
    from hf_unified_embed.training.trainer_arguments import unified_training

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    return lazy_attribute(globals(), _EXPORTS, name)
