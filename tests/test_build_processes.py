"""How many processes ``build`` starts: the user's ``--num-proc``, else as many as the input's size repays."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hf_unified_embed.cli.main import main
from hf_unified_embed.data import build_plan, load_build_recipe
from hf_unified_embed.data.build_plan import available_cpus, processes_worth
from hf_unified_embed.errors import HfUnifiedEmbedError

REPO = Path(__file__).resolve().parent.parent
SAMPLE_RECIPE = REPO / "examples" / "recipes" / "sample.yaml"
#: Formats of each kind of reader: a BEIR folder (cost 4), vectorised files (1) and a row-by-row reader (1.5).
FORMATS = {"beir": 4.0, "stsb": 1.0, "triplets": 1.0, "answer-selection": 1.5}


def seen_processes(monkeypatch: pytest.MonkeyPatch, args: list[str]) -> dict[str, Any]:
    """The keyword arguments ``build`` gives the library's build (stopped there: nothing is read)."""
    seen: dict[str, Any] = {}

    def fake(recipe: Any, **kwargs: Any) -> None:
        seen.update(kwargs)
        raise HfUnifiedEmbedError("stop here")

    monkeypatch.setattr("hf_unified_embed.data.build_unified_with_report", fake)
    assert main(["build", *args]) == 2
    return seen


def test_num_proc_default_and_refusals(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    if hasattr(os, "sched_getaffinity") and not hasattr(os, "process_cpu_count"):
        assert available_cpus() == len(os.sched_getaffinity(0))
    monkeypatch.setattr(build_plan, "available_cpus", lambda: 8)
    # The bundled sample (a few hundred kB) is not worth a second process, however many CPUs.
    assert seen_processes(monkeypatch, [str(SAMPLE_RECIPE), "-o", str(tmp_path / "out")])["num_proc"] == 1
    # Told, it starts as many as asked.
    args = [str(SAMPLE_RECIPE), "-o", str(tmp_path / "out"), "--num-proc", "3"]
    assert seen_processes(monkeypatch, args)["num_proc"] == 3
    with pytest.raises(SystemExit):
        main(["build", str(SAMPLE_RECIPE), "-o", str(tmp_path / "out"), "--num-proc", "0"])


def test_a_large_input_takes_a_process_per_share_up_to_the_cpus(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    # A sparse file: its size is what the planner reads, no byte of it is written or read here.
    big = tmp_path / "big.tsv"
    with open(big, "wb") as handle:
        handle.truncate(5 * build_plan._INPUT_PER_PROCESS + 1)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"sources:\n  - {{name: big, format: stsb, data_files: {big}, task_type: sts}}\n")
    for cpus, expected in ((8, 5), (3, 3), (1, 1)):
        monkeypatch.setattr(build_plan, "available_cpus", lambda cpus=cpus: cpus)
        assert seen_processes(monkeypatch, [str(recipe), "-o", str(tmp_path / "out")])["num_proc"] == expected


def recipe_specs(sources: list[tuple[str, int]], hub: bool, folder: Path) -> list[Any]:
    """Recipe sources of ``(format, size)``, each a sparse file (a BEIR folder holding one) of that size."""
    entries = []
    for number, (kind, size) in enumerate(sources):
        path = folder / f"source-{number}"
        target = path / "corpus.jsonl" if kind == "beir" else path
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "wb") as handle:
            handle.truncate(size)
        entries.append({"name": f"s{number}", "format": kind, "data_files": str(path), "task_type": "retrieval"})
    if hub:
        entries.append({"name": "hub", "format": "hub", "data_files": "org/some-dataset", "task_type": "retrieval"})
    return load_build_recipe({"sources": entries}).sources


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sources=st.lists(st.tuples(st.sampled_from(sorted(FORMATS)), st.integers(0, 2**34)), min_size=1, max_size=4),
    hub=st.booleans(),
    cpus=st.integers(1, 256),
)
def test_the_default_is_one_process_per_share_of_weighed_input(
    tmp_path_factory: pytest.TempPathFactory, sources: list[tuple[str, int]], hub: bool, cpus: int
):
    folder = tmp_path_factory.mktemp("inputs")
    specs = recipe_specs(sources, hub, folder)
    files = [(spec, [folder / f"source-{number}"]) for number, spec in enumerate(specs[: len(sources)])]
    if hub:
        files.append((specs[-1], ["org/some-dataset"]))
    chosen = processes_worth(files, cpus)
    assert 1 <= chosen <= cpus
    if hub:  # its size is unknown here: every CPU may be needed
        assert chosen == cpus
        return
    weight = sum(FORMATS[kind] * size for kind, size in sources)
    # Every process has a full share of the input to read; one more would not.
    assert chosen == 1 or weight >= chosen * build_plan._INPUT_PER_PROCESS
    assert chosen == cpus or weight < (chosen + 1) * build_plan._INPUT_PER_PROCESS
