"""One embedding model for retrieval and similarity, trained on the bundled sample: python examples/quickstart.py"""

import sys
from pathlib import Path

from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments

from hf_unified_embed import AnglEJointLoss, CoDiEmbSTSLoss, MultiPositiveInfoNCELoss, build_unified, unified_training

# Your own data: train = load_unified("my-data"), a folder from `hf-unified-embed build` (docs/your-data.md).
train = build_unified(Path(__file__).parent / "recipes" / "sample.yaml")
model = SentenceTransformer(sys.argv[1] if len(sys.argv) > 1 else "sentence-transformers/all-MiniLM-L6-v2")
losses = {"retrieval": MultiPositiveInfoNCELoss, "sts": CoDiEmbSTSLoss, "pair_classification": AnglEJointLoss}
args = SentenceTransformerTrainingArguments("outputs/quickstart", max_steps=20, save_strategy="no")

SentenceTransformerTrainer(**unified_training(model, train, losses, args)).train()
model.save_pretrained("outputs/quickstart/model")
