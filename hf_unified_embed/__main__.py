"""``python -m hf_unified_embed``: the command line, as the ``hf-unified-embed`` console script."""

import sys

from hf_unified_embed.cli.main import main

sys.exit(main())
