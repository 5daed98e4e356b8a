"""Temperature 0: the fast path reads argmaxes only and decides exactly like the general rule."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from localspec.verify import VERIFIERS, Decision, decide_from_argmax, is_one_hot
from tests.support import exact as E

MODES = {"sd": "first", "gbv": "first", "spectr": "tree", "spectr-gbv": "tree", "mdbv": "mdbv", "rrs": "tree"}


class NoRandomness:
    """The fast path must not draw: any draw fails the test."""

    def flip(self, prob):
        raise AssertionError("fast path drew a flip")

    def choose(self, probs):
        raise AssertionError("fast path drew a choose")


def _inputs(tgt, drf, drafts):
    p = np.stack([E.block_rows(tgt, drf, d)[0] for d in drafts])
    q = np.stack([E.block_rows(tgt, drf, d)[1] for d in drafts])
    return p, q, np.array(drafts)


def _longest_match(p, x, draft_ids):
    """Independent statement of the rule: longest prefix equal to the target's argmaxes."""
    best = -1
    for k in draft_ids:
        m = 0
        while m < x.shape[1] and x[k, m] == int(np.argmax(p[k, m])):
            m += 1
        best = max(best, m)
    return best


@pytest.mark.parametrize("K", [1, 2, 3])
@pytest.mark.parametrize("name", list(VERIFIERS))
def test_fast_path_equals_general_rule(name: str, K: int) -> None:
    V, L = 3, 2
    g = np.random.default_rng(K)
    tgt, drf = E.onehot_model(V, L, g), E.dirichlet_model(V, L, g, 0.7)
    f = VERIFIERS[name]
    blocks = list(itertools.product(range(V), repeat=L))
    for drafts in itertools.product(blocks, repeat=K):
        p, q, x = _inputs(tgt, drf, drafts)
        assert is_one_hot(p)
        general = E.enumerate_outputs(f, p, q, x, greedy=False)
        (k, tau, tok), pr = max(general.items(), key=lambda kv: kv[1])
        assert pr > 1 - 1e-9  # the general rule is deterministic on one-hot rows
        fast = f(NoRandomness(), p, q, x, greedy=True)
        auto = f(NoRandomness(), p, q, x)  # greedy=None detects one-hot rows itself
        amax = decide_from_argmax(p.argmax(axis=-1), x, MODES[name])
        assert fast == auto == amax == Decision(k, tau, tok), drafts
        ids = [0] if MODES[name] == "first" else range(K)
        assert tau == _longest_match(p, x, ids)
        assert tok == int(np.argmax(p[k, tau]))
        assert (x[k, :tau] == p[k, np.arange(tau)].argmax(axis=-1)).all()


@pytest.mark.parametrize("name", list(VERIFIERS))
def test_auto_detection_falls_back_when_a_row_is_not_one_hot(name: str) -> None:
    """Root row one-hot, a later row not: greedy=None must give the general rule's law."""
    V, L = 3, 2
    g = np.random.default_rng(11)
    drf = E.dirichlet_model(V, L, g, 1.0)
    dense = E.dirichlet_model(V, L, g, 1.0)
    hot = E.onehot_model(V, L, g)

    def tgt(c):
        return hot(c) if len(c) == 0 else dense(c)

    p, q, x = _inputs(tgt, drf, [(int(np.argmax(hot(()))), 1), (2, 0)])
    f = VERIFIERS[name]
    auto = E.enumerate_outputs(f, p, q, x)
    general = E.enumerate_outputs(f, p, q, x, greedy=False)
    assert auto.keys() == general.keys()
    assert all(abs(auto[z] - general[z]) < 1e-15 for z in auto)
    assert len(general) > 1  # the case is really random (not accidentally deterministic)


def test_is_one_hot() -> None:
    assert is_one_hot(np.eye(4)[[1, 3]])
    assert not is_one_hot(np.array([[0.5, 0.5, 0.0]]))
