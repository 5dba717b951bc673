"""The located errors (file, task, row, field) and a task's differing instructions quote their values bounded.

Issue 37, item 8: every value an error echoes goes through :func:`hf_unified_embed.errors.shown`, also the
names a located error puts in front of its message and the instructions a task mixes.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pytest

from hf_unified_embed.errors import ECHO_LIMIT, EvaluationDataError, SourceFormatError, UnifiedSchemaError
from hf_unified_embed.schema import task_instruction

HUGE = "x" * 1_000_000
#: The located prefix of three quoted values, each cut to the limit, plus the message: well under this.
BOUND = 4 * ECHO_LIMIT + 400


@pytest.mark.parametrize(
    "error",
    [
        lambda: UnifiedSchemaError("bad", task=HUGE, row=3, field=HUGE, source=HUGE),
        lambda: SourceFormatError("bad", file="rows.jsonl", line=2, field=HUGE),
        lambda: EvaluationDataError("bad", evaluation=HUGE, row=1, field=HUGE),
    ],
)
def test_a_located_error_quotes_huge_names_bounded(error: Callable[[], Exception]) -> None:
    message = str(error())
    assert len(message) < BOUND and "(1,000,000 characters)" in message, message[:500]


def test_short_names_read_as_before() -> None:
    assert str(UnifiedSchemaError("bad", task="t", row=0, field="query", source="a.jsonl")) == (
        "file 'a.jsonl', task 't', row 0, field 'query': bad"
    )


def test_a_task_mixing_huge_instructions_is_refused_in_one_short_line() -> None:
    table = pa.table({"query_instruction": [HUGE, HUGE + "y", "z"]})
    with pytest.raises(UnifiedSchemaError) as refused:
        task_instruction(table, "query_instruction", "t")
    message = str(refused.value)
    assert len(message) < BOUND and "differs within the task" in message and "\n" not in message, message[:500]
