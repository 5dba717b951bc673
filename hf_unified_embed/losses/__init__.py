"""Loss classes (one per file) following the sentence-transformers loss API.

Each loss declares the columns it reads in its ``column_layout`` (:mod:`~hf_unified_embed.losses.columns`);
:mod:`~hf_unified_embed.losses.task_fit` checks that declaration against a task's rows before any model loads,
and :mod:`~hf_unified_embed.losses.overview` renders the "which loss for my data" table from it.
"""

from hf_unified_embed.losses.angle_joint import AnglEJointLoss
from hf_unified_embed.losses.codiemb_sts import CoDiEmbSTSLoss
from hf_unified_embed.losses.columns import ColumnLayout
from hf_unified_embed.losses.curriculum_infonce import CurriculumInfoNCELoss
from hf_unified_embed.losses.distill_kl import DistillKLLoss
from hf_unified_embed.losses.distill_margin_mse import DistillMarginMSELoss
from hf_unified_embed.losses.embedding_loss import EmbeddingLoss
from hf_unified_embed.losses.gur import GURLoss
from hf_unified_embed.losses.instructor import InstructorLoss
from hf_unified_embed.losses.keep_base import KeepBaseLoss
from hf_unified_embed.losses.mid_layer_infonce import MidLayerInfoNCELoss
from hf_unified_embed.losses.multi_positive_infonce import MultiPositiveInfoNCELoss
from hf_unified_embed.losses.parts import LossParts
from hf_unified_embed.losses.pearson import PearsonLoss
from hf_unified_embed.losses.pro import PROLoss
from hf_unified_embed.losses.rank_kl import RankKLLoss

__all__ = [
    "AnglEJointLoss",
    "CoDiEmbSTSLoss",
    "ColumnLayout",
    "CurriculumInfoNCELoss",
    "DistillKLLoss",
    "DistillMarginMSELoss",
    "EmbeddingLoss",
    "GURLoss",
    "InstructorLoss",
    "KeepBaseLoss",
    "LossParts",
    "MidLayerInfoNCELoss",
    "MultiPositiveInfoNCELoss",
    "PROLoss",
    "PearsonLoss",
    "RankKLLoss",
]
