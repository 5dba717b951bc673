"""A model's results beside a reference model's (its base) on the same suite, with the difference.

``hf-unified-embed evaluate MODEL SUITE --reference BASE`` scores both and prints one table::

    evaluation  kind       n    metric            model   base    difference
    ----------  ---------  ---  ----------------  ------  ------  ----------
    faq         retrieval  40   cosine_ndcg@10*   0.8123  0.7711  +0.0412

The results JSON keeps the model's results as they are and adds the reference's under ``reference``
(:func:`reference_section`), so a card built from the file still describes the model alone.
"""

from __future__ import annotations

from typing import Any

from hf_unified_embed.evaluation.results import SuiteResults, aligned_table


def metric_differences(results: SuiteResults, reference: SuiteResults) -> dict[str, dict[str, float]]:
    """Model minus reference, per evaluation and reported metric, where both measured it."""
    differences: dict[str, dict[str, float]] = {}
    reference_names = {entry.name for entry in reference.entries}
    for entry in results.entries:
        if entry.name not in reference_names:
            continue
        theirs = reference[entry.name].metrics
        differences[entry.name] = {
            key: value - theirs[key] for key, value in entry.reported_metrics.items() if key in theirs
        }
    return differences


def format_comparison(results: SuiteResults, reference: SuiteResults, digits: int = 4) -> str:
    """The reported metrics of both models side by side (``*`` marks the primary), and model − reference.

    A set the reference was not scored on (a ``forgetting`` set, which compares a model with the reference
    itself) shows the model's value alone.
    """
    differences = metric_differences(results, reference)
    rows = [["evaluation", "kind", "n", "metric", results.model_name, reference.model_name, "difference"]]
    if results.model_name == reference.model_name:
        rows[0][4:6] = ["model", "reference"]
    for entry in results.entries:
        for key, value in entry.reported_metrics.items():
            star = "*" if key == entry.primary_metric else ""
            difference = differences.get(entry.name, {}).get(key)
            theirs = "" if difference is None else f"{value - difference:.{digits}f}"
            shown = "" if difference is None else f"{difference:+.{digits}f}"
            rows.append(
                [entry.name, entry.kind, str(entry.num_examples), key + star, f"{value:.{digits}f}", theirs, shown]
            )
    return aligned_table(rows)


def reference_section(reference: SuiteResults, results: SuiteResults) -> dict[str, Any]:
    """What the results JSON holds of the reference: its name, its results per set and the differences."""
    return {
        "model": reference.model_name,
        "results": {entry.name: entry.to_dict() for entry in reference.entries},
        "difference": metric_differences(results, reference),
    }
