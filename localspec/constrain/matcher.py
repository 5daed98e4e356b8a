"""A compiled constraint for one vocabulary, and one matcher per live sequence.

`Constraint` checks the grammar against the model's tokens once (llguidance's
`validate_grammar` with the tokenizer, then the first step: a grammar no token can start is
refused here, in one line, not discovered mid-generation) and keeps the initial matcher;
`matcher()` hands out copies of it (`deep_copy`: ~1 µs, where a fresh LLMatcher compiles
the grammar again, milliseconds). The engine keeps one `Matcher` per sequence: the main answer and, via `fork()`,
each draft branch, which it advances and rolls back as drafts are accepted or rejected.

Why the wrapper is more than a rename of `llguidance.LLMatcher`:

- End of generation. llguidance has one notion of "EOS" and a quirky way with it: a consumed
  EOS counts as a token (for `rollback`) only when the matcher was not already stopped, and
  `validate_tokens` refuses it once the grammar is complete. Here every id in `eog` (plus
  the tokenizer's own EOS ids) means "end": allowed exactly when the grammar may end (where
  llguidance's mask allows its EOS), never handed to llguidance, counted by the wrapper, so
  consume / valid_prefix / rollback treat it like any other token. After an end only more
  end ids are allowed (llguidance's own behaviour after EOS; a mask is never all False).
- Error states are final in llguidance (a refused `consume_token`, a rollback past the
  start, an out-of-range id: the matcher is dead, `reset` does not revive it). Here a refused
  token raises ValueError and leaves the state as it was (`try_consume_tokens` + rollback),
  rollback is checked against the wrapper's own count, and out-of-range ids are refused
  before llguidance sees them.
- `mask()` is a numpy bool row of the logits' width (llguidance fills a bitmask in place
  into a reused buffer; unpacking it costs 5 µs on 49k ids, 10-20 µs on 152k); `allowed`
  and `valid_prefix` ask llguidance about given tokens without a mask (~1.5 µs for one
  token, ~1 µs more per token), which is what a verifier needs for a drafted token.

Thread safety: a Constraint may be shared (matcher() is locked); a Matcher is one sequence's
and must not be used by two threads at once (llguidance does not detect that: it interleaves).
llguidance releases the GIL while it computes a mask (its documentation says so), so
matchers in different threads can compute in parallel.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
from llguidance import LLMatcher, LLParserLimits, LLTokenizer

from localspec.constrain.spec import ConstraintSpec, one_line
from localspec.errors import ConfigError

# terse errors: the default appends the parser state and the grammar to every message
_LIMITS = LLParserLimits(verbose_errors=False)


class Constraint:
    """A compiled grammar for one model's vocabulary; hands out one Matcher per live sequence.

    tokenizer: `localspec.backend.grammar.ll_tokenizer(model)`; n_vocab: the width of the
    model's logits rows; eog: every end-of-generation id (`backend.grammar.eog_ids(model)`).
    Raises ConfigError (one line) for a grammar llguidance refuses or that no token of this
    vocabulary can start.
    """

    def __init__(self, spec: ConstraintSpec, tokenizer: LLTokenizer, n_vocab: int, eog: Sequence[int]) -> None:
        self.spec = spec
        self.tokenizer = tokenizer
        self.n_vocab = int(n_vocab)
        self.ll_vocab = int(tokenizer.vocab_size)
        ends = {int(t) for t in eog} | {int(t) for t in tokenizer.eos_tokens}
        self.eog = np.array(sorted(t for t in ends if 0 <= t < self.n_vocab), dtype=np.intp)
        self.eog_set = frozenset(int(t) for t in self.eog)
        self.eos = int(tokenizer.eos_token)  # llguidance's EOS: its mask bit says "may end"
        self._lock = threading.Lock()

        grammar = spec.grammar()
        err = LLMatcher.validate_grammar(grammar, tokenizer, limits=_LIMITS)
        if err:
            raise ConfigError(spec.message(err))
        self._root = LLMatcher(tokenizer, grammar, log_level=0, limits=_LIMITS)
        if self._root.is_error():
            raise ConfigError(spec.message(self._root.get_error()))
        probe = self.matcher()
        first = probe.mask()  # the first step: an empty language or a lexer limit shows here
        if probe._ll.is_error() or not first.any():
            why = one_line(probe._ll.get_error() or probe._ll.stop_reason())
            raise ConfigError(spec.message(f"no token of the model's vocabulary can start it ({why})"))

    def matcher(self) -> Matcher:
        """A fresh matcher at the grammar's start."""
        with self._lock:
            return Matcher(self, self._root.deep_copy(), 0, 0)


class Matcher:
    """One sequence's position in a Constraint's grammar (see the module docstring)."""

    __slots__ = ("_c", "_ll", "_n", "_ends", "_words", "_ptr")

    def __init__(self, constraint: Constraint, ll: LLMatcher, n: int, ends: int) -> None:
        self._c = constraint
        self._ll = ll
        self._n = n  # tokens consumed into llguidance (its rollback depth)
        self._ends = ends  # end-of-generation ids consumed after them (never given to llguidance)
        self._words: np.ndarray | None = None  # the bitmask buffer, made by the first mask()
        self._ptr = 0

    # ------------------------------------------------------------------ questions
    def allowed(self, token: int) -> bool:
        """Whether the grammar accepts `token` next (no mask computed)."""
        c = self._c
        if token in c.eog_set:
            return self._ends > 0 or self._can_end()
        if self._ends or not 0 <= token < c.ll_vocab:
            return False
        return self._ll.validate_tokens([int(token)]) == 1

    def mask(self) -> np.ndarray:
        """Bool row of n_vocab, True = allowed next; every end id is True exactly when the
        grammar may end here. A new array each call (the bit buffer is reused)."""
        c = self._c
        if self._ends:
            out = np.zeros(c.n_vocab, dtype=bool)
            out[c.eog] = True
            return out
        if self._words is None:  # lazily: a fork that only checks drafted tokens never needs it
            self._words = np.zeros((c.ll_vocab + 31) // 32, dtype=np.int32)
            self._ptr = self._words.__array_interface__["data"][0]
        self._ll.unsafe_compute_mask_ptr(self._ptr, self._words.nbytes)
        # the whole buffer, then a view: ~40 % faster than unpackbits(count=...) on 152k ids
        bits = np.unpackbits(self._words.view(np.uint8), bitorder="little")[: c.ll_vocab].view(bool)
        end = bool(bits[c.eos]) if 0 <= c.eos < c.ll_vocab else self._can_end()
        if c.ll_vocab == c.n_vocab:
            out = bits
        else:
            out = np.zeros(c.n_vocab, dtype=bool)
            k = min(c.n_vocab, c.ll_vocab)
            out[:k] = bits[:k]
        out[c.eog] = end
        return out

    def valid_prefix(self, tokens: Sequence[int]) -> int:
        """How many of `tokens`, from the start, the grammar accepts from here (state unchanged)."""
        if len(tokens) == 0:
            return 0
        c = self._c
        if self._ends:
            return self._leading_ends(tokens, 0)
        i = self._plain_run(tokens)
        head = [int(t) for t in tokens[:i]]
        n = self._ll.validate_tokens(head) if head else 0
        if n < i or i == len(tokens) or tokens[i] not in c.eog_set:
            return n
        if head:  # may it end after head? only a state change can tell
            k = self._ll.try_consume_tokens(head)
            can = self._can_end()
            self._ll.rollback(k)
        else:
            can = self._can_end()
        return self._leading_ends(tokens, i) if can else i

    def forced(self, limit: int = 64) -> list[int]:
        """The tokens the grammar forces next (llguidance's fast-forward tokens), at most
        `limit`: text only this grammar can produce, tokenized as the model would."""
        if self._ends or limit <= 0:
            return []
        return list(self._ll.compute_ff_tokens()[:limit])

    @property
    def done(self) -> bool:
        """The grammar is complete and only ending is allowed (or it has ended)."""
        return self._ends > 0 or (self._ll.is_stopped() and not self._ll.is_error())

    def can_end(self) -> bool:
        """The text so far is a complete match (it may end here, or has ended); more may
        still follow where the grammar allows it (decode/tool_gate.py reads this)."""
        return self._ends > 0 or self._can_end()

    @property
    def error(self) -> str:
        """llguidance's reason, one line, if it gave up (a parser or lexer limit); "" if not.
        Only ending is allowed then."""
        return one_line(self._ll.get_error()) if self._ll.is_error() else ""

    @property
    def consumed(self) -> int:
        """Tokens consumed and not rolled back (end ids included): the most `rollback` takes."""
        return self._n + self._ends

    # ------------------------------------------------------------------ moves
    def consume(self, tokens: Sequence[int]) -> None:
        """Advance by `tokens`; ValueError (state unchanged) if the grammar refuses one."""
        if len(tokens) == 0:
            return
        c = self._c
        if self._ends:
            if self._leading_ends(tokens, 0) < len(tokens):
                raise ValueError("the constraint has ended: only end-of-generation tokens may follow")
            self._ends += len(tokens)
            return
        i = self._plain_run(tokens)
        head = [int(t) for t in tokens[:i]]
        k = self._ll.try_consume_tokens(head) if head else 0
        if k < i:
            self._ll.rollback(k)
            raise ValueError(f"token {head[k]} (position {k}) is refused by the constraint")
        if i < len(tokens):
            rest = tokens[i:]
            why = None
            if rest[0] not in c.eog_set:
                why = f"token {rest[0]} (position {i}) is not in the vocabulary"
            elif not self._can_end():
                why = f"end-of-generation token {rest[0]} (position {i}) before the grammar is complete"
            elif self._leading_ends(rest, 0) < len(rest):
                why = "only end-of-generation tokens may follow an end-of-generation token"
            if why:
                self._ll.rollback(k)
                raise ValueError(why)
            self._ends = len(rest)
        self._n += k

    def rollback(self, n: int) -> None:
        """Undo the last `n` consumed tokens (at most `consumed`; ValueError beyond)."""
        if n < 0 or n > self._n + self._ends:
            raise ValueError(f"cannot roll back {n} tokens: {self._n + self._ends} consumed")
        e = min(n, self._ends)
        self._ends -= e
        n -= e
        if n:
            if not self._ll.rollback(n):  # cannot fail within the count; never go on silently
                raise RuntimeError(f"llguidance refused a rollback of {n}: {one_line(self._ll.get_error())}")
            self._n -= n

    def fork(self) -> Matcher:
        """An independent copy at the same position (for another draft branch)."""
        return Matcher(self._c, self._ll.deep_copy(), self._n, self._ends)

    # ------------------------------------------------------------------ helpers
    def _can_end(self) -> bool:
        # a matcher llguidance gave up on (a limit) allows only ending, as its mask does
        return self._ll.is_accepting() or self._ll.is_error()

    def _plain_run(self, tokens: Sequence[int]) -> int:
        """Length of the leading run of in-vocabulary, non-end tokens."""
        eog, lim = self._c.eog_set, self._c.ll_vocab
        for i, t in enumerate(tokens):
            if t in eog or not 0 <= t < lim:
                return i
        return len(tokens)

    def _leading_ends(self, tokens: Sequence[int], start: int) -> int:
        """start + the number of end ids from tokens[start] on."""
        eog = self._c.eog_set
        i = start
        while i < len(tokens) and tokens[i] in eog:
            i += 1
        return i
