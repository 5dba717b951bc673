"""PNG figures for cards and reports: matplotlib, drawing into files only, from the ``plots`` extra.

matplotlib (with its fonts and image libraries, ~90 MB) is not part of the core install. A figure that is
the output asked for stops with one line naming the extra (:func:`pyplot`); a figure that only illustrates a
card or report is left out with a warning, and the card says nothing of it (:func:`optional_figure`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from types import ModuleType
from typing import TypeVar

from hf_unified_embed.errors import IncompatibleStackError
from hf_unified_embed.utils.stack import require

logger = logging.getLogger(__name__)
T = TypeVar("T")


def pyplot(feature: str, extra: str = "plots") -> ModuleType:
    """``matplotlib.pyplot`` on the file-only Agg backend (never a window), or :class:`IncompatibleStackError`
    naming ``extra`` when matplotlib is not installed."""
    matplotlib = require("matplotlib", extra=extra, feature=feature)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def optional_figure(draw: Callable[[], T], what: str) -> T | None:
    """``draw()``, or ``None`` with one warning when matplotlib is missing: the picture is left out, the rest
    of the output is written as usual."""
    try:
        return draw()
    except IncompatibleStackError as error:
        logger.warning("%s left out: %s", what, error)
        return None
