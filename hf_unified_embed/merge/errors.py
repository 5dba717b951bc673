"""The one exception type of the merge tool."""

from __future__ import annotations


class MergeError(ValueError):
    """Inputs that cannot be merged: the message names the input, the tensor and what was expected.

    A ``ValueError`` so that the command line reports it without a traceback (exit code 2).
    """
