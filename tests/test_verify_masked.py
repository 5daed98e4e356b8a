"""Exactness under a grammar, by enumeration (tests/support/exact.py).

A constrained turn samples the target's law masked by the grammar at each position and
renormalised (decode/constrained.py). The verifiers are not changed: the engine hands them
the masked p of every node and the q each draft was really drawn from. These tests prove
that what the engine hands them keeps every lossless rule exact, for the law that matters
(the MASKED target), on tiny context-dependent models and grammars:

- a grammar is a mask per context: random, sometimes a single allowed token (a forced
  position), sometimes one that empties the draft's own support;
- a sampled draft (the draft model, the MTP head) draws from its row masked the same way,
  before truncation, as the engine does (where its support and the mask do not meet, the
  masked row is the mask's tokens: the engine masks logits, not a truncated row);
- a lookup's point mass is cut before its first refused token (the engine's `fit`), padded
  with a token the target never emits (the engine's PAD);
- a stack (a point mass beside sampled drafts) under rrs.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from localspec.verify import VERIFIERS
from tests.support import exact as E


def grammar(V: int, depth: int, g: np.random.Generator) -> E.Model:
    """A mask per context (as a 0/1 row): ~30 % of contexts force one token."""
    table: dict[tuple[int, ...], np.ndarray] = {}
    for n in range(depth + 1):
        for c in itertools.product(range(V), repeat=n):
            m = np.zeros(V)
            if g.random() < 0.3:
                m[g.integers(V)] = 1.0
            else:
                m[g.random(V) < 0.6] = 1.0
                if not m.any():
                    m[g.integers(V)] = 1.0
            table[c] = m
    return lambda c: table[tuple(c)]


def masked(model: E.Model, allow: E.Model) -> E.Model:
    """The model's law masked and renormalised; the mask's own tokens where they do not meet
    (what masking logits before truncation gives: never an empty row)."""

    def row(c: tuple[int, ...]) -> np.ndarray:
        r = model(c) * allow(c)
        return r / r.sum() if r.sum() > 0 else allow(c) / allow(c).sum()

    return row


def padded(model: E.Model, V: int) -> E.Model:
    """A V+1 law: the model's over V tokens, 0 on the pad token (the target never emits it);
    after a pad the row is uniform (never reached by an emitted text)."""
    return lambda c: np.r_[np.ones(V) / V, 0.0] if V in c else np.r_[model(c), 0.0]


def cut_point_mass(point: E.Model, allow: E.Model, V: int) -> E.Model:
    """A lookup's draft cut before its first refused token: the point mass where the grammar
    allows it, then the pad (q = 1) for the rest of the block."""

    def row(c: tuple[int, ...]) -> np.ndarray:
        if V in c:
            return np.r_[np.zeros(V), 1.0]
        r = point(c)
        if (r * allow(c)).sum() == 0.0:
            return np.r_[np.zeros(V), 1.0]
        return np.r_[r, 0.0]

    return row


CASES = [(V, L, s) for V, L in ((2, 2), (3, 2), (2, 3), (3, 1)) for s in range(3)]


@pytest.mark.parametrize("V,L,seed", CASES)
@pytest.mark.parametrize("name,K", [("sd", 1), ("gbv", 1), ("spectr", 2), ("mdbv", 2)])
def test_sampled_drafts_masked_like_the_target_stay_exact(name, K, V, L, seed):
    g = np.random.default_rng(seed * 100 + V * 10 + L)
    allow = grammar(V, L, g)
    tgt = masked(E.dirichlet_model(V, L, g, 1.0), allow)
    drf = masked(E.zeros_model(V, L, g, 0.7), allow)  # zeros: some masks miss its support
    lw = E.step_law(VERIFIERS[name], tgt, drf, V, L, K)
    assert abs(sum(lw.values()) - 1.0) < 1e-12
    assert E.strict_error(lw, tgt, V, L) < 1e-10
    assert E.completability_excess(lw, tgt, V, L) < 1e-10
    # nothing the grammar refuses is ever emitted
    for z in lw:
        assert all(allow(z[:i])[t] for i, t in enumerate(z))


@pytest.mark.parametrize("V,L,seed", CASES)
@pytest.mark.parametrize("name", ["sd", "gbv"])
def test_lookup_drafts_cut_at_the_first_refused_token_stay_exact(name, V, L, seed):
    g = np.random.default_rng(seed * 100 + V * 10 + L + 7)
    allow = grammar(V, L, g)
    tgt = masked(E.dirichlet_model(V, L, g, 1.0), allow)
    point = E.onehot_model(V, L, g)  # the lookup's continuation: a function of the context
    lw = E.step_law(VERIFIERS[name], padded(tgt, V), cut_point_mass(point, allow, V), V + 1, L, 1)
    assert not any(V in z for z in lw)  # the pad is never emitted
    assert E.strict_error(lw, padded(tgt, V), V + 1, L) < 1e-10


def test_a_forced_position_is_always_accepted():
    """Where the grammar allows one token both masked laws are that token: the draft is
    kept with probability 1, whatever the unmasked models thought of it."""
    V, L = 3, 2
    g = np.random.default_rng(5)
    forced = lambda c: np.eye(V)[2]  # noqa: E731 - every position forces token 2
    tgt = masked(E.dirichlet_model(V, L, g, 1.0), forced)
    drf = masked(E.dirichlet_model(V, L, g, 1.0), forced)
    lw = E.step_law(VERIFIERS["sd"], tgt, drf, V, L, 1)
    assert lw == pytest.approx({(2, 2, 2): 1.0})


@pytest.mark.parametrize("seed", range(4))
def test_a_stack_under_a_grammar_stays_exact(seed):
    """rrs over a cut point mass (the lookup) beside a masked sampled draft (the model)."""
    V, L = 3, 2
    g = np.random.default_rng(40 + seed)
    allow = grammar(V, L, g)
    tgt = masked(E.dirichlet_model(V, L, g, 1.0), allow)
    drf = masked(E.dirichlet_model(V, L, g, 1.0), allow)
    point = cut_point_mass(E.onehot_model(V, L, g), allow, V)
    lw = E.mixed_step_law(VERIFIERS["rrs"], padded(tgt, V), [point, padded(drf, V)], V + 1, L, None)
    assert abs(sum(lw.values()) - 1.0) < 1e-12
    assert E.strict_error(lw, padded(tgt, V), V + 1, L) < 1e-10

