"""Load published artifacts as their users do: in a fresh Python where ``import hf_unified_embed`` fails.

:func:`consume` runs :data:`CONSUMER` in a child process whose ``sys.modules["hf_unified_embed"]`` is
``None`` and whose working directory is outside the repository. For each folder it tries each way of
loading that a user has and reports embeddings or the error, keyed by ``"<folder>|<way>"``:

* ``st`` / ``st_trust``: ``SentenceTransformer(folder[, trust_remote_code=True]).encode(texts)``;
* ``auto`` / ``auto_trust``: ``AutoModel.from_pretrained`` of the transformer module (a PEFT adapter
  folder through transformers' own adapter loading), its tokenizer, and the pooling the folder
  describes (``modules.json``, the ``Pooling`` module's config: mean / lasttoken / cls, and a
  ``Normalize`` module), written here from those files alone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

CONSUMER = r"""
import json, sys
sys.modules["hf_unified_embed"] = None  # what a user of the published folder has: no hf_unified_embed
from pathlib import Path
import torch

texts, requests, results = json.loads(sys.argv[1]), json.loads(sys.argv[2]), {}


def by_sentence_transformers(folder, trust):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(folder, device="cpu", trust_remote_code=trust).encode(texts)


def by_transformers(folder, trust):
    from transformers import AutoModel, AutoTokenizer

    root = Path(folder)
    modules = json.loads((root / "modules.json").read_text())
    kinds = [entry["type"].rsplit(".", 1)[-1] for entry in modules]
    transformer = root / modules[0]["path"]
    pooling = json.loads((root / modules[kinds.index("Pooling")]["path"] / "config.json").read_text())
    settings = json.loads((transformer / "sentence_bert_config.json").read_text())
    model = AutoModel.from_pretrained(str(transformer), trust_remote_code=trust).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(transformer), trust_remote_code=trust)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    batch = tokenizer(texts, padding=True, truncation=True, max_length=settings.get("max_seq_length"), return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"]
    # sentence-transformers 6 writes "pooling_mode"; older folders one flag per mode
    mode = pooling.get("pooling_mode") or next(
        key.removeprefix("pooling_mode_").removesuffix("_tokens").removesuffix("_token")
        for key, value in pooling.items() if key.startswith("pooling_mode_") and value
    )
    if mode == "mean":
        pooled = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
    elif mode == "lasttoken":
        last = mask.shape[1] - 1 - mask.flip(1).argmax(1)  # the last real token, whatever the padding side
        pooled = hidden[torch.arange(len(texts)), last]
    elif mode == "cls":
        pooled = hidden[:, 0]
    else:
        raise ValueError(f"pooling not handled here: {pooling}")
    if "Normalize" in kinds:
        pooled = torch.nn.functional.normalize(pooled, dim=-1)
    return pooled.numpy()


for folder, way in requests:
    load = by_sentence_transformers if way.startswith("st") else by_transformers
    try:
        results[f"{folder}|{way}"] = load(folder, way.endswith("_trust")).astype("float64").tolist()
    except Exception as error:
        results[f"{folder}|{way}"] = f"{type(error).__name__}: {error}"
print(json.dumps(results))
"""


def consume(requests: list[tuple[str, str]], texts: list[str], cwd: Path) -> dict[str, Any]:
    """Run :data:`CONSUMER` for ``(folder, way)`` pairs in one child process; its result per ``"folder|way"``."""
    from _processes import Expected, failure, run

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": ""}
    command = [sys.executable, "-c", CONSUMER, json.dumps(texts), json.dumps(requests)]
    completed = run(
        command,
        expected=Expected(30, steps=len(requests), step_s=3),
        env=env,
        cwd=str(cwd),
        stdin=subprocess.DEVNULL,
    )
    assert completed.returncode == 0, failure(completed)
    result: dict[str, Any] = json.loads(completed.stdout.strip().splitlines()[-1])
    return result
