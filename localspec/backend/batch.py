"""Batch builder: (token, position, seq_ids, want_logits) items -> one llama_decode.

A token may belong to several sequences (a prefix shared by K drafts, an answer token seen by
every PARSE cut): it is then evaluated once and is visible to each of those sequences
(requires kv_unified=True in the context).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import llama_cpp
import numpy as np

from localspec.errors import ConfigError


class Batch:
    """A reusable llama_batch of fixed capacity (allocated once per context)."""

    def __init__(self, capacity: int, n_seq_max: int) -> None:
        self.capacity = capacity
        self.n_seq_max = n_seq_max
        self._raw = llama_cpp.llama_batch_init(capacity, 0, n_seq_max)
        self._token = np.ctypeslib.as_array(self._raw.token, shape=(capacity,))
        self._pos = np.ctypeslib.as_array(self._raw.pos, shape=(capacity,))
        self._n_seq = np.ctypeslib.as_array(self._raw.n_seq_id, shape=(capacity,))
        self._logits = np.ctypeslib.as_array(self._raw.logits, shape=(capacity,))
        self._seq_rows = [np.ctypeslib.as_array(self._raw.seq_id[i], shape=(n_seq_max,)) for i in range(capacity)]
        self.n = 0
        self.n_outputs = 0

    def clear(self) -> Batch:
        self.n = 0
        self.n_outputs = 0
        return self

    def add(self, token: int, pos: int, seq_ids: Sequence[int] | int, logits: bool = False) -> int:
        """Append one token; returns its output row index if logits were requested, else -1."""
        if self.n >= self.capacity:
            raise ConfigError(
                f"batch of more than {self.capacity} tokens (n_batch): lower -K/--drafts, "
                "-L/--draft-len or --parse-cuts, or raise --batch"
            )
        if isinstance(seq_ids, int):
            seq_ids = (seq_ids,)
        ns = len(seq_ids)
        if ns == 0 or ns > self.n_seq_max or max(seq_ids) >= self.n_seq_max or min(seq_ids) < 0:
            raise ConfigError(
                f"sequence ids {list(seq_ids)} out of range for n_seq_max={self.n_seq_max}: lower "
                "-K/--drafts or --parse-cuts"
            )
        i = self.n
        self._token[i] = token
        self._pos[i] = pos
        self._n_seq[i] = ns
        self._seq_rows[i][:ns] = seq_ids
        self._logits[i] = 1 if logits else 0
        self.n += 1
        row = -1
        if logits:
            row = self.n_outputs
            self.n_outputs += 1
        return row

    def add_sequence(self, tokens: Iterable[int], pos0: int, seq_ids: Sequence[int] | int, logits_last: bool = True) -> int:
        """Append consecutive tokens of the same sequences; logits for the last one only."""
        toks = list(tokens)
        row = -1
        for j, t in enumerate(toks):
            row = self.add(t, pos0 + j, seq_ids, logits_last and j == len(toks) - 1)
        return row

    def positions(self) -> tuple[int, int]:
        """The least and the greatest position of the items added (the cost model prices a
        decode by where in the context it runs: costmodel/span.py)."""
        pos = self._pos[: self.n]
        return int(pos.min()), int(pos.max())

    def columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Tokens, positions and first sequence ids of the items added (copies): what a
        decode evaluated, for whoever reads its hidden rows after it (backend/mtp.py)."""
        n = self.n
        first = np.fromiter((r[0] for r in self._seq_rows[:n]), np.int64, n)
        return self._token[:n].copy(), self._pos[:n].copy(), first

    @property
    def raw(self) -> llama_cpp.llama_batch:
        self._raw.n_tokens = self.n
        return self._raw

    def free(self) -> None:
        if self._raw is not None:
            llama_cpp.llama_batch_free(self._raw)
            self._raw = None

    def __del__(self) -> None:  # pragma: no cover
        try:
            self.free()
        except Exception:  # noqa: BLE001
            pass
