"""One embedding model for retrieval and similarity, trained on the bundled sample: python quickstart.py"""

from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments

from hf_unified_embed import (
    AnglEJointLoss,
    CoDiEmbSTSLoss,
    MultiPositiveInfoNCELoss,
    build_unified,
    resolve_model,
    sample_recipe,
    unified_training,
)

train = build_unified(sample_recipe())  # the bundled sample; your own data: load_unified("my-data")
model = SentenceTransformer(resolve_model("sentence-transformers/all-MiniLM-L6-v2"))  # the [minilm] copy if installed
losses = {"retrieval": MultiPositiveInfoNCELoss, "sts": CoDiEmbSTSLoss, "pair_classification": AnglEJointLoss}
args = SentenceTransformerTrainingArguments("outputs/quickstart", max_steps=20, save_strategy="no")
SentenceTransformerTrainer(**unified_training(model, train, losses, args)).train()
model.save_pretrained("outputs/quickstart/model")
