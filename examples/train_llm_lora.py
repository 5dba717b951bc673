"""An LLM embedder in the unified recipe: decoder backbone, instructions, LoRA, last-token pooling.

What Qwen3-Embedding, NV-Embed or AnglE-LLaMA do, as one training recipe:

1. the backbone is a decoder (``--base-model``: any local folder or cached Hub id; by default a small
   random Qwen2 whose tokenizer is trained on the bundled sample, so the script runs anywhere);
2. the recipe's ``model:`` section pools the last token (an EOS appended to every text), pads on the
   left and can turn on gradient checkpointing, bf16 and an attention implementation;
3. the per-task instructions become prompts that are kept out of pooling — with a byte-level BPE
   tokenizer the trailing space of an instruction is replaced by a newline so that the prompt ends on
   a token boundary (``hf_unified_embed.training.prompts``);
4. ``peft:`` trains a LoRA adapter on the attention projections; ``CurriculumBatchSampler`` keeps every
   step on one task; the output folder is the adapter with its card (``base_model_relation: adapter``);
5. the adapter folder is loaded, merged into the base weights (``hf_unified_embed.training.backbones.merge_adapter``)
   and saved as an ordinary sentence-transformers folder; reloaded from disk, it encodes as the adapter
   model does.

Run::

    .venv/bin/python examples/train_llm_lora.py --max-steps 3                 # tiny random Qwen2, seconds
    .venv/bin/python examples/train_llm_lora.py --base-model Qwen/Qwen2.5-0.5B --bf16 --gradient-checkpointing

On several GPUs: ``accelerate launch --config_file examples/accelerate/fsdp.yaml examples/train_llm_lora.py ...``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from example_cli import (
    example_parser,
    parse_example_args,
    recipe_training_args,
    run_example,
    sample_recipe,
)

REPO = Path(__file__).resolve().parent.parent


def recipe(args: argparse.Namespace, base: str, data: Path, output: Path) -> dict[str, Any]:
    model: dict[str, Any] = {"pooling": "lasttoken", "padding_side": "left"}
    if args.bf16:
        model["torch_dtype"] = "bfloat16"
    if args.gradient_checkpointing:
        model["gradient_checkpointing"] = True
    training_args = recipe_training_args(
        args,
        per_device_train_batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        warmup_steps=0.1,  # a float: a share of the steps
        logging_steps=10,
    )
    return {
        "base_model": base,
        "base_model_id": args.base_model_id,
        "model": model,
        "data": {"path": str(data), "tasks": ["stsb", "sick", "wikiqa", "trecqa"]},
        "losses": {
            "retrieval": {"name": "MultiPositiveInfoNCELoss", "temperature": 0.02},
            "sts": "CoDiEmbSTSLoss",
        },
        "negatives_per_query": 3,
        "instructions": True,
        "sampler": {"interleave": "shuffled"},
        "peft": {
            "r": args.lora_r,
            "lora_alpha": 2 * args.lora_r,
            "lora_dropout": 0.05,
            "target_modules": args.target_modules,
        },
        "training_args": training_args,
        "seed": args.seed,
        "output_dir": str(output),
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = example_parser(
        __file__, __doc__, data_root=REPO / "examples" / "data", base_model="a small random Qwen2 built here"
    )
    parser.add_argument("--base-model-id", default="example/tiny-qwen2", help="the base model's Hub id, for the card")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--learning-rate", type=float, default=2e-4)
    parser.add_argument("--lora-r", type=int, default=8)
    parser.add_argument("--target-modules", nargs="+", default=["q_proj", "k_proj", "v_proj", "o_proj"])
    parser.add_argument("--bf16", action="store_true", help="load the backbone in bfloat16")
    parser.add_argument("--gradient-checkpointing", action="store_true")
    args = parse_example_args(parser, argv, full_steps=100, packaged_base=False)

    import torch
    from huggingface_hub import ModelCard
    from sentence_transformers import SentenceTransformer

    from hf_unified_embed.data import build_unified, save_unified
    from hf_unified_embed.recipe import recipe_from_dict
    from hf_unified_embed.recipe.run import train_from_recipe
    from hf_unified_embed.training.backbones import merge_adapter

    out: Path = args.output_dir
    base = args.base_model
    if base is None:
        # The tiny decoder builder is a test helper (tests/_tiny_decoders.py), not part of the package:
        # the script reaches it in the repository only when it has to build its own base model.
        sys.path.insert(0, str(REPO / "tests"))
        from _tiny_decoders import bundled_corpus, make_tiny_decoder

        base = str(
            make_tiny_decoder(out / "base", "qwen2", bundled_corpus(REPO / "examples" / "data"), hidden_size=64)
        )
        print(f"base: a random Qwen2 (hidden 64, 4 layers) in {base}")
    sample = REPO / "examples" / "recipes" / "sample.yaml"
    data = save_unified(
        build_unified(sample_recipe(sample, args.data_root), split="train"), out / "data", overwrite=True
    )

    adapter_dir = out / "adapter"
    outcome = train_from_recipe(
        recipe_from_dict(recipe(args, base, data, adapter_dir), origin=str(__file__)), overwrite=True
    )
    card = ModelCard.load(adapter_dir / "README.md")
    print(
        f"adapter: {adapter_dir} (loss {outcome.train_loss:.4f}; card base_model {card.data.base_model}, relation adapter)"
    )

    model = SentenceTransformer(str(adapter_dir))
    texts = ["what is the capital of france", "Paris is the capital of France."]
    with torch.no_grad():
        with_adapter = model.encode(texts, convert_to_tensor=True)
    merged_dir = out / "merged"
    merge_adapter(model).save(str(merged_dir))
    # What a user gets is the folder, so compare the merged model as it loads from disk.
    reloaded = SentenceTransformer(str(merged_dir))
    with torch.no_grad():
        merged = reloaded.encode(texts, convert_to_tensor=True)
    card = ModelCard.load(merged_dir / "README.md")
    print(
        f"merged: {merged_dir} (reloaded from disk: max |adapter - merged| = "
        f"{(with_adapter - merged).abs().max().item():.2e}; card base_model {card.data.base_model}, a full model)"
    )


if __name__ == "__main__":
    run_example(main)
