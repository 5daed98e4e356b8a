"""Exceptions that carry a message naming the fix.

The CLI prints a LocalspecError as one line (no traceback) and exits with code 2, so every
user-facing failure (bad path, wrong file, vocab mismatch, bad flag) is raised as one of these.
"""

from __future__ import annotations


class LocalspecError(Exception):
    """Base class: an error caused by input the user can fix."""

    exit_code = 2


class ConfigError(LocalspecError):
    """Invalid flag combination or value (names the flag)."""


class ModelNotFoundError(LocalspecError):
    """A path that does not exist, or a name that is not in the registry."""


class BadModelFileError(LocalspecError):
    """A file that is not GGUF, truncated, or fails its checksum."""


class FetchError(LocalspecError):
    """Every source of a model failed; the message lists each failure."""


class VocabMismatchError(LocalspecError):
    """Draft and target tokenizers differ; speculation would be meaningless."""


class ContextFullError(LocalspecError):
    """The prompt (or the conversation) does not fit in the context window."""


class DecodeAborted(LocalspecError):
    """A decode was stopped inside llama.cpp (Context.abortable): its last ubatch's positions
    were removed from the memory, the earlier ones remain (what KVState.sync accounts for)."""


class SeqOpError(LocalspecError):
    """llama.cpp refused a sequence operation the decoding state relies on (never ignored:
    going on would emit text that is not the target's)."""
