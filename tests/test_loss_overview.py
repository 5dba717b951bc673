"""The "which loss for my data" table is generated from the losses' own declarations.

A user's loss is listed the way an installed package adds one: an entry point of the group
``hf_unified_embed.losses``. The test writes such a package (a module with a loss that declares its
layout, and its ``.dist-info`` with the entry point) and finds the loss in the table, in the rows of
the task types it declares and only there.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hf_unified_embed import losses as package_losses
from hf_unified_embed.losses.overview import DATA_SHAPES, loss_overview_markdown

USER_PACKAGE = '''
from hf_unified_embed.losses import ColumnLayout, GURLoss


class TwoViewClusterLoss(GURLoss):
    """A user's loss: two positives of a cluster per row, no labels, clustering tasks only."""

    def column_layout(self, task_type: str, negatives_per_query: int) -> ColumnLayout:
        return ColumnLayout(positives=2, task_types=("clustering",))
'''


def _rows(table: str) -> list[list[str]]:
    lines = table.strip().splitlines()
    assert lines[0] == "| data shape | task type | recommended | also learns from these rows |"
    assert lines[1] == "|---|---|---|---|"
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines[2:]]


@pytest.fixture
def user_loss_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A package that registers ``TwoViewClusterLoss`` as an installed distribution would."""
    (tmp_path / "cluster_losses.py").write_text(USER_PACKAGE)
    info = tmp_path / "cluster_losses-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: cluster-losses\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[hf_unified_embed.losses]\nTwoViewClusterLoss = cluster_losses:TwoViewClusterLoss\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))


def test_every_loss_of_the_package_is_in_the_table_with_its_columns() -> None:
    rows = _rows(loss_overview_markdown())
    listed = {name for row in rows for cell in row[2:] for name in re.findall(r"`(\w+Loss)`:", cell)}
    describable = set(package_losses.__all__) - {"ColumnLayout", "LossParts", "EmbeddingLoss", "KeepBaseLoss"}
    assert describable <= listed
    by_shape = {row[0]: row for row in rows}
    graded, binary = by_shape[DATA_SHAPES[0].description], by_shape[DATA_SHAPES[1].description]
    assert (graded[1], binary[1]) == ("`sts`", "`pair_classification`")
    assert "`CoDiEmbSTSLoss`: query, positive_1 + label: score" in graded[2]
    assert "`CoSENTLoss`: query, positive_1 + label: score" in graded[2]
    # the defects: listed for scored pairs, they trained with loss 0.0
    assert "DistillKLLoss" not in graded[2] + graded[3] and "OnlineContrastiveLoss" not in graded[2] + graded[3]
    assert "`OnlineContrastiveLoss`: query, positive_1 + label: score" in binary[2]
    # a loss that ignores the scores is not recommended for scored pairs, and the table says what it ignores
    assert "`MultipleNegativesRankingLoss`: query, positive_1, negative_1..K− — ignores the scores" in graded[3]
    pairs = by_shape[DATA_SHAPES[2].description]
    assert "`MultiPositiveInfoNCELoss`: query, positive_1, negative_1..K−" in pairs[2]
    assert "CoDiEmbSTSLoss" not in pairs[2] + pairs[3] and "DistillKLLoss" not in pairs[2] + pairs[3]
    mined = by_shape[DATA_SHAPES[4].description]
    assert "`DistillMarginMSELoss`: query, positive_1, negative_1..K− + label: teacher_scores" in mined[2]
    assert "`CurriculumInfoNCELoss`: query, positive_1, negative_1..K− + label: difficulty" in rows[-1][2]
    for row in rows:  # a recommendation for every shape, and never of a loss that leaves part of the rows unread
        assert row[2] != "—" and "ignores" not in row[2], row


def test_a_users_registered_loss_appears_in_the_rows_of_its_task_types(user_loss_installed: None) -> None:
    rows = _rows(loss_overview_markdown())
    with_it = [row for row in rows if "`TwoViewClusterLoss`: query, positive_1..2" in row[2] + row[3]]
    assert with_it and all(row[1] == "`clustering`" for row in with_it)
    # the rows of retrieval and classification with the same shape do not offer it
    assert any("`retrieval`" in row[1] for row in rows if row[0] == with_it[0][0] and row not in with_it)


def test_without_the_package_the_users_loss_is_not_listed() -> None:
    assert "TwoViewClusterLoss" not in loss_overview_markdown()
