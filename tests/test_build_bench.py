"""``bench/build.py``'s ratios: each round's two modes paired, the median of the rounds; and its CPU loop."""

from __future__ import annotations

import importlib.util
import os
import statistics
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_build", REPO / "bench" / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _rows(rows: int, seconds: list[tuple[float, float]]) -> list[dict[str, Any]]:
    results = []
    for round_, (one, two) in enumerate(seconds):
        results.append({"rows": rows, "mode": "build 1", "round": round_, "seconds": one})
        results.append({"rows": rows, "mode": "build 2", "round": round_, "seconds": two})
    return results


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(0.1, 100.0), st.floats(0.1, 100.0)),
        min_size=1,
        max_size=7,
    )
)
def test_each_round_is_paired_with_itself(bench: ModuleType, seconds: list[tuple[float, float]]) -> None:
    # Another size's rows and a round of one mode alone are left out.
    results = _rows(1000, seconds) + _rows(10, [(1.0, 50.0)])
    results.append({"rows": 1000, "mode": "build 1", "round": len(seconds), "seconds": 1.0})
    ratios = bench.round_ratios(results, 1000, "build 1", "build 2")
    assert ratios == [one / two for one, two in seconds]


def test_the_printed_ratio_is_the_median_of_the_rounds(bench: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    # A ratio of medians would say 12 / 8 = 1.50x here; the rounds say 2.0, 1.0 and 1.5.
    seconds = [(16.0, 8.0), (8.0, 8.0), (12.0, 8.0)]
    bench.print_ratio("build 1 / build 2", _rows(1000, seconds), 1000, "build 1", "build 2")
    assert capsys.readouterr().out == "# build 1 / build 2: 1.50x (rounds: 2.00, 1.00, 1.50)\n"
    bench.print_ratio("build 1 / build 2", _rows(1000, seconds[:1]), 1000, "build 1", "build 2")
    assert capsys.readouterr().out == "# build 1 / build 2: 2.00x\n"
    bench.print_ratio("missing", _rows(1000, seconds), 1000, "build 1", "load_dataset")
    assert capsys.readouterr().out == ""
    assert statistics.median([2.0, 1.0, 1.5]) == 1.5


def test_the_cpu_loop_runs_in_one_and_in_several_processes(bench: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    measuring = sys.modules[bench.cpu_loop.__module__]  # bench/_process_measure.py
    monkeypatch.setattr(measuring, "CPU_LOOP_ITERATIONS", 200_000)
    for processes in (1, 2):
        seconds = bench.cpu_loop(processes)
        assert 0.0 < seconds < 30.0


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(1.0, 100.0), st.floats(1.0, 100.0), st.floats(0.0, 0.9), st.floats(0.0, 0.9)),
        min_size=1,
        max_size=7,
    )
)
def test_the_net_speed_up_takes_each_rounds_start_up_from_its_own_builds(
    bench: ModuleType, rounds: list[tuple[float, float, float, float]]
) -> None:
    results = []
    for round_, (one, two, startup_one, startup_two) in enumerate(rounds):
        for mode, seconds in (
            ("build 1", one),
            ("build 2", two),
            ("startup 1", startup_one),
            ("startup 2", startup_two),
        ):
            results.append({"rows": 1000, "mode": mode, "round": round_, "seconds": seconds})
    # A round without its start-up and another size's rows are left out.
    results.append({"rows": 1000, "mode": "build 1", "round": len(rounds), "seconds": 5.0})
    results.append({"rows": 1000, "mode": "build 2", "round": len(rounds), "seconds": 3.0})
    results += _rows(10, [(1.0, 50.0)])
    ratios = bench.net_ratios(results, 1000, "build 1", "build 2", "startup 1", "startup 2")
    assert ratios == [(one - s1) / (two - s2) for one, two, s1, s2 in rounds]


_CEILING_MODES = ("build 1", "startup 1", "startup 2", "cpu loop 1", "cpu loop 2")


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(1.0, 100.0),  # build 1
            st.floats(0.0, 1.0),  # startup 1
            st.floats(0.01, 2.0),  # startup 2: a process takes time to start
            st.floats(0.1, 10.0),  # cpu loop 1
            st.floats(0.05, 10.0),  # cpu loop 2
        ),
        min_size=1,
        max_size=7,
    )
)
def test_the_ceiling_is_amdahls_bound_over_each_rounds_own_start_ups_and_loop(
    bench: ModuleType, rounds: list[tuple[float, float, float, float, float]]
) -> None:
    results = [
        {"rows": 1000, "mode": mode, "round": round_, "seconds": seconds}
        for round_, values in enumerate(rounds)
        for mode, seconds in zip(_CEILING_MODES, values)
    ]
    # A round without its cpu loop, and another size's rows, are left out.
    results += [{"rows": 1000, "mode": mode, "round": len(rounds), "seconds": 1.0} for mode in _CEILING_MODES[:3]]
    results += [{"rows": 10, "mode": mode, "round": 0, "seconds": 0.5} for mode in _CEILING_MODES]
    ceilings = bench.ceiling_ratios(results, 1000, 2)
    assert len(ceilings) == len(rounds)
    for ceiling, (one, startup_one, startup_two, loop_one, loop_two) in zip(ceilings, rounds):
        # The build at the machine's speed-up for what divides, its start-up in two processes undivided.
        best_two = startup_two + max(one - startup_one, 0.0) / (loop_one / loop_two)
        assert ceiling == pytest.approx(one / best_two)
        if startup_two >= startup_one and loop_one >= loop_two:
            assert ceiling <= loop_one / loop_two * (1 + 1e-9)  # never above what the machine gives


def _one_round(values: tuple[float, ...]) -> list[dict[str, Any]]:
    """One round of ``_CEILING_MODES``' seconds, at one row."""
    return [{"rows": 1, "mode": mode, "round": 0, "seconds": s} for mode, s in zip(_CEILING_MODES, values)]


def test_without_start_ups_the_ceiling_is_the_machines_speed_up(bench: ModuleType) -> None:
    values = (10.0, 0.0, 0.0, 0.9, 0.5)
    assert bench.ceiling_ratios(_one_round(values), 1, 2) == [pytest.approx(0.9 / 0.5)]
    # A build that is all start-up gains nothing from a second process.
    values = (1.0, 1.0, 1.0, 0.9, 0.5)
    assert bench.ceiling_ratios(_one_round(values), 1, 2) == [pytest.approx(1.0)]
    # All start-up, the parallel one timed at 0 s: no bound, and no division by zero.
    values = (1.0, 1.0, 0.0, 0.9, 0.5)
    assert bench.ceiling_ratios(_one_round(values), 1, 2) == []


def test_the_bench_runs_end_to_end_into_a_scratch_folder_it_creates(tmp_path: Path, shared_data: Path) -> None:
    """A small run as a user starts it, ``--scratch`` naming a folder that does not exist yet: both builds
    write the same bytes and the scratch keeps nothing of the run. (The generator draws its texts from
    ``shared_data``, the folder it reads by default; without it the test is skipped.)"""
    scratch = tmp_path / "runs" / "today"
    command = [sys.executable, str(REPO / "bench" / "build.py"), "--sizes", "300", "--no-memory", "--num-proc", "2"]
    result = subprocess.run(
        [*command, "--modes", "build-1", "build-N", "--scratch", str(scratch), "--data", str(shared_data)],
        capture_output=True,
        text=True,
        timeout=1200,  # a hang guard: a process per mode and round, on a machine that may be loaded
        env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "every build (2) wrote the same Parquet bytes: True" in result.stdout
    assert scratch.is_dir() and not any(scratch.iterdir())


def test_every_mode_runs_in_rounds_each_removing_what_it_no_longer_needs(tmp_path: Path) -> None:
    """Two rounds of every timed mode (the mixed inputs: no real texts needed): validate and read-shards find
    the folder the last build wrote although each build removes the one before it, and ``--num-proc 1`` gives
    build-1 and build-N folders of their own."""
    command = [sys.executable, str(REPO / "bench" / "build.py"), "--sizes", "300", "--no-memory", "--num-proc", "1"]
    modes = ["startup", "build-1", "build-N", "load_dataset", "validate", "read-shards"]
    result = subprocess.run(
        [*command, "--inputs", "mixed", "--repeat", "2", "--modes", *modes, "--scratch", str(tmp_path / "runs")],
        capture_output=True,
        text=True,
        timeout=1200,  # a hang guard: a process per mode and round, on a machine that may be loaded
        env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.count("# validate left 0 entries in HF_DATASETS_CACHE") == 2
    assert "every build (4) wrote the same Parquet bytes: True" in result.stdout
    assert not any((tmp_path / "runs").iterdir())


def test_without_the_real_texts_the_bench_says_so_in_one_line_and_writes_nothing(tmp_path: Path) -> None:
    scratch, missing = tmp_path / "runs", tmp_path / "no-data"
    result = subprocess.run(
        [sys.executable, str(REPO / "bench" / "build.py"), "--scratch", str(scratch), "--data", str(missing)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .endswith(
            f"--data {missing}: no such folder; the realistic inputs draw their texts from it (or: --inputs mixed)"
        )
    )
    assert result.stdout == "" and not scratch.exists()


_MODES = ["build-1", "build-N", "build-N-small", "load_dataset", "validate", "read-shards", "cpu-loop", "startup"]


@settings(max_examples=100, deadline=None)
@given(
    st.permutations(_MODES).flatmap(lambda modes: st.integers(1, len(modes)).map(lambda k: modes[:k])),
    st.integers(0, 9),
)
def test_the_builds_take_turns_running_first(bench: ModuleType, modes: list[str], round_: int) -> None:
    order = bench.round_modes(modes, round_)
    assert sorted(order) == sorted(modes)
    builds = [mode for mode in modes if mode.startswith("build-")]
    expected = builds[::-1] if round_ % 2 else builds
    assert [mode for mode in order if mode.startswith("build-")] == expected
    for index, mode in enumerate(modes):
        if not mode.startswith("build-"):
            assert order[index] == mode  # every other mode keeps its place
    if len(builds) > 1:
        firsts = {next(m for m in bench.round_modes(modes, r) if m in builds) for r in (round_, round_ + 1)}
        assert firsts == {builds[0], builds[-1]}  # two rounds in a row: the first and the last build lead once
