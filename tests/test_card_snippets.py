"""Every kind of card runs as written: its usage snippet, taken from the card, runs against the folder in a Python
where `import hf_unified_embed` fails and the working folder is outside the repository — a MiniLM trained by the
bundled sample's recipe, soup / task-arithmetic / TIES merges of two of them, a causal LoRA decoder adapter and
its merged form and a soup of the two, a decoder bidirectional from layer 2 and its soup. The card `push` would upload is that same snippet with the repository id in place of the folder.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from huggingface_hub import ModelCard

from hf_unified_embed.cli.main import main
from hf_unified_embed.cli.sample import write_sample
from hf_unified_embed.hub.card_ids import HUB_COMMENT, LOCAL_COMMENT, PLACEHOLDER, local_model_id
from hf_unified_embed.hub.consumers import consumer_needs
from hf_unified_embed.hub.publishing import push_folder

pytestmark = pytest.mark.real_model

REPO_ID = "me/published"
#: Runs before the snippet: this package cannot be imported, as on a machine of someone who loads the model.
BLOCKER = (
    "import sys\n"
    "sys.modules['hf_unified_embed'] = None\n"
    "try:\n"
    "    import hf_unified_embed\n"
    "except ImportError:\n"
    "    pass\n"
    "else:\n"
    "    raise SystemExit('hf_unified_embed is importable')\n"
)


def _train(raw: dict[str, Any]) -> Path:
    from hf_unified_embed.recipe import recipe_from_dict
    from hf_unified_embed.recipe.run import train_from_recipe

    train_from_recipe(recipe_from_dict(raw))
    return Path(raw["output_dir"])


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled sample, written and built as its printed commands say."""
    root = write_sample(tmp_path_factory.mktemp("sample") / "run")
    data = root / "outputs" / "data"
    assert main(["build", str(root / "recipes" / "sample.yaml"), "-o", str(data), "--num-proc", "1"]) == 0
    return root


def _sample_recipe(sample: Path, output: Path, seed: int) -> dict[str, Any]:
    """The sample's training recipe as shipped, cut to one small step (instructions, losses and sampler kept)."""
    from hf_unified_embed.recipe import load_train_recipe

    raw = load_train_recipe(sample / "recipes" / "train_sample.yaml").to_dict()
    raw["data"] = {**raw["data"], "max_rows_per_task": 16}
    raw["sampler"] = {**(raw.get("sampler") or {}), "batch_sizes": {"wikiqa": 4, "wikiqa-passages": 4, "trecqa": 4}}
    raw["training_args"] = {**raw["training_args"], "per_device_train_batch_size": 4, "max_steps": 1, "seed": seed}
    raw["max_seq_length"] = 32
    raw["output_dir"] = str(output)
    return raw


@pytest.fixture(scope="module")
def artifacts(sample: Path, minilm_path: str, tiny_qwen2_path: str) -> dict[str, Path]:
    """Every kind of model folder the command line writes, each in a folder of its own under ``sample/outputs``."""
    outputs = sample / "outputs"
    folders = {f"trained-{seed}": _train(_sample_recipe(sample, outputs / f"trained-{seed}", seed)) for seed in (0, 1)}
    runs = [str(folders["trained-0"]), str(folders["trained-1"])]
    merges = {
        "soup": [],
        "task_arithmetic": ["--base", minilm_path],
        "ties": ["--base", minilm_path, "--param", "density=0.5"],
    }
    for method, extra in merges.items():
        out = outputs / f"{method}-merge"
        assert main(["merge", "--method", method, "--models", *runs, *extra, "-o", str(out), "--no-progress"]) == 0
        folders[f"{method}-merge"] = out
    lora = {
        "base_model": tiny_qwen2_path,
        "base_model_id": "org/tiny-qwen2",
        "model": {"pooling": "lasttoken", "padding_side": "left"},
        "data": {"path": str(outputs / "data"), "tasks": ["stsb", "wikiqa"], "max_rows_per_task": 16},
        "losses": {"retrieval": "MultiPositiveInfoNCELoss", "sts": "CoDiEmbSTSLoss"},
        "negatives_per_query": 1,
        "training_args": {"max_steps": 1, "per_device_train_batch_size": 4},
        "peft": {"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"]},
    }
    folders["lora-adapter"] = _train({**lora, "output_dir": str(outputs / "lora-adapter")})
    merged_lora = {**lora, "peft": {**lora["peft"], "merge_adapter": True}, "output_dir": str(outputs / "lora-merged")}
    folders["lora-merged"] = _train(merged_lora)
    out = outputs / "lora-soup"
    decoders = [str(folders["lora-adapter"]), str(folders["lora-merged"])]
    assert main(["merge", "--method", "soup", "--models", *decoders, "-o", str(out), "--no-progress"]) == 0
    folders["lora-soup"] = out
    bidirectional = {
        **{key: value for key, value in lora.items() if key != "peft"},
        "model": {"attention": "bidirectional", "first_bidirectional_layer": 2},
    }
    folders["bidirectional"] = _train({**bidirectional, "output_dir": str(outputs / "bidirectional")})
    twin = shutil.copytree(folders["bidirectional"], outputs / "bidirectional-twin")
    out = outputs / "bidirectional-soup"
    models = [str(folders["bidirectional"]), str(twin)]
    assert main(["merge", "--method", "soup", "--models", *models, "-o", str(out), "--no-progress"]) == 0
    folders["bidirectional-soup"] = out
    return folders


def usage_snippet(card: str) -> str:
    """The Python block of the card's "Direct Usage (Sentence Transformers)" section."""
    section = card.split("### Direct Usage (Sentence Transformers)", 1)[1]
    match = re.search(r"^```python\n(.*?)^```", section, flags=re.MULTILINE | re.DOTALL)
    assert match, "the usage section has a Python block"
    return match[1]


def run_outside(snippet: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``snippet`` in a fresh Python in ``cwd`` where this package cannot be imported."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    return subprocess.run(
        [sys.executable, "-c", BLOCKER + snippet],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


KINDS = [
    "trained-0",
    "soup-merge",
    "task_arithmetic-merge",
    "ties-merge",
    "lora-adapter",
    "lora-merged",
    "lora-soup",
    "bidirectional",
    "bidirectional-soup",
]


@pytest.mark.parametrize("kind", KINDS)
def test_the_card_snippet_runs_as_written_without_this_package(artifacts: dict[str, Path], kind: str) -> None:
    folder = artifacts[kind]
    card = ModelCard.load(folder / "README.md")  # the card parses back
    text = (folder / "README.md").read_text(encoding="utf-8")
    assert PLACEHOLDER not in text
    snippet = usage_snippet(card.text)
    assert f'("{local_model_id(folder)}"' in snippet, "the snippet loads the folder the card is in"
    assert str(folder.parent) not in text, "and never by a path of this machine"
    # The install line is what the folder needs (peft for the adapter).
    packages = " ".join(consumer_needs(folder).packages)
    assert f"```bash\npip install -U {packages}\n```" in text
    assert ("peft" in packages) == (kind == "lora-adapter")
    # A bidirectional decoder (from layer 2) runs its own code: the snippet passes the flag it needs.
    assert ("trust_remote_code=True" in snippet) == kind.startswith("bidirectional")
    assert Path.cwd().resolve() not in folder.parents
    result = run_outside(snippet, folder.parent)
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(r"^\[\d+, \d+\]|^torch\.Size|^\(\d+, \d+\)", result.stdout, flags=re.MULTILINE), result.stdout

    # What push uploads is the same snippet, naming the repository: mapped back to the folder, it is the one that ran.
    uploaded = push_folder(folder, REPO_ID, dry_run=True).card
    assert uploaded is not None
    pushed = usage_snippet(ModelCard(uploaded).text)
    assert local_model_id(folder) not in pushed and f'"{REPO_ID}"' in pushed
    assert pushed.replace(f'"{REPO_ID}"', f'"{local_model_id(folder)}"').replace(HUB_COMMENT, LOCAL_COMMENT) == snippet


def test_the_trained_card_names_the_prompts_the_model_carries(artifacts: dict[str, Path]) -> None:
    from sentence_transformers import SentenceTransformer

    folder = artifacts["trained-0"]
    text = ModelCard.load(folder / "README.md").text
    prompts = SentenceTransformer(str(folder)).prompts
    assert any(prompts.values()), "the sample recipe trains with instructions"
    for name in prompts:
        assert f"| `{name}` |" in text
