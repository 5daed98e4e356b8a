"""Prompt log-probabilities: every prompt token's entry, from one pass with all-position logits.

How log-likelihood evaluations score a model (lm-eval's `local-completions`: `echo` +
`logprobs` + `max_tokens: 0` on /v1/completions): the prompt is context + continuation and
the score is the continuation's summed log-probability. Such a client sends one context with
many continuations, so the entries of the last scored prompt are kept (they depend only on
the tokens before them): a prompt that shares a prefix with it reuses that prefix's entries
and its KV cache in whole chunks of SCORE_CHUNK positions, and evaluates the rest. Whole
aligned chunks because llama.cpp's numbers depend on a batch's shape (up to ~0.1 nat on
SmolLM2 between a row computed alone and in a batch of 40): so a prompt gets the same
entries whatever was scored before it. The KV cache ends holding the prompt as a plain sync
leaves it (prefix reuse for the next request is unchanged).
"""

from __future__ import annotations

import numpy as np

from localspec.backend import Model
from localspec.decode.logprobs import first_token, row_logprob
from localspec.decode.state import SCORE_CHUNK, KVState, common_prefix
from localspec.events import TokenLogprob


class PromptScorer:
    """One session's prompt scoring, with the entries of the last prompt it scored."""

    def __init__(self) -> None:
        self._tokens: list[int] = []
        self._entries: list[TokenLogprob] = []
        self._n_top = -1

    def sync(self, kv: KVState, model: Model, tokens: list[int], n_top: int) -> tuple[int, tuple[TokenLogprob, ...]]:
        """Sync `kv` to the prompt (KVState.sync) and return (tokens evaluated, one entry per
        prompt token: the first's logprob is None)."""
        # entry i (token i) is row i - 1's: reusable while both prompts agree up to token i,
        # in whole SCORE_CHUNK chunks of the cache's scored part (the shapes a fresh pass has)
        same = common_prefix(self._tokens, tokens) if n_top == self._n_top else 0
        reuse = min(max(same - 1, 0), kv.scored) // SCORE_CHUNK * SCORE_CHUNK
        entries = [first_token(model, tokens[0]), *self._entries[1:reuse + 1]]

        def on_rows(logits: np.ndarray, pos: int) -> None:
            del entries[pos + 1:]  # the cache kept less than `reuse`: these are evaluated again
            for i in range(logits.shape[0]):
                entries.append(row_logprob(model, logits[i], tokens[pos + i + 1], n_top))

        evaluated = kv.sync(tokens, reuse=reuse, on_rows=on_rows)
        if len(entries) != len(tokens):  # nothing evaluated, yet entries missing: cannot happen
            raise RuntimeError(f"prompt scoring: {len(entries)} entries for {len(tokens)} tokens")
        self._tokens, self._entries, self._n_top = list(tokens), entries, n_top
        return evaluated, tuple(entries)
