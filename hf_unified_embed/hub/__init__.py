"""Publishing to the Hugging Face Hub: a model or dataset folder, or a unified ``DatasetDict``, and what the
users of a published model need to load it."""

from hf_unified_embed.hub.card_ids import local_model_id, with_repo_id
from hf_unified_embed.hub.consumers import ConsumerNeeds, consumer_needs
from hf_unified_embed.hub.publishing import PushPlan, push_folder, push_unified

__all__ = [
    "ConsumerNeeds",
    "PushPlan",
    "consumer_needs",
    "local_model_id",
    "push_folder",
    "push_unified",
    "with_repo_id",
]
