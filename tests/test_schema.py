"""The unified schema: declared features and every rule of validate_unified."""

from __future__ import annotations

import math

import pytest
from datasets import Dataset, DatasetDict

from hf_unified_embed.schema import (
    TASK_TYPES,
    UNIFIED_FEATURES,
    UnifiedSchemaError,
    unified_features,
    validate_unified,
)


def row(**overrides):
    base = {
        "task": "stsb",
        "task_type": "sts",
        "query_instruction": "q: ",
        "document_instruction": "q: ",
        "query": "A plane is taking off.",
        "positives": ["An air plane is taking off."],
        "negatives": [],
        "positive_scores": [1.0],
        "negative_scores": [],
    }
    return {**base, **overrides}


def test_features_declare_list_columns():
    assert set(TASK_TYPES) == {"retrieval", "sts", "pair_classification", "classification", "clustering"}
    assert UNIFIED_FEATURES["positives"].feature.dtype == "string"
    assert UNIFIED_FEATURES["positive_scores"].feature.dtype == "float32"
    assert "difficulty" in unified_features(with_difficulty=True)
    assert "difficulty" not in UNIFIED_FEATURES


def test_valid_dataset_and_dict_pass():
    dataset = Dataset.from_list([row(), row(query="x")], features=UNIFIED_FEATURES)
    validate_unified(dataset)
    validate_unified(DatasetDict({"stsb": dataset}))


@pytest.mark.parametrize(
    ("overrides", "field", "needle"),
    [
        ({"task_type": "ranking"}, "task_type", "unknown task_type"),
        ({"query": "  "}, "query", "empty"),
        ({"positive_scores": []}, "positive_scores", "exactly one score"),
        ({"positive_scores": [math.nan]}, "positive_scores", "non-finite"),
        ({"positive_scores": [math.inf]}, "positive_scores", "non-finite"),
        ({"positive_scores": [4.2]}, "positive_scores", "outside [0, 1]"),
        ({"negatives": ["n"], "negative_scores": [0.1, 0.2]}, "negative_scores", "lengths must match"),
        ({"task_type": "retrieval", "positives": [], "positive_scores": []}, "positives", "at least one positive"),
    ],
)
def test_row_errors_name_task_row_and_field(overrides, field, needle):
    rows = [row(), row(**overrides)]
    with pytest.raises(UnifiedSchemaError) as info:
        validate_unified(rows)
    assert info.value.field == field and info.value.row == 1 and info.value.task == "stsb"
    assert needle in str(info.value) and "row 1" in str(info.value)


def test_missing_and_extra_columns():
    dataset = Dataset.from_list([row()]).remove_columns("negatives")
    with pytest.raises(UnifiedSchemaError, match="missing columns"):
        validate_unified(dataset)
    with pytest.raises(UnifiedSchemaError, match="unexpected columns"):
        validate_unified(Dataset.from_list([{**row(), "label": 1}]))


def test_instructions_must_be_uniform_within_a_task():
    with pytest.raises(UnifiedSchemaError, match="differs within the task") as info:
        validate_unified([row(), row(query_instruction="other: ")])
    assert info.value.field == "query_instruction" and info.value.row == 1


def test_difficulty_column_is_allowed_but_must_be_finite():
    features = unified_features(with_difficulty=True)
    validate_unified(Dataset.from_list([{**row(), "difficulty": 0.3}], features=features))
    with pytest.raises(UnifiedSchemaError, match="difficulty"):
        validate_unified([{**row(), "difficulty": math.nan}])
