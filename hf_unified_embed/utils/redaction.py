"""Secrets are never written: token-like keys and token values are redacted in every file the package writes.

Three rules, applied by :func:`redact` (structured data: recipe copies, merge configs, evaluation
JSON, card metadata), by :func:`scrub_text` (rendered text, log records) and by :func:`scrub_folder`
(the last step before a staged output is renamed into place, see :mod:`hf_unified_embed.utils.outputs`):

* the value of any key whose name contains ``token``, ``password``, ``secret`` or ``key`` is replaced;
* Hugging Face tokens (``hf_…``, ``api_org_…``) are replaced wherever they appear in text;
* the *active* secrets — the token ``huggingface_hub`` would use (``HF_TOKEN`` or the stored login)
  and any token given to a command — are replaced in text and must not appear in any other file.

``publishing`` refuses to upload a folder in which an active secret still appears.
"""

from __future__ import annotations

import logging
import mmap
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from hf_unified_embed.errors import SecretLeakError

REDACTED = "<redacted>"

#: Keys whose values are secrets, whatever the value looks like.
SECRET_KEY = re.compile(r"token|password|passwd|secret|key", re.IGNORECASE)
#: Hugging Face user and organisation tokens.
TOKEN_VALUE = re.compile(r"\b(?:hf_[A-Za-z0-9]{30,}|api_org_[A-Za-z0-9]{30,})\b")
#: Files rewritten with their secrets replaced; any other file may only be checked.
TEXT_SUFFIXES = frozenset({".md", ".yaml", ".yml", ".json", ".jsonl", ".txt", ".csv", ".tsv", ".log", ".cfg", ".toml"})
#: Shorter strings are not treated as secrets (an empty or trivial token would match everywhere).
MIN_SECRET_LENGTH = 8

_remembered: set[str] = set()


def remember_secret(value: str | None) -> None:
    """Treat ``value`` (a token given on the command line or in a recipe) as active for this process."""
    if value and len(value) >= MIN_SECRET_LENGTH:
        _remembered.add(value)


def active_secrets() -> list[str]:
    """The token ``huggingface_hub`` would send, plus every remembered one, longest first."""
    from huggingface_hub import get_token

    secrets = set(_remembered)
    token = get_token()
    if token and len(token) >= MIN_SECRET_LENGTH:
        secrets.add(token)
    return sorted(secrets, key=len, reverse=True)


def is_secret_key(key: Any) -> bool:
    return isinstance(key, str) and SECRET_KEY.search(key) is not None


def scrub_text(text: str, secrets: Iterable[str] | None = None) -> str:
    """``text`` with Hugging Face tokens and the active secrets replaced by :data:`REDACTED`."""
    for secret in active_secrets() if secrets is None else secrets:
        text = text.replace(secret, REDACTED)
    return TOKEN_VALUE.sub(REDACTED, text)


def _may_hold_secret(value: Any) -> bool:
    # Floats and booleans are measurements and flags (``token_similarity``, ``use_auth_token: true``), never credentials.
    return value not in (None, "") and not isinstance(value, (bool, float))


def redact(data: Any, secrets: Iterable[str] | None = None) -> Any:
    """A copy of ``data`` (mappings, lists, scalars) with secret-keyed values and token strings redacted."""
    secrets = active_secrets() if secrets is None else list(secrets)
    if isinstance(data, Mapping):
        return {
            key: (REDACTED if is_secret_key(key) and _may_hold_secret(value) else redact(value, secrets))
            for key, value in data.items()
        }
    if isinstance(data, (list, tuple)):
        return [redact(item, secrets) for item in data]
    if isinstance(data, str):
        return scrub_text(data, secrets)
    return data


def _contains(path: Path, needles: list[bytes]) -> bool:
    if not needles or path.stat().st_size == 0:
        return False
    with path.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as view:
        return any(view.find(needle) != -1 for needle in needles)


def find_secrets(folder: Path, secrets: Iterable[str] | None = None) -> list[Path]:
    """Files under ``folder`` (or ``folder`` itself, a file) that hold one of the active secrets."""
    needles = [secret.encode() for secret in (active_secrets() if secrets is None else secrets)]
    files = [folder] if folder.is_file() else sorted(p for p in folder.rglob("*") if p.is_file())
    return [path for path in files if _contains(path, needles)]


def scrub_folder(folder: Path) -> None:
    """Redact every text file under ``folder`` (or the file ``folder``) in place; fail on a secret elsewhere."""
    secrets = active_secrets()
    files = [folder] if folder.is_file() else sorted(p for p in folder.rglob("*") if p.is_file())
    for path in files:
        if path.suffix.lower() in TEXT_SUFFIXES:
            try:
                text = path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                pass
            else:
                scrubbed = scrub_text(text, secrets)
                if scrubbed != text:
                    path.write_text(scrubbed, encoding="utf-8")
                continue
        if _contains(path, [secret.encode() for secret in secrets]):
            raise SecretLeakError(
                f"{path} contains an access token; it is not kept (remove the token from the inputs)"
            )


class RedactingFilter(logging.Filter):
    """A logging filter that scrubs secrets from every record it lets through (installed by the CLI)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        scrubbed = scrub_text(message)
        if scrubbed != message:
            record.msg, record.args = scrubbed, None
        return True
