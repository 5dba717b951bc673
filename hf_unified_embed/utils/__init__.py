"""Small utilities every sub-package uses: output folders, secret redaction, names, YAML files, type checks,
user plug-ins, launcher processes, dependency checks, local-or-Hub locations and card templates.

Nothing here imports torch, datasets or sentence-transformers at module level, so the light commands
(``validate``, ``train --check`` of a typo) stay fast. One of them is a headline name, re-exported here for
its API page: :func:`~hf_unified_embed.utils.model_loading.resolve_model`.
"""

from hf_unified_embed.utils.model_loading import resolve_model

__all__ = ["resolve_model"]
