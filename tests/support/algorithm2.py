"""SpecTr-GBV's cross-iteration correction ("Algorithm 2"), docs/algorithms.md#algorithm2, as a
stateful object around the `spectr-gbv` verifier.

Test machinery: the enumeration in tests/test_verify_spectr_gbv.py uses it to show the
published rule with one draft is exact only with this correction, and then yields fewer
tokens per target call than plain GBV. The engine therefore offers spectr-gbv only with
K >= 2 (for reproduction, documented lossy) and gbv for one draft.

The published per-step rule does not emit the target's law by itself. With K = 1 it becomes
exact over whole generations when, for the rest of the same block (positions tau+2..L counted
from the block start), later iterations verify against

    p~(v|u) = norm((P(uv) - Q(uv))+),   P, Q = target / draft joints from the block start,

and against the plain target outside the block (tested by enumerating whole generations in
tests/test_verify_spectr_gbv.py). A block that ends early may overlap the next block, and
that block's own modification builds on the modified rows, so spans are applied oldest first.
With K >= 2 nothing can make the rule exact (its per-step law over-covers some prefixes).

How the engine must call it, every iteration, in this order:

    carry = SpectrGbvCarry()                     # once per generation (reset() on a new prompt)
    p_eff = carry.adjust(p, q, x)                # rows of THIS iteration (any compaction)
    d = VERIFIERS["spectr-gbv"](rng, p_eff, q, x)
    carry.commit(d)                              # before the next adjust

`adjust` returns p itself when no span is active, otherwise a float64 copy with the rows
inside active spans replaced. Only scalars (joints) survive between iterations, so each
iteration may use its own compacted vocabulary. Keep L constant while spans are active (a
shorter block could end inside a span, where the draft row of its bonus position is missing):
`adjust` raises ValueError then; call reset() first.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from localspec.verify.common import Decision


@dataclass(frozen=True)
class Span:
    """An earlier block whose positions still reach into the coming iteration."""

    P: float  # target joint (under that block's own rows) from its start to the current context
    Q: float  # draft joint, likewise
    remaining: int  # how many of the coming positions still lie inside that block


@dataclass
class _Applied:
    span: Span
    pre: np.ndarray  # (K, r, V) rows the span's block would have used, before its correction
    Pj: np.ndarray  # (K, r+1) joints along each draft
    Qj: np.ndarray


class SpectrGbvCarry:
    """Stateful Algorithm 2 (see the module docstring for the calling protocol)."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self._pending: tuple[np.ndarray, np.ndarray, np.ndarray, list[_Applied]] | None = None

    def reset(self) -> None:
        """Forget every span (new prompt, or a change of L)."""
        self.spans = []
        self._pending = None

    def clone(self) -> SpectrGbvCarry:
        """An independent copy (for branching, e.g. exact enumeration)."""
        return copy.deepcopy(self)

    def adjust(self, p: np.ndarray, q: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Target rows to verify this iteration's drafts against."""
        p, q, x = np.asarray(p), np.asarray(q), np.asarray(x)
        K, L = x.shape
        applied: list[_Applied] = []
        p_eff = p
        if self.spans:
            if max(s.remaining for s in self.spans) > L:
                raise ValueError("L shrank while SpectrGbvCarry spans are active: call reset()")
            p_eff = np.array(p, dtype=np.float64)
            rows = np.arange(K)
            for span in self.spans:
                r = span.remaining
                pre = p_eff[:, :r].copy()
                Pj = np.empty((K, r + 1))
                Qj = np.empty((K, r + 1))
                Pj[:, 0], Qj[:, 0] = span.P, span.Q
                for i in range(r):
                    Pj[:, i + 1] = Pj[:, i] * pre[rows, i, x[:, i]]
                    Qj[:, i + 1] = Qj[:, i] * q[rows, i, x[:, i]]
                new = np.maximum(Pj[:, :r, None] * pre - Qj[:, :r, None] * q[:, :r], 0.0)
                tot = new.sum(axis=-1, keepdims=True)
                p_eff[:, :r] = np.where(tot > 0.0, new / np.where(tot > 0.0, tot, 1.0), pre)
                applied.append(_Applied(span, pre, Pj, Qj))
        self._pending = (p_eff, q, x, applied)
        return p_eff

    def commit(self, d: Decision) -> None:
        """Advance every span past the emitted tokens and open this block's own span."""
        if self._pending is None:
            raise RuntimeError("commit() without a preceding adjust()")
        p_eff, q, x, applied = self._pending
        self._pending = None
        k, tau, y = d.k, d.tau, d.token
        advance = tau + 1
        spans = [
            Span(
                a.Pj[k, tau] * a.pre[k, tau, y],
                a.Qj[k, tau] * q[k, tau, y],
                a.span.remaining - advance,
            )
            for a in applied
            if a.span.remaining > advance
        ]
        L = x.shape[1]
        if tau < L - 1:
            P = Q = 1.0
            for j in range(tau):
                P *= float(p_eff[k, j, x[k, j]])
                Q *= float(q[k, j, x[k, j]])
            spans.append(Span(P * float(p_eff[k, tau, y]), Q * float(q[k, tau, y]), L - 1 - tau))
        self.spans = spans
