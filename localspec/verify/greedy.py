"""Temperature 0: one-hot target rows make every rule deterministic (docs/algorithms.md#greedy).

With p(.|u) = one-hot at a(u), each verifier reduces to "keep the longest draft prefix that
equals the target's greedy continuation, then emit the target's argmax" -- sd/gbv on draft 0,
the multi-draft rules over all K drafts. This module computes that decision from argmaxes
alone (at most L+1 of them), so temperature 0 costs no vocabulary-wide work and no random
draws. Ties between drafts are broken exactly as the general rules break them, so the
decision (k, tau, token) is identical, not merely the kept text:

- "first" (sd, gbv): draft 0.
- "tree" (spectr, spectr-gbv, rrs): the lowest-index draft among those with the longest match.
- "mdbv": MDBV's selection keeps walking past the first mismatch (its fallback picks the
  alive candidate with the largest p/q, i.e. all tie at 0, lowest token id), and reports the
  first draft alive at the end of that walk.

How a verifier uses it (`greedy=` keyword of every entry of VERIFIERS):
- greedy=None (default): auto. Probe the root row; if it is one-hot take the fast path,
  checking every row it reads (row[argmax] == 1); any non-one-hot row falls back to the
  general rule before a single random draw was made.
- greedy=True: trust the caller (temperature 0); only argmaxes are read, nothing checked.
- greedy=False: always the general rule.
Engines that never build rows can call `decide_from_argmax` with the (K, L+1) argmaxes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import numpy as np

from localspec.verify.common import Decision

Mode = Literal["first", "tree", "mdbv"]


class _NotOneHot(Exception):
    pass


def is_one_hot(p: np.ndarray) -> bool:
    """Every row of `p` (last axis = vocabulary) is one-hot. Vocabulary-wide: for tests and
    small compacted rows; verifiers themselves only look at the rows they walk."""
    p = np.asarray(p)
    return bool(np.all(p.max(axis=-1) == 1.0))


def decide_from_argmax(a: np.ndarray, x: np.ndarray, mode: Mode = "tree") -> Decision:
    """The temperature-0 decision from target argmaxes a[k][i] (K, L+1) along each draft."""
    a = np.asarray(a)
    return _walk(lambda k, i: int(a[k, i]), np.asarray(x).tolist(), mode)


def greedy_or_none(
    p: np.ndarray, x: np.ndarray, greedy: bool | None, mode: Mode
) -> Decision | None:
    """The fast-path decision, or None when the general rule must run (see module docstring)."""
    if greedy is False:
        return None
    check = greedy is None

    def amax(k: int, i: int) -> int:
        row = p[k, i]
        t = int(np.argmax(row))
        if check and row[t] != 1.0:
            raise _NotOneHot
        return t

    try:
        if check:
            amax(0, 0)  # cheap probe: most calls at temperature > 0 stop here
        return _walk(amax, x.tolist(), mode)
    except _NotOneHot:
        return None


def _walk(amax: Callable[[int, int], int], xs: list[list[int]], mode: Mode) -> Decision:
    K, L = len(xs), len(xs[0])
    if mode == "first":
        for i in range(L):
            t = amax(0, i)
            if xs[0][i] != t:
                return Decision(0, i, t)
        return Decision(0, L, amax(0, L))
    alive = list(range(K))
    tau, token = L, -1
    for i in range(L):
        t = amax(alive[0], i)
        match = [k for k in alive if xs[k][i] == t]
        if match:
            alive = match
            continue
        if mode == "tree":
            return Decision(alive[0], i, t)
        if tau == L:  # first mismatch: this is tau and its correction
            tau, token = i, t
        pick = min(xs[k][i] for k in alive)  # MDBV fallback: all ratios 0, lowest id first
        alive = [k for k in alive if xs[k][i] == pick]
    if tau == L:
        token = amax(alive[0], L)
    return Decision(alive[0], tau, token)
