"""``python -m hf_unified_embed``: the command line, as the ``hf-unified-embed`` console script."""

from hf_unified_embed.cli.main import run

run()
