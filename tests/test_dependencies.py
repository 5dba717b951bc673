"""Declared ranges, the two locks, the drift report and the run-time stack checks agree with each other."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from hypothesis import given, settings
from hypothesis import strategies as st
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from hf_unified_embed.errors import IncompatibleStackError
from hf_unified_embed.utils import stack

REPO = Path(__file__).resolve().parent.parent
DEPS = REPO / ".ci" / "deps.py"


def _deps_module():
    spec = importlib.util.spec_from_file_location("ci_deps", DEPS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


deps = _deps_module()


def declared_requirements() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    texts = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        texts += extra
    return [Requirement(text) for text in texts]


@pytest.mark.parametrize("lock", ["constraints.txt", "constraints-oldest.txt"])
def test_every_lock_lies_inside_the_declared_ranges(lock: str) -> None:
    pins = deps.read_lock(REPO / lock)
    outside = [
        f"{req.name} {pins[deps.canonical(req.name)]} not in {req.specifier}"
        for req in declared_requirements()
        if deps.canonical(req.name) in pins and not req.specifier.contains(pins[deps.canonical(req.name)])
    ]
    assert not outside, f"{lock} pins versions that pyproject.toml excludes: {outside}"


def test_every_declared_lower_bound_is_the_version_the_oldest_lock_tests() -> None:
    # torch is the exception (only its 2.13.0 CPU build is installable here); docs/dependencies.md says why.
    completed = subprocess.run(
        [sys.executable, str(DEPS), "bounds", str(REPO / "constraints-oldest.txt"), "--extra", "dev"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr


def test_the_lock_pins_torch_without_its_local_label() -> None:
    assert deps.read_lock(REPO / "constraints.txt")["torch"] == "2.13.0"


def test_the_installed_stack_runs_lora() -> None:
    stack.check("peft: (LoRA)", stack.peft_needs())  # the lock is a LoRA-capable set


def test_lora_under_a_transformers_that_wants_a_newer_peft_names_package_versions_and_fix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # What transformers 5.24.0 did on 2026-11-24: MIN_PEFT_VERSION 0.22.0, with PEFT 0.21.2 the newest release.
    monkeypatch.setattr("transformers.integrations.peft.MIN_PEFT_VERSION", "0.22.0")
    versions = {"transformers": "5.24.0", "peft": "0.21.2"}
    real_version = stack.metadata.version
    monkeypatch.setattr(stack.metadata, "version", lambda package: versions.get(package) or real_version(package))
    with pytest.raises(IncompatibleStackError) as error:
        stack.check("peft: (LoRA)", stack.peft_needs(), origin="r.yaml")
    transformers_range = stack.declared("transformers", "lora").specifier
    assert str(transformers_range) == "<5.22,>=5.18", "the lora extra's range, narrower than the core's"
    assert str(error.value) == (
        "r.yaml: peft: (LoRA) needs peft>=0.22.0 (transformers 5.24.0 requires it), but peft 0.21.2 is installed; "
        f"fix: pip install 'transformers{transformers_range}' (hf-unified-embed's tested range), "
        "or pip install 'peft>=0.22.0'"
    )


@settings(max_examples=20, deadline=None)
@given(minor=st.integers(min_value=22, max_value=40))
def test_a_transformers_the_core_allows_is_never_blamed_outside_lora(minor: int) -> None:
    """transformers 5.22+ is outside only the ``lora`` extra's range: a DeepSpeed run that lacks deepspeed is
    told to install deepspeed, not to go back to an older transformers."""
    versions = {"transformers": f"5.{minor}.0"}
    with pytest.MonkeyPatch.context() as patch:
        real_version = stack.metadata.version
        patch.setattr(stack.metadata, "version", lambda p: versions.get(p) or real_version(p))
        patch.setattr(
            stack,
            "installed_version",
            lambda p: None if p == "deepspeed" else Version(versions.get(p) or real_version(p)),
        )
        with pytest.raises(IncompatibleStackError) as error:
            stack.check("DeepSpeed", [stack.Need("deepspeed", SpecifierSet(">=0.9.3"), f"transformers 5.{minor}.0")])
    message = str(error.value)
    assert message.endswith("fix: pip install 'deepspeed>=0.9.3'"), message
    assert stack.declared("transformers").specifier.contains(f"5.{minor}.0")
    assert not stack.declared("transformers", "lora").specifier.contains(f"5.{minor}.0")


def test_merge_methods_check_mergekit_against_the_merge_extras_range() -> None:
    (need,) = stack.mergekit_needs()
    assert str(need.specifier) == ">=0.1.5"


def test_a_missing_package_is_named_with_its_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    real = stack.installed_version
    monkeypatch.setattr(stack, "installed_version", lambda p: None if p == "mergekit" else real(p))
    with pytest.raises(
        IncompatibleStackError, match=r"mergekit is not installed; fix: pip install 'hf-unified-embed\[merge\]'"
    ):
        stack.check("merge method 'ties'", stack.mergekit_needs())
    with pytest.raises(
        IncompatibleStackError,
        match=r"needs deepspeed>=[0-9.]+ \(transformers .* requires it\), but deepspeed is not installed",
    ):
        stack.check("DeepSpeed", stack.deepspeed_needs())


def test_drift_report_puts_each_failure_on_the_package_that_raised(tmp_path: Path) -> None:
    lock = tmp_path / "lock.txt"
    lock.write_text("# a lock\ntransformers==0.0.1\npytest==0.0.1\n")
    junit = tmp_path / "junit.xml"
    site = "/v/lib/python3.11/site-packages"
    junit.write_text(
        f"""<testsuites><testsuite tests="4" failures="2" errors="1" skipped="0" time="12.5">
<testcase classname="tests.test_a" name="test_lora"><failure message="ValueError: The version of PEFT">
{REPO}/tests/test_a.py:10: in test_lora
{site}/hf_unified_embed/x.py:5: in f
{site}/transformers/integrations/peft.py:408: in add_adapter
E   ValueError: The version of PEFT you are using is not compatible</failure></testcase>
<testcase classname="tests.test_b" name="test_x"><error message="boom">{REPO}/tests/test_b.py:3: AssertionError</error></testcase>
<testcase classname="tests.test_d" name="test_example"><failure message="AssertionError: exit code 2">
{REPO}/tests/test_d.py:7: AssertionError
E   AssertionError: exit code 2
stderr: error: ex.py: peft: (LoRA) needs peft&gt;=0.22.0 (transformers 5.24.0 requires it), but peft 0.21.2 is installed</failure></testcase>
<testcase classname="tests.test_c" name="test_ok"/>
</testsuite></testsuites>""",
        encoding="utf-8",
    )
    completed = subprocess.run(
        [sys.executable, str(DEPS), "drift", str(lock), str(junit)], capture_output=True, text=True, check=False
    )
    assert completed.returncode == 1
    report = completed.stdout
    assert "suite: 1 passed, 2 failed, 1 errors, 0 skipped in 12 s" in report
    assert "moved (" in report and "transformers 0.0.1 -> " in report
    assert (
        f"- transformers {Version(stack.metadata.version('transformers'))} (lock 0.0.1): 2 test(s); first tests/test_a.py::test_lora"
        in report
    )
    assert "ValueError: The version of PEFT you are using is not compatible" in report
    assert "- the project or an unknown package: 1 test(s); first tests/test_b.py::test_x" in report


@pytest.mark.parametrize("fsdp_version", [1, 2])
def test_fsdp_minimums_come_from_accelerate_and_the_installed_torch_meets_them(fsdp_version: int) -> None:
    (need,) = stack.fsdp_needs(fsdp_version)  # FSDP1's minimum has a local label accelerate writes as "2.1.0.a0+…"
    assert need.package == "torch" and need.source.startswith("accelerate ")
    stack.check(f"FSDP (fsdp_version {fsdp_version})", [need])


def test_a_lora_recipe_under_an_incompatible_peft_stops_in_preflight_with_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tiny_model_path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import yaml

    from hf_unified_embed.cli.main import main

    monkeypatch.setattr("transformers.integrations.peft.MIN_PEFT_VERSION", "99.0")
    monkeypatch.setattr("hf_unified_embed.recipe.run.prepare_run", lambda *a, **k: pytest.fail("data loaded"))
    recipe = tmp_path / "lora.yaml"
    recipe.write_text(
        yaml.safe_dump(
            {
                "base_model": tiny_model_path,
                "data": {"path": str(tmp_path)},
                "losses": {"sts": "CoDiEmbSTSLoss"},
                "peft": {"r": 4, "target_modules": ["query", "value"]},
                "output_dir": str(tmp_path / "out"),
            }
        )
    )
    assert main(["train", str(recipe)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"error: {recipe}: peft: (LoRA) needs peft>=99.0 (transformers ")
    assert (
        f"but peft {stack.installed_version('peft')} is installed; fix: " in line
        and "pip install 'peft>=99.0'" in line
    )
    assert not (tmp_path / "out").exists()
