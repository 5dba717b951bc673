"""What ``validate`` and the load paths do not repeat or import (issue 38, item 6: validate at read speed).

* the schema's Arrow types are a pyarrow constant equal to the ``datasets`` features', so checking a
  folder needs no ``datasets`` import (a second of start-up); ``UNIFIED_FEATURES`` is still there;
* ``load_unified`` / ``stream_unified`` check a local folder's card, layout and shard schemas once, not
  once to list the tasks and again before the row check.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from datasets import Dataset, DatasetDict

import hf_unified_embed.data.hub_layout as hub_layout
from hf_unified_embed import schema
from hf_unified_embed.data.hub_layout import load_unified, save_unified, stream_unified


def test_the_arrow_schema_is_the_features_schema() -> None:
    assert schema.UNIFIED_ARROW_SCHEMA.equals(schema.UNIFIED_FEATURES.arrow_schema)
    for with_difficulty in (False, True):
        assert schema.unified_arrow_schema(with_difficulty).equals(
            schema.unified_features(with_difficulty).arrow_schema
        )
    assert tuple(schema.UNIFIED_FEATURES) == schema.UNIFIED_COLUMNS
    assert schema.DIFFICULTY_FEATURE.dtype == "float32"
    with pytest.raises(AttributeError):
        schema.NOT_A_NAME  # noqa: B018


def test_the_schema_module_does_not_import_datasets() -> None:
    code = "import sys, hf_unified_embed.schema; print('datasets' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert result.stdout.strip() == "False"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    rows = [
        {
            "task": "qa",
            "task_type": "retrieval",
            "query_instruction": "",
            "document_instruction": "",
            "query": f"query {index}",
            "positives": [f"passage {index}"],
            "negatives": [],
            "positive_scores": [],
            "negative_scores": [],
        }
        for index in range(20)
    ]
    return save_unified(
        DatasetDict({"qa": Dataset.from_list(rows, features=schema.UNIFIED_FEATURES)}), tmp_path / "folder"
    )


@pytest.mark.parametrize("reader", [load_unified, stream_unified], ids=["load", "stream"])
def test_a_local_folder_is_checked_once(folder: Path, monkeypatch: pytest.MonkeyPatch, reader: Any) -> None:
    calls: list[str] = []
    for name in ("check_layout", "check_shard_schemas"):
        original = getattr(hub_layout, name)

        def counted(*args: Any, _name: str = name, _original: Any = original, **kwargs: Any) -> Any:
            calls.append(_name)
            return _original(*args, **kwargs)

        monkeypatch.setattr(hub_layout, name, counted)
    monkeypatch.setattr(
        "hf_unified_embed.data.row_check.check_layout",
        lambda *args, **kwargs: pytest.fail("the row check checked the layout again"),
    )
    tasks = reader(folder)
    assert list(tasks) == ["qa"]
    assert calls == ["check_layout", "check_shard_schemas"]


def test_validate_does_not_import_datasets(folder: Path) -> None:
    # The whole command reads with pyarrow alone: importing datasets would cost a second of start-up.
    code = (
        "import sys\n"
        "from hf_unified_embed.cli.main import main\n"
        "assert main(['validate', sys.argv[1]]) == 0\n"
        "print('datasets' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(folder)], capture_output=True, text=True, check=True, timeout=120
    )
    assert result.stdout.strip().splitlines()[-1] == "False"
