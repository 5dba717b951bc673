"""The package's one error hierarchy: every problem a user can fix in an input is an :class:`HfUnifiedEmbedError`.

The command line prints such an error as one located line and exits with code 2; any other exception
is a bug and keeps its traceback (exit code 1). Each class keeps a standard base next to it
(``ValueError``, ``FileNotFoundError``, ...) so that code written against those still catches it.

=========================  ===========================================================  ==============
class                      meaning                                                      also a
=========================  ===========================================================  ==============
``UsageError``             command-line options that do not fit together                 —
``RecipeError``            a build or training recipe is malformed (file, key)           ``ValueError``
``NameRuleError``          a task, config or split name breaks the naming rule           ``ValueError``
``InputError``             an input exists but cannot be used as it is                   ``ValueError``
``SourceFormatError``      a raw input file cannot be read as its format (file:line)     ``InputError``
``UnifiedSchemaError``     a row or dataset breaks the unified schema (file, task, row)  ``InputError``
``SuiteError``             an evaluation suite is malformed (suite, entry, field)        ``ValueError``
``EvaluationDataError``    an evaluation set's rows do not fit its kind (set, row)       ``SuiteError``
``MergeError``             inputs that cannot be merged (input, tensor)                  ``ValueError``
``LossOptionError``        a loss's options are out of range or do not fit together      ``ValueError``
``LossFitError``           a task's rows lack what its loss reads (task, loss, field)    ``InputError``
``ArgumentError``          a Python call's argument has a wrong type or value (name)     ``ValueError``, ``TypeError``
``InputNotFoundError``     a named input (file, folder, model) does not exist            ``FileNotFoundError``
``OutputError``            the output cannot be written where asked                      ``OSError``
``OutputExistsError``      the output exists and ``overwrite`` was not given             ``FileExistsError``
``SecretLeakError``        a file about to be written or uploaded holds a secret        —
``HubError``               the Hub cannot be reached or refused a request (repo, why)   ``OSError``
``AfterTrainingError``     training finished and the model was saved; a later step failed  —
``IncompatibleStackError`` an installed package is too old, too new or missing for a path  —
=========================  ===========================================================  ==============
"""

from __future__ import annotations

import reprlib
from collections.abc import Sized
from pathlib import Path

#: Characters of a user's value an error message quotes; the rest is counted (a 10 MB value is not echoed).
ECHO_LIMIT = 200


def _bounded_repr() -> reprlib.Repr:
    bounded = reprlib.Repr()
    bounded.maxlevel, bounded.maxstring, bounded.maxother = 4, ECHO_LIMIT, ECHO_LIMIT
    bounded.maxlist = bounded.maxtuple = bounded.maxset = bounded.maxfrozenset = bounded.maxdict = 32
    return bounded


_BOUNDED = _bounded_repr()


def shown(value: object, limit: int = ECHO_LIMIT) -> str:
    """``repr(value)`` as an error message quotes it: at most ``limit`` characters, then ``… (N characters)``.

    The one way every error quotes a user's value. A short value reads exactly as ``repr``; a long string is
    cut and its length given; a container is cut while it is written (``reprlib``), never rendered whole
    first: a YAML list of millions of aliased elements costs a few microseconds, not a 25 MB line.
    """
    if isinstance(value, str):
        return repr(value) if len(value) <= limit else f"{value[:limit]!r}… ({len(value):,} characters)"
    text = _BOUNDED.repr(value)
    size = f"{len(value):,} items" if isinstance(value, Sized) else f"{len(text):,}+ characters"
    return text if len(text) <= limit else f"{text[:limit]}… ({size})"


def one_line(text: object, limit: int | None = None) -> str:
    """``text`` on one line (a library's multi-line message inside ours), cut after ``limit`` characters."""
    line = " ".join(str(text).split())
    return line if limit is None or len(line) <= limit else line[: limit - 1] + "…"


class HfUnifiedEmbedError(Exception):
    """Base of every error caused by an input, recipe, data file or output location; never by a bug."""

    def within(self, where: str) -> HfUnifiedEmbedError:
        """This error with ``where`` (the file and key that led to it) in front of its message; the class
        and attributes stay. A message that already starts with ``where`` is left as it is."""
        if not str(self).startswith(where):
            self.args = (f"{where}: {self}", *self.args[1:])
        return self


class UsageError(HfUnifiedEmbedError):
    """Command-line options that do not fit together."""


class RecipeError(HfUnifiedEmbedError, ValueError):
    """A build or training recipe is malformed; the message names the recipe file and the key."""


class NameRuleError(HfUnifiedEmbedError, ValueError):
    """A task, config or split name that could escape its folder or break the Hub layout."""


class InputError(HfUnifiedEmbedError, ValueError):
    """An input file or folder exists but cannot be used as it is (the message names it and why)."""


class SourceFormatError(InputError):
    """A raw input file cannot be read as its declared format.

    The message names the file, the line, row or byte offset, the field and what was expected; the
    same facts are kept as attributes for programs.
    """

    def __init__(
        self,
        message: str,
        *,
        file: str | Path | None = None,
        line: int | None = None,
        field: str | None = None,
        expected: str | None = None,
    ) -> None:
        self.file, self.line, self.field, self.expected = (str(file) if file else None), line, field, expected
        where = str(file) if file is not None else ""
        if line is not None:
            where += f":{line}" if where else f"line {line}"
        parts = [where] if where else []
        if field is not None:
            parts.append(f"field {shown(field)}")
        text = f"{', '.join(parts)}: {message}" if parts else message
        if expected is not None:
            text += f" (expected {expected})"
        super().__init__(text)


class UnifiedSchemaError(InputError):
    """A row or dataset does not follow the unified schema.

    The message names where the problem is (source file, task, row index, field) so it can be fixed
    in the input; the same facts are kept as attributes for programs.
    """

    def __init__(
        self,
        message: str,
        *,
        task: str | None = None,
        row: int | None = None,
        field: str | None = None,
        source: str | None = None,
    ) -> None:
        self.task, self.row, self.field, self.source = task, row, field, source
        where = [
            f"{label} {shown(value)}" if label != "row" else f"row {value}"
            for label, value in (("file", source), ("task", task), ("row", row), ("field", field))
            if value is not None
        ]
        super().__init__(f"{', '.join(where)}: {message}" if where else message)


class SuiteError(HfUnifiedEmbedError, ValueError):
    """An evaluation suite is malformed, or its data do not fit an entry's kind."""


class EvaluationDataError(SuiteError):
    """An evaluation set's rows cannot feed its evaluator kind; names the set, row and field."""

    def __init__(self, message: str, *, evaluation: str, row: int | None = None, field: str | None = None) -> None:
        where = f"evaluation {shown(evaluation)}" + (f", row {row}" if row is not None else "")
        where += f", field {shown(field)}" if field is not None else ""
        super().__init__(f"{where}: {message}")


class MergeError(HfUnifiedEmbedError, ValueError):
    """Inputs that cannot be merged: the message names the input, the tensor and what was expected."""


class LossOptionError(HfUnifiedEmbedError, ValueError):
    """A loss's options are out of range or do not fit together; the message names the option and the value."""


class LossFitError(InputError):
    """A loss cannot read a task's rows: the message names the task, the loss, what the rows lack and which losses fit."""


class ArgumentError(HfUnifiedEmbedError, ValueError, TypeError):
    """An argument of a Python call has the wrong type or value: the message names the argument and what is accepted."""


class InputNotFoundError(HfUnifiedEmbedError, FileNotFoundError):
    """A file, folder or model named in a command or recipe does not exist."""


class OutputError(HfUnifiedEmbedError, OSError):
    """The output cannot be written where asked (not a folder, not writable, overlaps an input)."""


class OutputExistsError(OutputError, FileExistsError):
    """The output exists and is not empty, and ``overwrite`` was not given."""


class SecretLeakError(HfUnifiedEmbedError):
    """A file about to be kept or uploaded still holds a token or password."""


class HubError(HfUnifiedEmbedError, OSError):
    """The Hugging Face Hub cannot be reached (offline mode, no connection) or refused a request
    (no token, no permission, a bad revision); the message names the repository and the cause."""


class AfterTrainingError(HfUnifiedEmbedError):
    """Training finished and the model was saved, but a later step (evaluation, card, push) failed.

    ``model_dir`` is where the trained model is; the message says which step failed and why.
    """

    def __init__(self, message: str, *, model_dir: Path, step: str) -> None:
        self.model_dir, self.step = model_dir, step
        super().__init__(f"the trained model is saved in {model_dir}, but {step} failed: {message}")


class IncompatibleStackError(HfUnifiedEmbedError):
    """An installed package is missing, too old or too new for what was asked (LoRA, FSDP, a mergekit method).

    The message names the package, the installed and the required versions, who requires them, and the
    ``pip install`` command that fixes it (:mod:`hf_unified_embed.utils.stack`).
    """
