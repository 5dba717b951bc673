"""``python -m hf_unified_embed``: the command line, as the ``hf-unified-embed`` console script."""

import sys

try:
    from hf_unified_embed.cli.main import run
except KeyboardInterrupt:  # Ctrl-C while the command line is imported, before it handles Ctrl-C itself
    print("interrupted", file=sys.stderr)
    sys.exit(130)

run()
