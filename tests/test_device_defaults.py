"""The fastest correct step by default: bf16, TF32 and dataloader workers on CUDA, nothing on the CPU.

The GPU is mocked (``torch.cuda.is_available``, ``is_bf16_supported``, ``get_device_capability``,
``torch.version.cuda``): these tests check which training arguments a run chooses per device and that
the recipe's own settings win. That bf16 autocast keeps the default losses correct is checked on the CPU
(``torch.autocast("cpu", dtype=torch.bfloat16)``), and that the collator crosses into dataloader workers
by a 2-step training with ``dataloader_num_workers: 2``.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hf_unified_embed.recipe import recipe_from_dict
from hf_unified_embed.recipe.preflight import training_settings
from hf_unified_embed.training import device_training_args
from hf_unified_embed.training.devices import BF16_MIN_PARAMETERS, MAX_DEFAULT_WORKERS

REPO = Path(__file__).resolve().parent.parent
SAMPLE_RECIPE = REPO / "examples" / "recipes" / "sample.yaml"
GPU_KEYS = ("bf16", "tf32", "dataloader_num_workers")


@pytest.fixture(autouse=True)
def _no_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ACCELERATE_MIXED_PRECISION", "LOCAL_WORLD_SIZE", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)


def _gpu(
    monkeypatch: pytest.MonkeyPatch,
    capability: tuple[int, int] = (9, 0),
    *,
    cuda_version: str | None = "12.4",
    hip: bool = False,
    cores: int = 16,
) -> None:
    """Pretend this process has one GPU of ``capability`` and ``cores`` CPU cores."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    native = hip or capability[0] >= 8

    def is_bf16_supported(including_emulation: bool = True) -> bool:
        return native or including_emulation  # as torch: older GPUs emulate bfloat16 (slowly)

    monkeypatch.setattr(torch.cuda, "is_bf16_supported", is_bf16_supported)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.version, "cuda", cuda_version)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)


@pytest.fixture(scope="module")
def base_sized(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A model folder holding only BERT-base's configuration (110M parameters, no weights): the run counts
    the base model's parameters from its configuration on the meta device, before any weight is read."""
    from transformers import BertConfig

    folder = tmp_path_factory.mktemp("bert-base-config")
    BertConfig().save_pretrained(folder)
    return str(folder)


def _recipe(
    tmp_path: Path, training_args: dict[str, Any] | None = None, base_model: str | None = None, **extra: Any
) -> Any:
    raw = {
        "base_model": base_model,
        "data": str(tmp_path / "data"),
        "losses": {"retrieval": "MultiPositiveInfoNCELoss", "sts": "CoDiEmbSTSLoss"},
        "output_dir": str(tmp_path / "model"),
        "training_args": training_args or {},
        **extra,
    }
    return recipe_from_dict(raw, origin="r.yaml")


# --- which settings per device ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gpu", "expected"),
    [
        # H100 / A100 (Ampere and newer): bf16 autocast, TF32 matmuls, workers = cores - 1 (at most 4).
        ({"capability": (9, 0)}, {"bf16": True, "tf32": True, "dataloader_num_workers": 4}),
        ({"capability": (9, 0), "cores": 4}, {"bf16": True, "tf32": True, "dataloader_num_workers": 3}),
        ({"capability": (8, 0), "cores": 3}, {"bf16": True, "tf32": True, "dataloader_num_workers": 2}),
        # V100 / T4: bfloat16 only emulated and no TF32 cores: float32, as before.
        ({"capability": (7, 0)}, {"dataloader_num_workers": 4}),
        ({"capability": (7, 5)}, {"dataloader_num_workers": 4}),
        # ROCm: bfloat16, but transformers' tf32 needs CUDA.
        ({"capability": (9, 4), "cuda_version": None, "hip": True}, {"bf16": True, "dataloader_num_workers": 4}),
        # One core: no worker would pay.
        ({"capability": (9, 0), "cores": 1}, {"bf16": True, "tf32": True}),
    ],
)
def test_defaults_per_gpu(monkeypatch: pytest.MonkeyPatch, gpu: dict[str, Any], expected: dict[str, Any]) -> None:
    _gpu(monkeypatch, **gpu)
    persistent = {"dataloader_persistent_workers": True} if expected.get("dataloader_num_workers") else {}
    assert device_training_args() == {"dataloader_pin_memory": True, **expected, **persistent}


def test_workers_are_shared_by_the_processes_of_a_node(monkeypatch: pytest.MonkeyPatch) -> None:
    _gpu(monkeypatch, cores=16)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    assert device_training_args()["dataloader_num_workers"] == 1  # 16 // 8 - 1
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "16")
    assert not {"dataloader_num_workers", "dataloader_persistent_workers"} & device_training_args().keys()


@pytest.mark.parametrize("cuda", [True, False])
@pytest.mark.parametrize(
    ("explicit", "persistent"),
    [({}, None), ({"dataloader_num_workers": 0}, None), ({"dataloader_num_workers": 2}, True)],
)
def test_workers_persist_from_one_epoch_to_the_next(
    monkeypatch: pytest.MonkeyPatch, cuda: bool, explicit: dict[str, Any], persistent: bool | None
) -> None:
    """Wherever the run has workers (the defaults' on CUDA, or the caller's), they persist; never without
    workers, which torch's DataLoader refuses."""
    if cuda:
        _gpu(monkeypatch)
        persistent = persistent or (True if explicit.get("dataloader_num_workers", MAX_DEFAULT_WORKERS) else None)
    else:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert device_training_args(explicit=explicit).get("dataloader_persistent_workers") is persistent


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    cuda=st.booleans(),
    cores=st.integers(1, 64),
    local_world_size=st.integers(1, 8),
    explicit=st.fixed_dictionaries(
        {},
        optional={
            "dataloader_num_workers": st.integers(0, 16),
            "dataloader_persistent_workers": st.booleans(),
            "use_cpu": st.booleans(),
        },
    ),
)
def test_persistent_workers_only_beside_workers(
    monkeypatch: pytest.MonkeyPatch,
    cuda: bool,
    cores: int,
    local_world_size: int,
    explicit: dict[str, Any],
) -> None:
    """Whatever a user sets, the defaults merged under it give a dataloader torch accepts: persistent workers
    only where there are workers, the user's choice kept, and workers that persist wherever the run has some
    and the user did not say otherwise."""
    _gpu(monkeypatch, cores=cores)
    if not cuda:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(local_world_size))
    merged = {**device_training_args(explicit=explicit), **explicit}
    workers = merged.get("dataloader_num_workers", 0)
    persistent = merged.get("dataloader_persistent_workers", False)
    if "dataloader_persistent_workers" not in explicit:
        assert persistent is (workers > 0)
    else:
        assert persistent is explicit["dataloader_persistent_workers"]
    if persistent and workers == 0:
        return  # only where the user asked for it: torch names the problem
    torch.utils.data.DataLoader([0], num_workers=workers, persistent_workers=persistent)


def test_cpu_changes_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Without CUDA the defaults are transformers' own (float32, no workers), pinned memory aside."""
    from sentence_transformers import SentenceTransformerTrainingArguments

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert device_training_args() == {"dataloader_pin_memory": False}
    _gpu(monkeypatch)
    assert device_training_args("cpu") == {"dataloader_pin_memory": False, "use_cpu": True}
    assert device_training_args(explicit={"use_cpu": True}) == {"dataloader_pin_memory": False, "use_cpu": True}

    monkeypatch.undo()  # the real machine
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    settings, _ = training_settings(_recipe(tmp_path), "r.yaml")
    assert not set(GPU_KEYS) & set(settings)
    args = SentenceTransformerTrainingArguments(**settings)
    default = SentenceTransformerTrainingArguments(output_dir=str(tmp_path / "default"))
    assert (args.bf16, args.fp16, args.tf32, args.dataloader_num_workers) == (False, False, None, 0)
    assert (args.bf16, args.tf32, args.dataloader_num_workers) == (
        default.bf16,
        default.tf32,
        default.dataloader_num_workers,
    )
    assert args.dataloader_pin_memory is False


# --- the recipe's settings win ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("training_args", "expected", "absent"),
    [
        (
            {},
            {
                "bf16": True,
                "tf32": True,
                "dataloader_num_workers": 4,
                "dataloader_persistent_workers": True,
                "dataloader_pin_memory": True,
            },
            (),
        ),
        ({"bf16": False}, {"bf16": False, "tf32": True}, ()),
        ({"fp16": True}, {"fp16": True, "tf32": True}, ("bf16",)),
        ({"fp16": False}, {"fp16": False, "bf16": True}, ()),
        ({"tf32": False}, {"bf16": True, "tf32": False}, ()),
        (
            {"dataloader_num_workers": 0},
            {"bf16": True, "dataloader_num_workers": 0},
            ("dataloader_persistent_workers",),
        ),
        ({"dataloader_persistent_workers": False}, {"dataloader_persistent_workers": False}, ()),
        ({"dataloader_pin_memory": False}, {"dataloader_pin_memory": False}, ()),
        ({"use_cpu": True}, {"use_cpu": True, "dataloader_pin_memory": False}, GPU_KEYS),
    ],
)
def test_the_recipe_settings_win(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    base_sized: str,
    training_args: dict[str, Any],
    expected: dict[str, Any],
    absent: tuple[str, ...],
) -> None:
    _gpu(monkeypatch)
    settings, _ = training_settings(_recipe(tmp_path, training_args, base_sized), "r.yaml")
    assert {key: settings.get(key) for key in expected} == expected
    assert not set(absent) & set(settings)
    assert (settings["report_to"], settings["save_strategy"]) == ("none", "no")


def test_a_stream_gets_no_workers_of_the_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A stream is read in the training process, where its resume state lives: neither the defaults'
    workers nor their persistence."""
    _gpu(monkeypatch)
    recipe = _recipe(tmp_path, {"max_steps": 4}, data={"path": str(tmp_path / "data"), "streaming": True})
    settings, _ = training_settings(recipe, "r.yaml")
    assert not {"dataloader_num_workers", "dataloader_persistent_workers"} & settings.keys()
    assert settings["tf32"] is True


@pytest.mark.parametrize(("launcher", "expected"), [("no", {}), ("bf16", {"bf16": True}), ("fp16", {"fp16": True})])
def test_the_launcher_precision_wins(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, base_sized: str, launcher: str, expected: dict[str, Any]
) -> None:
    """``accelerate launch`` exports its ``mixed_precision``: it decides, ``no`` included."""
    _gpu(monkeypatch)
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", launcher)
    settings, _ = training_settings(_recipe(tmp_path, base_model=base_sized), "r.yaml")
    assert {key: settings[key] for key in ("bf16", "fp16") if key in settings} == expected
    assert settings["tf32"] is True


def test_float16_weights_get_no_bf16_autocast(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, base_sized: str
) -> None:
    _gpu(monkeypatch)
    recipe = _recipe(tmp_path, base_model=base_sized, model={"torch_dtype": "float16"})
    settings, _ = training_settings(recipe, "r.yaml")
    assert "bf16" not in settings and settings["tf32"] is True
    recipe = _recipe(tmp_path, base_model=base_sized, model={"torch_dtype": "bfloat16"})
    settings, _ = training_settings(recipe, "r.yaml")
    assert settings["bf16"] is True


# --- bf16 follows the model's size ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("parameters", "bf16"),
    [
        (None, True),
        (22_713_216, False),
        (BF16_MIN_PARAMETERS - 1, False),
        (BF16_MIN_PARAMETERS, True),
        (109_482_240, True),
    ],
)
def test_bf16_only_for_models_whose_step_the_gpu_bounds(
    monkeypatch: pytest.MonkeyPatch, parameters: int | None, bf16: bool
) -> None:
    """A small model's GPU step is bound by launching kernels: float32 with TF32 (bench/step.py)."""
    _gpu(monkeypatch)
    settings = device_training_args(parameters=parameters)
    assert settings.get("bf16", False) is bf16
    assert settings["tf32"] is True and settings["dataloader_num_workers"] == MAX_DEFAULT_WORKERS


def test_the_run_counts_the_base_models_parameters(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The shipped recipe's base (the packaged all-MiniLM-L6-v2, 22.7M) trains without the bf16 default
    unless the recipe asks for it; a base model whose configuration cannot be read keeps it."""
    _gpu(monkeypatch)
    settings, _ = training_settings(_recipe(tmp_path), "r.yaml")
    assert "bf16" not in settings and settings["tf32"] is True
    settings, _ = training_settings(_recipe(tmp_path, {"bf16": True}), "r.yaml")
    assert settings["bf16"] is True
    settings, _ = training_settings(_recipe(tmp_path, base_model=str(tmp_path / "no-such-model")), "r.yaml")
    assert settings["bf16"] is True


# --- dataloader workers: the collator pickles, and trains the same in workers -------------------------


@pytest.fixture(scope="module")
def unified_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from hf_unified_embed.data import build_unified, save_unified

    out = tmp_path_factory.mktemp("unified") / "data"
    save_unified(build_unified(SAMPLE_RECIPE), out)
    return out


def test_collator_pickles_without_the_weights(unified_dir: Path, tiny_model_path: str) -> None:
    """The collator of every real task pickles; the copy carries no weights and makes the same batches."""
    from sentence_transformers import SentenceTransformer

    from hf_unified_embed.data import load_unified
    from hf_unified_embed.losses import CoDiEmbSTSLoss, MultiPositiveInfoNCELoss
    from hf_unified_embed.training import UnifiedDataCollator, losses_for_tasks

    tasks = load_unified(unified_dir)
    model = SentenceTransformer(tiny_model_path)
    losses = losses_for_tasks(
        model,
        tasks,
        {"retrieval": MultiPositiveInfoNCELoss, "sts": CoDiEmbSTSLoss, "pair_classification": CoDiEmbSTSLoss},
    )
    collator = UnifiedDataCollator.for_losses(model, tasks, losses, negatives_per_query=2, seed=3)
    collator.set_epoch(1)
    data = pickle.dumps(collator)
    weights = sum(tensor.numel() * tensor.element_size() for tensor in model.state_dict().values())
    assert len(data) < weights / 2
    copy = pickle.loads(data)
    assert all(parameter.is_meta for parameter in copy.preprocess_fn.__self__.parameters())
    assert not any(parameter.is_meta for parameter in model.parameters())  # the original keeps its weights
    assert (copy.epoch, copy.seed, copy.layouts, copy.prompts) == (1, 3, collator.layouts, collator.prompts)
    for name, dataset in tasks.items():
        rows = [{**dataset[i], "dataset_name": name} for i in range(min(6, len(dataset)))]
        expected, actual = collator(rows), copy(rows)
        assert expected.keys() == actual.keys(), name
        for key, value in expected.items():
            same = torch.equal(value, actual[key]) if isinstance(value, torch.Tensor) else value == actual[key]
            assert same, (name, key)


def test_two_steps_with_two_dataloader_workers(unified_dir: Path, tiny_model_path: str, tmp_path: Path) -> None:
    """2 steps of 1 step per epoch: the workers draw with each epoch's seed, as the main process does.

    Workers that end with each epoch: a persistent worker draws the same (tests/test_training_collator.py),
    but its epochs take one seed less from torch's generator (a ``DataLoader`` draws its workers' base seed
    when an epoch's iterator is made, and persistent workers make one), so dropout differs from the second
    epoch on and the losses could not be compared."""
    from hf_unified_embed.recipe.run import train_from_recipe

    losses = []
    for workers in (0, 2):
        recipe = _recipe(
            tmp_path,
            {
                "max_steps": 2,
                "per_device_train_batch_size": 4,
                "dataloader_num_workers": workers,
                "dataloader_persistent_workers": False,
            },
            base_model=tiny_model_path,
            data={"path": str(unified_dir), "tasks": ["wikiqa"], "max_rows_per_task": 4},
            negatives_per_query=2,
            output_dir=str(tmp_path / f"model-{workers}"),
        )
        outcome = train_from_recipe(recipe)
        losses.append(outcome.train_loss)
        assert (outcome.model_dir / "model.safetensors").is_file()
    assert losses[0] is not None and losses[1] == pytest.approx(losses[0], rel=1e-6, abs=1e-6)


# --- bf16 autocast keeps the default losses correct ---------------------------------------------------

#: bf16 autocast against float32 on one batch of 12 rows (dropout off). The encoder runs in bfloat16 (8
#: significant bits); the losses' maths run in float32 outside autocast. Measured on the CPU with
#: all-MiniLM-L6-v2: loss 3e-4 (sts) / 3e-3 (retrieval) relative, gradient 1.2-1.3e-2 relative L2, cosine
#: 0.9999; the tiny random BERT stays within 1e-3. With the losses' maths under autocast too (before
#: ``EmbeddingLoss._loss_maths``) it was 2-3e-2 on the loss and 6e-2 (MiniLM) / 0.15 (tiny BERT) on the
#: gradient of MultiPositiveInfoNCELoss: its cosines, divided by a temperature of 0.02, were bfloat16.
LOSS_RTOL = 1e-2
GRAD_REL_L2 = 5e-2
GRAD_COSINE = 0.999


def _loss_and_gradient(model: Any, loss: Any, batch: dict[str, Any], bf16: bool) -> tuple[torch.Tensor, torch.Tensor]:
    from sentence_transformers import SentenceTransformerTrainer

    from hf_unified_embed.losses.parts import total_loss

    features, labels = SentenceTransformerTrainer.collect_features(None, batch)  # uses nothing of the trainer
    model.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        value = total_loss(loss(features, labels))
    value.backward()
    gradient = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]).double()
    return value.detach(), gradient


_MINILM = pytest.mark.real_model


@pytest.mark.parametrize(
    ("model_fixture", "task", "loss_name", "options"),
    [
        ("tiny_model_path", "wikiqa", "MultiPositiveInfoNCELoss", {}),
        ("tiny_model_path", "stsb", "CoDiEmbSTSLoss", {}),
        ("tiny_model_path", "wikiqa", "MultiPositiveInfoNCELoss", {"mini_batch_size": 4}),  # gradient-cached
        pytest.param("minilm_path", "wikiqa", "MultiPositiveInfoNCELoss", {}, marks=_MINILM),
        pytest.param("minilm_path", "stsb", "CoDiEmbSTSLoss", {}, marks=_MINILM),
    ],
)
def test_bf16_autocast_loss_and_gradients_match_float32(
    request: pytest.FixtureRequest,
    unified_dir: Path,
    model_fixture: str,
    task: str,
    loss_name: str,
    options: dict[str, Any],
) -> None:
    from sentence_transformers import SentenceTransformer

    from hf_unified_embed import losses as package_losses
    from hf_unified_embed.data import load_unified
    from hf_unified_embed.training import UnifiedDataCollator

    tasks = load_unified(unified_dir, tasks=[task])
    model = SentenceTransformer(request.getfixturevalue(model_fixture))
    model.max_seq_length = 64
    model.eval()  # no dropout: both passes see the same network
    loss = getattr(package_losses, loss_name)(model, **options)
    collator = UnifiedDataCollator.for_losses(model, tasks, {task: loss}, negatives_per_query=2)
    batch = collator([{**tasks[task][i], "dataset_name": task} for i in range(12)])

    loss32, grad32 = _loss_and_gradient(model, loss, batch, bf16=False)
    loss16, grad16 = _loss_and_gradient(model, loss, batch, bf16=True)
    assert loss16.dtype == torch.float32  # the loss's maths ran outside autocast
    assert loss16.item() == pytest.approx(loss32.item(), rel=LOSS_RTOL)
    assert ((grad16 - grad32).norm() / grad32.norm()).item() < GRAD_REL_L2
    assert torch.nn.functional.cosine_similarity(grad16, grad32, dim=0).item() > GRAD_COSINE
