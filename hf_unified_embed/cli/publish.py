"""``hf-unified-embed push-dataset`` and ``push``: upload a unified dataset or a model folder to the Hub."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from hf_unified_embed.cli.arg_types import path


def _add_hub_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--private", action="store_true", help="create the repository as private")
    parser.add_argument("--revision", help="branch to commit to (created if missing)")
    parser.add_argument("--create-pr", action="store_true", help="open a pull request instead of committing")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print the files and the card exactly as they would be uploaded (and, for a model, what its users "
        "need to load it); send nothing",
    )
    parser.add_argument("--token", help="Hugging Face token (default: the logged-in user's)")


def register(subparsers: Any) -> None:
    dataset = subparsers.add_parser(
        "push-dataset",
        help="upload a unified dataset folder to the Hub",
        description="Upload a folder written by `build` as a dataset repository.",
    )
    dataset.add_argument("folder", type=path, help="unified dataset folder")
    dataset.add_argument("repo_id", help="dataset repository id, e.g. user/unified-embed-data")
    _add_hub_options(dataset)
    dataset.set_defaults(func=run_push_dataset)

    model = subparsers.add_parser(
        "push",
        help="upload a model folder to the Hub",
        description="Upload a saved model folder (with its README.md card) as a model repository. The uploaded "
        "card names REPO_ID wherever the local one names the folder; the folder itself is not changed.",
    )
    model.add_argument("model_dir", type=path, help="model folder (e.g. a SentenceTransformer.save() output)")
    model.add_argument("repo_id", help="model repository id, e.g. user/my-embedder")
    _add_hub_options(model)
    model.set_defaults(func=run_push_model)


def _report(result: Any) -> int:
    from hf_unified_embed.hub.publishing import PushPlan

    print(
        result.describe()
        if isinstance(result, PushPlan)
        else f"uploaded: {getattr(result, 'commit_url', None) or getattr(result, 'pr_url', None) or result}"
    )
    return 0


def run_push_dataset(args: argparse.Namespace) -> int:
    from hf_unified_embed.hub.publishing import push_unified

    return _report(
        push_unified(
            args.folder,
            args.repo_id,
            private=args.private,
            token=args.token,
            revision=args.revision,
            create_pr=args.create_pr,
            dry_run=args.dry_run,
        )
    )


def run_push_model(args: argparse.Namespace) -> int:
    from hf_unified_embed.hub.consumers import consumer_needs
    from hf_unified_embed.hub.publishing import push_folder

    status = _report(
        push_folder(
            args.model_dir,
            args.repo_id,
            repo_type="model",
            private=args.private,
            revision=args.revision,
            create_pr=args.create_pr,
            token=args.token,
            dry_run=args.dry_run,
        )
    )
    if not args.dry_run:  # a dry run printed them with the card; after an upload they still concern its users
        for warning in consumer_needs(args.model_dir).warnings:
            print(f"warning: {warning}", file=sys.stderr)
    return status
