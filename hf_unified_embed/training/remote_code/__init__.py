"""Modelling code that hf-unified-embed writes next to the weights of a model, for people who load it without this package.

Each file here imports only torch and transformers (never ``hf_unified_embed``): it is copied into a
saved model folder and named in that folder's ``config.json`` ``auto_map``, and transformers imports it
from there when the model is loaded with ``trust_remote_code=True``. The package imports the same
files itself, so what it trains and what a user loads run one piece of code.
"""

from __future__ import annotations

from pathlib import Path

#: The folder of the files.
REMOTE_CODE_DIR = Path(__file__).resolve().parent
