"""Publishing to the Hugging Face Hub: a model or dataset folder, or a unified ``DatasetDict``."""

from hf_unified_embed.hub.publishing import PushPlan, push_folder, push_unified

__all__ = ["PushPlan", "push_folder", "push_unified"]
