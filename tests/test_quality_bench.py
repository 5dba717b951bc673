"""bench/quality.py: the many-task split of the shared sources, equal steps, and the report it writes."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def quality():
    spec = importlib.util.spec_from_file_location("bench_quality", REPO / "bench" / "quality.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def suite_metrics(quality, sts: float) -> dict:
    """A suite result for every column of the table: ``sts`` on STS12–15, fixed values elsewhere."""
    return {
        **{name: {"metrics": {"spearman_cosine": sts}} for name in quality.STS_MEAN},
        "stsb-dev": {"metrics": {"spearman_cosine": 0.8}},
        "sick-trial": {"metrics": {"spearman_cosine": 0.7}},
        "msmarco-dl": {"metrics": {"cosine_ndcg@10": 0.6}},
        "trecqa-test": {"metrics": {"cosine_map": 0.75}},
        "msrp-test": {"metrics": {"cosine_ap": 0.85}},
    }


def test_many_task_setting_splits_the_shared_train_files_into_at_least_20_tasks(
    quality, shared_data: Path, tmp_path: Path
) -> None:
    from hf_unified_embed.data import build_unified
    from hf_unified_embed.data.provenance import notes_of

    recipe = quality.many_task_sources(shared_data, tmp_path, None)
    # Training never reads the SemEval test files: they are the suite's STS12–15.
    assert not any(".test." in source["data_files"] for source in recipe["sources"])
    tasks = build_unified(recipe)
    assert len(tasks) >= 20
    sizes = {name: len(dataset) for name, dataset in tasks.items()}
    prefixes = {"stsb": 5_749, "sick": 4_500, "semeval12": 1_484, "msrp": 3_576, "wikiqa": 872, "trecqa": 83}
    for prefix, rows in prefixes.items():
        # Every row (answered question) of each source lands in exactly one bucket.
        assert sum(size for name, size in sizes.items() if name.split("-")[0] == prefix) == rows, prefix
    assert {name for name in tasks if name.startswith("stsb-")} == {
        "stsb-msrpar",
        "stsb-msrvid",
        "stsb-deft-forum",
        "stsb-deft-news",
        "stsb-headlines",
        "stsb-images",
    }
    assert {name for name in tasks if name.startswith("sick-")} == {
        "sick-contradiction",
        "sick-entailment",
        "sick-neutral",
    }
    assert {"wikiqa-what", "wikiqa-who", "trecqa-what", "trecqa-other"} <= set(tasks)
    assert notes_of(tasks["wikiqa-who"])["source"] == "WikiQA train, 'who' questions"
    # Same data, one pass: shuffled and curriculum rows train these steps.
    assert quality.epoch_steps(tasks, 32) == sum(-(-size // 32) for size in sizes.values())


def test_the_shipped_defaults_train_the_tasks_the_report_measured(quality) -> None:
    import yaml

    spec = importlib.util.spec_from_file_location("demo", REPO / "examples" / "demo.py")
    assert spec is not None and spec.loader is not None
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    recipe = yaml.safe_load((REPO / "examples" / "recipes" / "train.yaml").read_text(encoding="utf-8"))
    # `make demo` trains the shipped recipe itself, not a copy of its settings.
    assert demo.SHIPPED_RECIPE == REPO / "examples" / "recipes" / "train.yaml"
    # docs/quality.md chose the default on these tasks (MSRP trained cost general retrieval).
    assert recipe["data"]["tasks"] == list(quality.RECIPE_TASKS)
    assert set(quality.RECIPE_TASKS) <= set(quality.MAIN_SOURCES)
    assert recipe["losses"]["retrieval"] == {
        "name": "MultiPositiveInfoNCELoss",
        "temperature": quality.RETRIEVAL_TAU05,
    }
    # The learning rate of docs/quality.md's three-seed default ("Learning rate" section).
    assert recipe["training_args"]["learning_rate"] == 5e-5


def test_main_setting_adds_msrp_as_pairs_or_as_positives(quality, shared_data: Path) -> None:
    from hf_unified_embed.data import build_unified

    assert [source["name"] for source in quality.training_sources(shared_data, None)["sources"]] == list(
        quality.MAIN_TASKS
    )
    tasks = build_unified(quality.training_sources(shared_data, None, [*quality.MAIN_TASKS, "msrp"]))
    assert {name: tasks[name][0]["task_type"] for name in tasks} == {
        "stsb": "sts",
        "sick": "sts",
        "wikiqa": "retrieval",
        "trecqa": "retrieval",
        "msrp": "pair_classification",
    }
    assert len(tasks["msrp"]) == 3_576  # the whole train file, never val or test (the suite's MSRP AP)
    assert quality.epoch_steps(tasks, 32) == 464
    # The retrieval form keeps only the paraphrase pairs, as (anchor, positive) rows.
    positives = build_unified(quality.training_sources(shared_data, None, ["msrp-positives"]))["msrp-positives"]
    assert positives[0]["task_type"] == "retrieval"
    assert len(positives) == 2_407
    assert {score for scores in positives["positive_scores"] for score in scores} == {1.0}


def test_the_gur_lever_trains_pairs_mined_from_the_corpora_s_raw_documents(
    quality, shared_data: Path, tmp_path: Path
) -> None:
    """WikiQA's paragraphs (a line per candidate sentence, each paragraph once) and the MS MARCO passages' text."""
    import json

    from hf_unified_embed.data import build_unified

    documents = quality.gur_documents(shared_data, tmp_path)
    assert documents[1] == shared_data / "ir/msmarco-dl-subset/corpus.jsonl"
    paragraphs = [json.loads(line)["text"] for line in documents[0].read_text(encoding="utf-8").splitlines()]
    assert len(paragraphs) == len(set(paragraphs)) > 1_000
    assert paragraphs[0].split("\n")[0] == "A partly submerged glacier cave on Perito Moreno Glacier ."
    recipe = quality.training_sources(shared_data, 200, [quality.GUR_TASK], True, documents)
    (source,) = recipe["sources"]
    assert source["format"] == "raw-text" and "query_instruction" not in source  # two sentences: no roles
    pairs = build_unified(recipe)[quality.GUR_TASK]
    assert len(pairs) == 200 and pairs[0]["task_type"] == "retrieval" and len(pairs[0]["positives"]) == 1
    with pytest.raises(ValueError, match="needs the documents"):
        quality.training_sources(shared_data, None, [quality.GUR_TASK])
    options = quality.parse_options(["--device", "cpu", "--output-dir", str(tmp_path)])
    run = quality.recipe_training_args(options)
    plain, gur = (quality.recipe_row_recipe(row, options, tmp_path, row, run) for row in ("recipe", "recipe+gur"))
    assert gur["data"]["tasks"] == [*plain["data"]["tasks"], quality.GUR_TASK]
    assert quality.GUR_TASK in quality.recipe_tasks()


def test_question_buckets_fold_rare_words_into_other(quality) -> None:
    rows = [[f"what is {i}?"] for i in range(15)] + [[f"who is {i}?"] for i in range(14)] + [["Name a fruit"]]
    key = quality._question_buckets(rows, 0)
    assert {key(row) for row in rows} == {"what", "other"}


def test_report_tables_step_ratios_and_markdown_blocks(quality, tmp_path: Path) -> None:
    metrics = {
        **{name: {"metrics": {"spearman_cosine": 0.5}} for name in quality.STS_MEAN},
        "stsb-dev": {"metrics": {"spearman_cosine": 0.8}},
        "sick-trial": {"metrics": {"spearman_cosine": 0.7}},
        "msmarco-dl": {"metrics": {"cosine_ndcg@10": 0.6}},
        "trecqa-test": {"metrics": {"cosine_map": 0.75}},
        "msrp-test": {"metrics": {"cosine_ap": 0.85}},
    }
    results = {
        "base": {"results": metrics},
        "st-baseline": {"results": metrics, "training": {"steps": 11, "timed_steps": 10, "seconds": 20.0}},
        "codiemb": {"results": metrics, "training": {"steps": 11, "timed_steps": 10, "seconds": 25.0}},
        "one-step": {"results": metrics, "training": {"steps": 1, "timed_steps": 0, "seconds": 0.0}},
    }
    ratios = quality.step_ratios(results)
    assert ratios == {"base": None, "st-baseline": 1.0, "codiemb": 1.25, "one-step": None}
    del results["one-step"]
    table = quality.markdown_table(
        {row: quality.aggregate([quality.summarize(result)]) for row, result in results.items()}, ratios
    )
    assert table.splitlines()[0].endswith("| mean (6) | step time (× ST) |")
    assert table.splitlines()[4] == (
        "| codiemb | **0.5000** | **0.8000** | **0.7000** | **0.6000** | **0.7500** | **0.8500** | **0.7000** | 1.25 |"
    )

    doc = tmp_path / "quality.md"
    doc.write_text("intro\n<!-- quality-main:begin -->\nold\n<!-- quality-main:end -->\nkept\n", encoding="utf-8")
    report = {"command": "c", "machine": "m", "seconds": 60.0, "settings": {"output_dir": "out"}}
    quality.write_report(doc, "quality-main", table, report)
    text = doc.read_text(encoding="utf-8")
    assert "old" not in text and table in text and text.startswith("intro\n") and text.endswith("kept\n")
    with pytest.raises(ValueError, match="quality-many"):
        quality.write_report(doc, "quality-many", table, report)


def test_seeds_aggregate_to_mean_and_spread_with_the_forgetting_column(quality) -> None:
    def result(sts: float, kept: float | None, seconds: float | None) -> dict:
        metrics = suite_metrics(quality, sts=sts)
        if kept is not None:
            metrics[quality.FORGETTING] = {"metrics": {"neighbour_overlap@10": kept, "similarity_spearman": 0.9}}
        training = {"steps": 5, "timed_steps": 4, "seconds": seconds} if seconds else None
        return {"results": metrics, **({"training": training} if training else {})}

    results = {
        "base": result(0.5, 1.0, None),
        "st-baseline@1": result(0.4, 0.5, 4.0),
        "st-baseline@2": result(0.6, 0.7, 4.0),
        "codiemb@1": result(0.7, 0.8, 2.0),
        "codiemb@2": result(0.9, 0.6, 6.0),
        "codiemb@3": result(0.8, 0.7, 4.0),
    }
    assert quality.row_of("codiemb+mined+keep-base@3") == "codiemb+mined+keep-base"
    ratios = quality.step_ratios(results)
    assert ratios == {"base": None, "st-baseline": 1.0, "codiemb": 1.0}
    rows = {
        row: quality.aggregate([quality.summarize(r) for k, r in results.items() if quality.row_of(k) == row])
        for row in ("base", "st-baseline", "codiemb")
    }
    mean, spread = rows["codiemb"]["STS12–15 ρ (mean)"]
    assert mean == pytest.approx(0.8) and spread == pytest.approx(0.1)
    assert rows["codiemb"][quality.FORGETTING_COLUMN] == (pytest.approx(0.7), pytest.approx(0.1))
    assert rows["base"][quality.FORGETTING_COLUMN] == (1.0, None)
    lines = quality.markdown_table(rows, ratios).splitlines()
    assert lines[0].startswith("| model | STS12–15 ρ (mean) |") and quality.FORGETTING_COLUMN in lines[0]
    assert lines[2].startswith("| base | 0.5000 |") and "| **1.0000** |" in lines[2]
    assert lines[4].startswith("| codiemb | **0.8000 ± 0.1000** |")
    # The six-column mean leaves the forgetting column out.
    assert lines[4].split(" | ")[-2] == f"**{(0.8 + 0.8 + 0.7 + 0.6 + 0.75 + 0.85) / 6:.4f}**"


def test_the_choice_rule_counts_what_is_kept_and_every_column_against_the_base(quality) -> None:
    """The best six-column mean wins only with kept >= 0.80 and no column below the base by more than one
    seed spread; the line under the table names the row."""

    def row(sts: float, kept: float, spread: float | None = None, msmarco: float = 0.6) -> dict:
        metrics = suite_metrics(quality, sts=sts)
        metrics["msmarco-dl"] = {"metrics": {"cosine_ndcg@10": msmarco}}
        metrics[quality.FORGETTING] = {"metrics": {"neighbour_overlap@10": kept, "similarity_spearman": 0.9}}
        summary = quality.summarize({"results": metrics})
        return {column: (value, spread) for column, value in summary.items()}

    table = {
        "base": row(0.5, 1.0),
        "two-epochs": row(0.9, 0.78),  # the best mean, but it gives away kept
        "merged": row(0.7, 0.82),
        "forgets-msmarco": row(0.8, 0.85, msmarco=0.55),  # MS MARCO 0.05 below the base
        "noisy": row(0.78, 0.81, spread=0.06, msmarco=0.55),  # the same drop, within one seed spread
    }
    assert quality.rule_violations(table["two-epochs"], table["base"]) == ["kept 0.7800 < 0.80"]
    assert quality.rule_violations(table["forgets-msmarco"], table["base"]) == [
        "MS MARCO nDCG@10 0.5500 < base 0.6000 - 0.0000"
    ]
    assert quality.chosen_row(table) == "noisy"
    assert quality.markdown_table(table, {}).splitlines()[-1].endswith("**noisy**")
    del table["noisy"]
    assert quality.chosen_row(table) == "merged"
    assert quality.chosen_row({"base": table["base"], "two-epochs": table["two-epochs"]}) is None
    assert quality.markdown_table({"base": table["base"]}, {}).splitlines()[-1].endswith("no row passes")


def test_rows_are_placed_against_the_kept_mean_line_through_the_base_and_the_recipe(quality) -> None:
    """A row's gap is its mean minus the straight line through (kept, mean) of ``base`` and the same seed's
    ``recipe``, then mean ± s.d. over the row's seeds: a row measured on one seed meets its own seed's line."""

    def row(mean: float, kept: float) -> dict:
        return {"STS-B dev ρ": mean, quality.FORGETTING_COLUMN: kept}

    per_seed = {
        "base": row(0.80, 1.0),
        "recipe@1": row(0.84, 0.80),
        "recipe@2": row(0.82, 0.80),  # a weaker seed: its line gives 0.81 at kept 0.90
        "recipe+outward@1": row(0.84, 0.90),  # the line of seed 1 gives 0.82 at kept 0.90
        "recipe+outward@2": row(0.82, 0.90),
        "recipe+on-the-line@1": row(0.86, 0.70),  # extrapolated: 0.80 + 0.04 * 1.5
        "recipe+inward@2": row(0.80, 0.85),  # the line of seed 2 gives 0.815
        "recipe+no-recipe-seed@3": row(0.90, 0.90),  # seed 3 has no recipe run: no line to meet
        "codiemb@1": row(0.90, 0.90),  # not a recipe row
    }
    gaps = quality.line_gaps(per_seed)
    assert set(gaps) == {"recipe+outward", "recipe+on-the-line", "recipe+inward"}
    assert gaps["recipe+outward"][0] == pytest.approx(0.015, abs=1e-12)
    assert gaps["recipe+outward"][1] == pytest.approx(0.005 * 2**0.5, abs=1e-12) and gaps["recipe+outward"][2] == 2
    assert gaps["recipe+on-the-line"] == (pytest.approx(0.0, abs=1e-12), None, 1)
    assert gaps["recipe+inward"] == (pytest.approx(-0.015, abs=1e-12), None, 1)
    table = {
        model: quality.aggregate([row for key, row in per_seed.items() if quality.row_of(key) == model])
        for model in ("base", "recipe", "recipe+outward", "recipe+on-the-line", "recipe+inward")
    }
    assert (
        quality.markdown_table(table, {}, gaps=gaps)
        .splitlines()[-1]
        .endswith(
            "recipe+outward +0.0150 ± 0.0071 (2 seeds), recipe+on-the-line +0.0000 (1 seed), recipe+inward -0.0150 (1 seed)"
        )
    )
    assert "kept–mean line" not in quality.markdown_table(table, {})
    assert quality.line_gaps({key: per_seed[key] for key in ("base", "recipe+outward@1")}) == {}
    assert quality.line_gaps({"base": row(0.80, 0.80), "recipe@1": row(0.84, 0.80), "recipe+x@1": row(0.8, 0.9)}) == {}


def test_unseen_sts_column_is_reported_outside_the_six_column_mean(quality) -> None:
    with_unseen = suite_metrics(quality, sts=0.8)
    for index, name in enumerate(quality.UNSEEN_MEAN):
        with_unseen[name] = {"metrics": {"spearman_cosine": 0.5 + index / 10}}
    rows = {
        "new": quality.aggregate([quality.summarize({"results": with_unseen})]),
        "measured before": quality.aggregate([quality.summarize({"results": suite_metrics(quality, sts=0.8)})]),
    }
    assert rows["new"][quality.UNSEEN_COLUMN] == (pytest.approx(0.65), None)
    assert quality.UNSEEN_COLUMN not in rows["measured before"]
    lines = quality.markdown_table(rows, {}).splitlines()
    assert quality.UNSEEN_COLUMN in lines[0] and lines[3].split(" | ")[-3] == "—"
    six = f"{(0.8 + 0.8 + 0.7 + 0.6 + 0.75 + 0.85) / 6:.4f}"
    assert lines[2].split(" | ")[-2] == f"**{six}**" and lines[3].split(" | ")[-2] == f"**{six}**"


def test_report_states_the_rows_own_time_so_a_resumed_table_is_not_0_min(quality, tmp_path: Path) -> None:
    """--resume and --report-only reuse rows; the "min in all" of the table is what its rows took, summed."""
    import argparse

    metrics = suite_metrics(quality, sts=0.7)
    results = {"base": {"results": metrics, "seconds": 300.0}, "codiemb@1": {"results": metrics, "seconds": 900.0}}
    doc = tmp_path / "quality.md"
    doc.write_text("<!-- q-main:begin -->\n<!-- q-main:end -->\n", encoding="utf-8")
    options = argparse.Namespace(
        output_dir=tmp_path, rows=["base", "codiemb"], device="cpu", markdown=doc, report_name="q"
    )
    quality.report(results, options, ["--report-only"])
    assert json.loads((tmp_path / "quality.json").read_text(encoding="utf-8"))["seconds"] == 1200.0
    assert "; 20.0 min in all." in doc.read_text(encoding="utf-8")


def test_the_machine_line_names_the_threads_the_runs_recorded_not_the_report_s(
    quality, tmp_path: Path, monkeypatch
) -> None:
    """A --report-only process may run with other threads than the runs it reports: the runs' own count wins."""
    import argparse

    import torch

    monkeypatch.setattr(torch, "get_num_threads", lambda: 7)
    metrics = suite_metrics(quality, sts=0.7)
    options = argparse.Namespace(output_dir=tmp_path, rows=["base", "codiemb"], device="cpu", markdown=None)

    def machine(*threads: int | None) -> str:
        results = {"base": {"results": metrics}}
        for seed, count in enumerate(threads):
            results[f"codiemb@{seed}"] = {"results": metrics, "training": {"steps": 1, "threads": count}}
        quality.report(results, options, ["--report-only"])
        return json.loads((tmp_path / "quality.json").read_text(encoding="utf-8"))["machine"]

    assert "(1 thread)" in machine(1, 1)
    assert "(1–2 threads)" in machine(2, 1)
    assert "(7 threads)" in machine(None)  # runs from before threads were recorded


def test_reduced_beir_keeps_the_first_queries_and_their_judged_passages(quality, tmp_path: Path) -> None:
    from hf_unified_embed.data import build_unified
    from hf_unified_embed.evaluation.inputs import retrieval_inputs

    source = REPO / "examples" / "data" / "msmarco-dl-sample"
    folder = quality.reduced_beir(source, tmp_path / "reduced", 2)

    def inputs(path: Path):
        source_spec = {"name": "m", "format": "beir", "task_type": "retrieval", "data_files": str(path)}
        recipe = {"sources": [{**source_spec, "options": {"qrels_split": "test"}}]}
        return retrieval_inputs(build_unified(recipe)["m"], "m")

    full, reduced = inputs(source), inputs(folder)
    kept = list(reduced.queries)
    assert kept == list(full.queries)[:2]
    # The kept queries keep every judgement; the corpus holds only passages judged for them.
    assert reduced.relevance == {query: full.relevance[query] for query in kept}
    judged = {document for query in kept for document in full.relevance[query]}
    assert set(reduced.corpus) == judged
    assert len(reduced.corpus) < len(full.corpus)
    header = (folder / "qrels" / "test.tsv").read_text(encoding="utf-8").split("\n")[0]
    assert header == "query-id\tcorpus-id\tscore"  # the source's header is kept
    assert json.loads((folder / "queries.jsonl").read_text(encoding="utf-8").split("\n")[0])["_id"]


def test_keep_rows_name_their_options_once_in_one_order(quality) -> None:
    """A keep-the-base row is codiemb plus options; the name decides the data, losses, distillation and merge."""
    for row in quality.KEEP_ROWS:
        assert quality.keep_row_options(row), row
    assert quality.keep_row_options("codiemb") == []
    assert quality.keep_row_options("codiemb+tau05+kept-merge") == ["tau05", "kept-merge"]
    for wrong in ("codiemb+mined+tau05", "codiemb+tau05+tau05", "codiemb+fast", "st-baseline+mined"):
        with pytest.raises(ValueError, match="codiemb"):
            quality.keep_row_options(wrong)


def test_resume_scores_a_reused_row_on_the_entries_added_since(quality, tiny_model_path: str, tmp_path: Path) -> None:
    import argparse

    from sentence_transformers import SentenceTransformer

    from hf_unified_embed.evaluation import run_suite
    from tests._evaluation_helpers import all_kinds_suite, write_evaluation_files

    suite = all_kinds_suite(write_evaluation_files(tmp_path / "data"))
    suite["diagnostics"] = False
    old_suite = {**suite, "evaluations": suite["evaluations"][:1]}
    saved = tmp_path / "row.json"
    run_suite(SentenceTransformer(tiny_model_path, device="cpu"), old_suite).save_json(saved)
    before = json.loads(saved.read_text())
    before["results"]["sts"]["metrics"]["spearman_cosine"] = 0.123  # kept as it is, not scored again
    options = argparse.Namespace(device="cpu", eval_max_seq_length=None, diagnostics=False)

    gone = quality.complete_evaluation(json.loads(json.dumps(before)), saved, str(tmp_path / "gone"), suite, options)
    assert gone == before  # no model to score with: the row stays as it was
    completed = quality.complete_evaluation(before, saved, tiny_model_path, suite, options)
    assert list(completed["results"]) == ["sts", "retrieval", "rerank", "paraphrase"]
    assert completed["results"]["sts"]["metrics"]["spearman_cosine"] == 0.123
    assert json.loads(saved.read_text()) == completed
    assert {row["evaluation"] for row in completed["table"]} == set(completed["results"])
    assert len(completed["model-index"][0]["results"]) == 4
    assert quality.complete_evaluation(completed, saved, "/nonexistent", suite, options) is completed


def test_sts_loss_options_reach_the_codiemb_rows_loss_tables(quality) -> None:
    """``--sts-loss`` / ``--sts-mid-layer-weight`` change the STS loss of every CoDiEmb row and nothing else."""
    import inspect
    from argparse import Namespace

    from sentence_transformers.sentence_transformer.losses import CoSENTLoss

    from hf_unified_embed.losses import AnglEJointLoss, CoDiEmbSTSLoss, MultiPositiveInfoNCELoss
    from hf_unified_embed.recipe.preflight import resolve_loss_class

    def tables(**changed):
        defaults = {
            "sts_loss": "CoDiEmbSTSLoss",
            "sts_infonce_temperature": 0.02,
            "sts_mid_layer_weight": 1.0,
            "pair_loss": "CoDiEmbSTSLoss",
        }
        return quality.codiemb_loss_tables(Namespace(**{**defaults, **changed}))

    codiemb, tau05 = tables()
    # The tables are recipe ``losses`` sections; a setting equal to the loss's default is left out, as
    # train.yaml leaves it out: CoDiEmbSTSLoss at infonce_temperature 0.02 and mid_layer_weight 1.0.
    assert codiemb["sts"] == {"name": "CoDiEmbSTSLoss"}
    parameters = inspect.signature(CoDiEmbSTSLoss).parameters
    assert (parameters["infonce_temperature"].default, parameters["mid_layer_weight"].default) == (0.02, 1.0)
    assert resolve_loss_class(codiemb["retrieval"]["name"]) is MultiPositiveInfoNCELoss
    assert codiemb["retrieval"] == {"name": "MultiPositiveInfoNCELoss"}
    assert tau05 == {
        **codiemb,
        "retrieval": {"name": "MultiPositiveInfoNCELoss", "temperature": quality.RETRIEVAL_TAU05},
    }
    assert tables(sts_mid_layer_weight=0.0)[1]["sts"]["mid_layer_weight"] == 0.0
    cosent, cosent_tau05 = tables(sts_loss="CoSENTLoss", pair_loss="AnglEJointLoss")
    assert cosent["sts"] == cosent_tau05["sts"] == {"name": "CoSENTLoss"}
    assert resolve_loss_class(cosent["sts"]["name"]) is CoSENTLoss  # sentence-transformers' own
    assert resolve_loss_class(cosent["pair_classification"]["name"]) is AnglEJointLoss


def flat(recipe: dict) -> dict:
    """A recipe's fields as ``{"section.key": value}``: a section's entries one by one (``losses.sts``,
    ``training_args.learning_rate``), a top-level value as it is."""
    items = {}
    for key, value in recipe.items():
        if isinstance(value, dict) and value:
            items.update({f"{key}.{inner}": entry for inner, entry in value.items()})
        else:
            items[key] = value
    return items


def test_the_tau05_row_is_the_shipped_recipe_but_for_what_the_bench_sets(quality, tmp_path: Path) -> None:
    """The report's default row trains train.yaml; what differs is listed here, field by field."""
    from hf_unified_embed.recipe import load_train_recipe, recipe_from_dict

    # docs/quality.md's reproduction of the default (MS MARCO 0.7992), at the recipe's task order.
    argv = ["--seeds", "42", "--rows", "codiemb+tau05", "--learning-rate", "5e-5", "--device", "cpu"]
    options = quality.parse_options([*argv, "--main-tasks", *quality.RECIPE_TASKS, "--output-dir", str(tmp_path)])
    data = tmp_path / "main-data"
    recipe = quality.row_recipe("codiemb+tau05", options, data, options.main_tasks, steps=123, name="run")
    row = flat(recipe_from_dict(recipe).to_dict())
    shipped = flat(load_train_recipe(quality.SHIPPED_RECIPE).to_dict())
    changed = {key for key in row.keys() | shipped.keys() if row.get(key, "missing") != shipped.get(key, "missing")}
    assert changed == {
        "model_name",
        "data.path",  # the folder this script builds from --data-root
        "negatives_per_query",  # --negatives (1; the recipe's 2)
        "sampler.batch_sizes",  # one --batch-size for every task
        "losses.pair_classification",  # --pair-loss; trained only with msrp in --main-tasks
        "training_args.per_device_train_batch_size",  # --batch-size (32; the recipe's 16)
        "training_args.logging_steps",  # a tenth of the steps
        "training_args.max_steps",  # the setting's steps
        "training_args.seed",
        "training_args.save_strategy",  # preflight's defaults, given by the examples' command line
        "training_args.report_to",
        "training_args.use_cpu",  # --device cpu
        "evaluation",  # the bench evaluates every model alike, after the run
        "output_dir",
    }
    assert row["data.path"] == str(data) and row["output_dir"] == str(tmp_path / "run")
    assert (row["negatives_per_query"], row["sampler.batch_sizes"]) == (1, {})
    assert row["training_args.max_steps"] == 123 and row["training_args.per_device_train_batch_size"] == 32
    assert row["losses.pair_classification"] == {"name": "CoDiEmbSTSLoss"} and row["evaluation"] is None
    # The same row at the bench's defaults also differs in its tasks and learning rate, nothing else.
    defaults = quality.parse_options(["--device", "cpu", "--output-dir", str(tmp_path)])
    default_row = flat(
        recipe_from_dict(
            quality.row_recipe("codiemb+tau05", defaults, data, defaults.main_tasks, 123, "run")
        ).to_dict()
    )
    assert {key for key in row if row[key] != default_row.get(key)} == {"data.tasks", "training_args.learning_rate"}


def test_every_trained_row_trains_through_train_from_recipe(quality, monkeypatch, tmp_path: Path) -> None:
    """Each row is its recipe run by train_from_recipe (the merges: their runs), with the row's values."""
    from types import SimpleNamespace

    import hf_unified_embed.merge
    import hf_unified_embed.recipe
    from hf_unified_embed.recipe import TrainRecipe
    from hf_unified_embed.recipe.preflight import preflight

    trained: dict[str, TrainRecipe] = {}

    def train_from_recipe(recipe: TrainRecipe, *, overwrite: bool = False):
        preflight(recipe, overwrite=overwrite)  # every loss resolves, the arguments build
        trained[Path(recipe.output_dir).name] = recipe
        return SimpleNamespace(model_dir=Path(recipe.output_dir))

    merged: dict[str, Path] = {}
    monkeypatch.setattr(hf_unified_embed.recipe, "train_from_recipe", train_from_recipe)
    monkeypatch.setattr(
        hf_unified_embed.merge, "merge_models", lambda models, method, output, **kw: merged.setdefault(method, output)
    )
    options = quality.parse_options(["--device", "cpu", "--seeds", "42", "--output-dir", str(tmp_path)])
    bench = quality.Bench(options, [])
    tasks = {"stsb": [{"task_type": "sts"}] * 40, "wikiqa": [{"task_type": "retrieval"}] * 24}
    for name in ("main", "mined", "many"):
        (tmp_path / name).mkdir()
        bench.settings[name] = quality.Setting(tmp_path / name, tasks, steps=4)
    made = {}
    for row in quality.ROWS:
        if quality.ROW_SPECS[row].merge != "kept":  # merge search over a trained run: not a recipe
            made[row] = bench.make(row, bench.key(row, 42), 42)
    assert made["base"] is None
    assert set(trained) == {
        f"{row}@42" for row in quality.ROWS if quality.ROW_SPECS[row].setting and not quality.ROW_SPECS[row].merge
    } | {"ir-leaning", "sts-leaning"}
    assert merged == {"hierarchical": tmp_path / "hierarchical-merge@42"}
    recipe = trained
    assert recipe["st-baseline@42"].sampler.kind == "proportional"
    assert recipe["st-baseline@42"].losses["sts"] == {"name": "CoSENTLoss"}
    assert recipe["codiemb@42"].sampler.interleave == "shuffled" and recipe["codiemb@42"].keep_base is None
    keep_base = recipe["codiemb+keep-base@42"].keep_base
    assert keep_base is not None and keep_base.weight == options.keep_base_weight
    assert recipe["codiemb+tau05+mined@42"].data.path == str(tmp_path / "mined")
    assert recipe["codiemb+tau05+mined@42"].losses["retrieval"]["temperature"] == quality.RETRIEVAL_TAU05
    for row, method in (("codiemb+curriculum", "exact"), ("many-curriculum", "annealing")):
        curriculum = recipe[f"{row}@42"].curriculum
        assert curriculum is not None and (curriculum.method, curriculum.teacher) == (method, str(options.base_model))
        assert recipe[f"{row}@42"].sampler.instance_order == "easy_to_hard"
    assert recipe["many-shuffled@42"].data.path == str(tmp_path / "many")
    # The merge's runs split the tasks by type and the steps by their share of an epoch.
    assert recipe["ir-leaning"].data.tasks == ["wikiqa"] and recipe["sts-leaning"].data.tasks == ["stsb"]
    assert [recipe[run].training_args["max_steps"] for run in ("ir-leaning", "sts-leaning")] == [1, 3]


def test_the_recipe_row_is_train_yaml_on_the_reports_data_with_nothing_else_changed(quality, tmp_path: Path) -> None:
    """Issue 39: the default row is examples/recipes/train.yaml pointed at the report's data, loaded as it is."""
    from hf_unified_embed.recipe import load_train_recipe, recipe_from_dict

    options = quality.parse_options(["--seeds", "43", "--device", "cpu", "--output-dir", str(tmp_path)])
    options.seed = 43
    data = tmp_path / "recipe-data"
    run = quality.recipe_training_args(options)
    row = flat(recipe_from_dict(quality.recipe_row_recipe("recipe", options, data, "run", run)).to_dict())
    shipped = flat(load_train_recipe(quality.SHIPPED_RECIPE).to_dict())
    changed = {key for key in row.keys() | shipped.keys() if row.get(key, "missing") != shipped.get(key, "missing")}
    # Only what a run needs and a model does not depend on: the bench's --batch-size, --learning-rate,
    # --negatives and steps do not reach it; the recipe's epochs decide the steps.
    assert changed == {
        "model_name",
        "data.path",
        "training_args.max_steps",  # -1: the recipe's num_train_epochs decides
        "training_args.seed",
        "training_args.save_strategy",
        "training_args.report_to",
        "training_args.use_cpu",
        "evaluation",
        "output_dir",
        "seed",
    }
    assert row["training_args.max_steps"] == -1 and row["seed"] == 43 and row["instructions"] is True
    assert row["data.tasks"] == list(quality.RECIPE_TASKS)


def test_recipe_levers_change_what_they_name(quality, tmp_path: Path) -> None:
    options = quality.parse_options(["--device", "cpu", "--output-dir", str(tmp_path)])
    run = quality.recipe_training_args(options)

    def recipe(row: str) -> dict:
        return quality.recipe_row_recipe(row, options, tmp_path / "data", row, run)

    plain = recipe("recipe")
    assert plain.get("keep_base") is None
    combined = recipe("recipe+batch128+keep-base+semeval12+no-instructions+2ep")
    assert combined["losses"]["retrieval"] == {**plain["losses"]["retrieval"], "mini_batch_size": 32}
    assert combined["sampler"]["batch_sizes"] == {"wikiqa": 128, "wikiqa-passages": 128, "trecqa": 16}
    assert combined["keep_base"] == {"weight": 1.0}
    assert combined["data"]["tasks"] == [*plain["data"]["tasks"], "semeval12"]
    assert combined["training_args"]["num_train_epochs"] == 2 and combined["instructions"] is False
    assert plain["training_args"]["num_train_epochs"] == 1  # the shipped recipe: the choice rule's row
    # The mined lever trains the same tasks on the mined copy of the report's data, beside it.
    mined = recipe("recipe+mined")
    assert mined["data"] == {**plain["data"], "path": str(tmp_path / "recipe-mined-data")}
    named = ("data", "model_name", "output_dir")  # what differs between any two rows: the data, the names
    assert {key: value for key, value in mined.items() if key not in named} == {
        key: value for key, value in plain.items() if key not in named
    }
    assert recipe("recipe+2ep")["losses"] == plain["losses"]  # a lever leaves the rest as it was
    assert plain == recipe("recipe")  # the shipped mapping is copied, never changed in place
    for wrong in ("recipe+keep-base+batch128", "recipe+2ep+2ep", "recipe+2ep+mined", "recipe+fast"):
        with pytest.raises(ValueError, match="recipe"):
            quality.recipe_levers(wrong)
    assert quality.parse_options(["--rows", "recipe+keep-base", "base"]).rows == ["recipe+keep-base", "base"]
    with pytest.raises(SystemExit):
        quality.parse_options(["--rows", "recipe+fast"])


def test_a_kept_merge_recipe_row_merges_its_seed_s_run_with_the_base(quality, monkeypatch, tmp_path: Path) -> None:
    """``recipe(+levers)+kept-merge`` trains nothing: it searches λ for that seed's run on the dev suite."""
    from types import SimpleNamespace

    import hf_unified_embed.merge.search

    assert quality.merged_run("recipe+kept-merge") == "recipe"
    assert quality.merged_run("recipe+keep-base+kept-merge") == "recipe+keep-base"
    assert quality.merged_run("recipe") is None and quality.merged_run("codiemb+kept-merge") is None
    assert quality.recipe_levers("recipe+2ep+kept-merge") == ["2ep"]
    for wrong in ("recipe+kept-merge+2ep", "recipe+kept-merge+kept-merge"):
        with pytest.raises(ValueError, match="kept-merge"):
            quality.recipe_levers(wrong)
    searched = {}

    def search_merge(models, method, output, **kwargs):
        searched.update(models=models, method=method, output=output, **kwargs)
        return SimpleNamespace(best=SimpleNamespace(parameters={"weight": 0.5}, admissible=True))

    monkeypatch.setattr(hf_unified_embed.merge.search, "search_merge", search_merge)
    options = quality.parse_options(["--device", "cpu", "--output-dir", str(tmp_path)])
    bench = quality.Bench(options, [])
    run, name = bench.key("recipe", 42), bench.key("recipe+kept-merge", 42)
    with pytest.raises(SystemExit, match=f"needs the {run} row first"):
        bench.make("recipe+kept-merge", name, 42)
    (tmp_path / run).mkdir()
    (tmp_path / run / "modules.json").write_text("[]")
    training = {"steps": 1516, "timed_steps": 1515, "seconds": 1.0, "train_runtime": 2.0}
    bench.results[run] = {"training": training}
    made = bench.make("recipe+kept-merge", name, 42)
    assert made.path == tmp_path / name and made.steps == 1516
    assert searched["models"] == [tmp_path / run] and searched["base"] == options.base_model
    assert searched["method"] == "task_arithmetic" and searched["search"]["weights"][-1] == 1.0
    # The choice rule's floor on kept neighbours is the dev suite's forgetting constraint.
    assert searched["constraint"]["epsilon"]["forgetting-dev"] == pytest.approx(1 - quality.KEPT_FLOOR)


def test_the_recipe_setting_is_built_with_the_build_recipes_instructions(
    quality, shared_data: Path, tmp_path: Path
) -> None:
    from hf_unified_embed.data import build_unified

    instructions = quality.build_instructions()
    documents = quality.gur_documents(shared_data, tmp_path)
    sources = quality.training_sources(shared_data, 8, quality.recipe_tasks(), True, documents)["sources"]
    tasks = build_unified({"sources": sources})
    assert list(tasks) == [*quality.RECIPE_TASKS, "semeval12", quality.GUR_TASK]
    assert tasks.pop(quality.GUR_TASK)[0]["query_instruction"] == ""  # two sentences of a document: no roles
    for name, dataset in tasks.items():
        given = instructions[quality.INSTRUCTIONS_LIKE.get(name, name)]
        assert dataset[0]["query_instruction"] == given["query_instruction"], name
    # The main setting (the earlier tables) stays without instructions.
    plain = quality.training_sources(shared_data, 8)["sources"]
    assert not any("query_instruction" in source for source in plain)


def test_recipe_table_gives_absolute_costs_and_a_peak_memory(quality) -> None:
    training = {"steps": 10, "timed_steps": 9, "seconds": 9.0, "train_runtime": 120.0, "peak_memory_mib": 2048.0}
    results = {
        "base": {"results": suite_metrics(quality, sts=0.5)},
        "recipe@1": {"results": suite_metrics(quality, sts=0.6), "training": training},
        "recipe@2": {"results": suite_metrics(quality, sts=0.7), "training": {**training, "seconds": 18.0}},
    }
    costs = quality.cost_columns(results)
    assert {column: costs[column]["recipe"] for column in costs} == {
        "seeds": "2",
        "steps": "10",
        "s / step": "1.50",
        "train min": "2.0",
        "peak memory (MiB)": "2,048",
    }
    rows = {"base": quality.aggregate([quality.summarize(results["base"])])}
    rows["recipe"] = quality.aggregate([quality.summarize(results[key]) for key in ("recipe@1", "recipe@2")])
    lines = quality.markdown_table(rows, {}, costs).splitlines()
    assert lines[0].endswith("| mean (6) | seeds | steps | s / step | train min | peak memory (MiB) |")
    assert lines[2].endswith("| — | — | — | — | — |") and lines[3].endswith("| 2 | 10 | 1.50 | 2.0 | 2,048 |")
    peak = quality.PeakMemory("cpu").peak_mib()
    assert peak is not None and peak > 0
