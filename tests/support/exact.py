"""Exact output laws by enumeration (docs/algorithms.md#enumeration): the proof machinery of the tests.

A verifier's randomness goes only through rng.flip / rng.choose, so replaying it under a
generator that branches on every draw (and multiplying the branch probabilities) gives the
EXACT law of its decision. Enumerating every K-tuple of drafts of a tiny context-dependent
model on top gives the exact law of the emitted text Z = x[k*][:tau] + (token,), which is
then compared with the target:
- strict error: for every y in V^(L+1), sum_j P(Z = y[:j]) P_tgt(y[j:] | y[:j]) = P_tgt(y);
- completability excess: max_u P(Z extends u) - P_tgt(u) (> 0 proves a bias nothing later
  can repair);
- E[tau] for closed-form and regression checks.
Pure Python/numpy and small: meant for V <= 3, L <= 3, K <= 3 (or a similar count of tuples).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import numpy as np

Context = tuple[int, ...]
Model = Callable[[Context], np.ndarray]  # context -> next-token distribution
Law = dict[tuple[int, ...], float]


class _Branch(Exception):
    pass


class _Deferred:
    """Stands for the result of the last choose() until someone looks at it. A verifier that
    only returns it as Decision.token lets the harness expand the token without re-running
    the verifier once per value; any inspection (==, hash, indexing, int) falls back to
    ordinary branching."""

    def _look(self, *args):
        raise _Branch

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __hash__ = _look
    __index__ = __int__ = __bool__ = __float__ = _look


class ReplayRNG:
    """Replays a script of branch indices; raises at the first draw beyond it, exposing the
    branch probabilities so the caller can extend the script with each of them."""

    def __init__(self, script: Sequence[int], defer: bool = False) -> None:
        self.script, self.pos, self.weight = script, 0, 1.0
        self.pending: list[float] = []
        self.defer = defer
        self.deferred: list[float] | None = None  # probs of an unresolved final choose

    def _draw(self, probs: list[float]) -> int:
        if self.pos < len(self.script):
            i = self.script[self.pos]
            self.pos += 1
            self.weight *= probs[i]
            return i
        self.pending = probs
        raise _Branch

    def flip(self, prob: float) -> bool:
        prob = min(max(float(prob), 0.0), 1.0)
        if prob in (0.0, 1.0):  # no branching on certain events
            return prob == 1.0
        return bool(self._draw([1.0 - prob, prob]))

    def choose(self, probs):
        w = np.maximum(np.asarray(probs, dtype=np.float64).ravel(), 0.0)
        probs_n = (w / w.sum()).tolist()
        if self.defer and self.pos >= len(self.script) and self.deferred is None:
            self.deferred = probs_n
            return _Deferred()
        return self._draw(probs_n)


def enumerate_outputs(
    verifier: Callable, *args, defer: bool = True, **kwargs
) -> dict[tuple[int, int, int], float]:
    """Exact law of one call's Decision (k, tau, token), every random branch explored.
    defer=True expands a returned-but-never-inspected choose() result without re-running
    the verifier per token value (same law, fewer runs; tested against defer=False)."""
    out: dict[tuple[int, int, int], float] = {}
    stack: list[list[int]] = [[]]
    while stack:
        script = stack.pop()
        rng = ReplayRNG(script, defer=defer)
        try:
            d = verifier(rng, *args, **kwargs)
        except _Branch:
            if rng.deferred is not None:  # inspected, or a draw followed it: branch on it
                rng.pending = rng.deferred
            stack.extend(script + [i] for i, pr in enumerate(rng.pending) if pr > 0.0)
            continue
        if isinstance(d.token, _Deferred):
            assert rng.deferred is not None
            tokens = [(i, pr) for i, pr in enumerate(rng.deferred) if pr > 0.0]
        else:
            tokens = [(int(d.token), 1.0)]
        for tok, pr in tokens:
            if rng.weight * pr > 0.0:
                key = (int(d.k), int(d.tau), tok)
                out[key] = out.get(key, 0.0) + rng.weight * pr
    return out


# -- tiny models --------------------------------------------------------------------------
def table_model(V: int, depth: int, make_row: Callable[[], np.ndarray]) -> Model:
    """A context-dependent model: one row per context of length <= depth."""
    t = {c: make_row() for n in range(depth + 1) for c in itertools.product(range(V), repeat=n)}
    return lambda c: t[tuple(c)]


def dirichlet_model(V: int, depth: int, g: np.random.Generator, alpha: float = 1.0) -> Model:
    return table_model(V, depth, lambda: g.dirichlet(alpha * np.ones(V)))


def const_model(row: Sequence[float]) -> Model:
    r = np.asarray(row, dtype=np.float64)
    return lambda c: r


def onehot_model(V: int, depth: int, g: np.random.Generator) -> Model:
    return table_model(V, depth, lambda: np.eye(V)[g.integers(V)])


def zeros_model(V: int, depth: int, g: np.random.Generator, alpha: float = 1.0) -> Model:
    """Dirichlet rows with one random entry forced to 0 (exercises the 0/0 guards)."""

    def row() -> np.ndarray:
        r = g.dirichlet(alpha * np.ones(V))
        r[g.integers(V)] = 0.0
        return r / r.sum()

    return table_model(V, depth, row)


def joint(model: Model, seq: Sequence[int], start: Context = ()) -> float:
    pr, ctx = 1.0, tuple(start)
    for s in seq:
        pr *= float(model(ctx)[s])
        ctx += (s,)
    return pr


def block_rows(
    tgt: Model, drf: Model, block: Context, start: Context = ()
) -> tuple[np.ndarray, np.ndarray]:
    """(L+1, V) target rows and (L, V) draft rows along one draft block."""
    ctxs = [tuple(start) + block[:i] for i in range(len(block) + 1)]
    return np.array([tgt(c) for c in ctxs]), np.array([drf(c) for c in ctxs[:-1]])


# -- laws and checks ------------------------------------------------------------------------
def step_law(verifier: Callable, tgt: Model, drf: Model, V: int, L: int, K: int) -> Law:
    """Law of Z = accepted prefix + (token) for one call, drafts marginalised exactly."""
    blocks = list(itertools.product(range(V), repeat=L))
    info = {}
    for b in blocks:
        w = joint(drf, b)
        if w > 0.0:
            info[b] = (w, *block_rows(tgt, drf, b))
    law: Law = {}
    for drafts in itertools.product(list(info), repeat=K):
        w = float(np.prod([info[d][0] for d in drafts]))
        p = np.stack([info[d][1] for d in drafts])
        q = np.stack([info[d][2] for d in drafts])
        x = np.array(drafts, dtype=np.int64).reshape(K, L)
        for (k, tau, y), pr in enumerate_outputs(verifier, p, q, x).items():
            z = tuple(drafts[k][:tau]) + (y,)
            law[z] = law.get(z, 0.0) + w * pr
    return law


def mixed_step_law(verifier: Callable, tgt: Model, drafts: Sequence[Model], V: int, L: int,
                   lengths: Sequence[int] | None = None) -> Law:
    """Like step_law, for K drafts each drawn from its OWN model (a stacked trie: a lookup's
    point mass beside the draft model's samples), independently given the prefix. Draft k
    is lengths[k] <= L tokens long, padded as decode/blocks.verify_rows pads: column V is a
    token the target never emits (p = 0, q = 1), target rows past it are uniform filler."""
    K = len(drafts)
    lengths = list(lengths or [L] * K)
    pad = min(lengths) < L
    W = V + 1 if pad else V
    per: list[list[tuple[Context, float]]] = []
    for drf, n in zip(drafts, lengths, strict=True):
        per.append([(b, joint(drf, b)) for b in itertools.product(range(V), repeat=n) if joint(drf, b) > 0.0])
    law: Law = {}
    for combo in itertools.product(*per):
        w = float(np.prod([wk for _, wk in combo]))
        p = np.zeros((K, L + 1, W))
        q = np.zeros((K, L, W))
        x = np.full((K, L), V, dtype=np.int64)
        for k, ((b, _), drf) in enumerate(zip(combo, drafts, strict=True)):
            tr, dr = block_rows(tgt, drf, b)
            n = len(b)
            p[k, : n + 1, :V] = tr
            q[k, :n, :V] = dr
            x[k, :n] = b
            if n < L:
                q[k, n:, V] = 1.0
                p[k, n + 1 :, :V] = 1.0 / V
        for (k, tau, y), pr in enumerate_outputs(verifier, p, q, x).items():
            assert y < V and tau <= len(combo[k][0]), "the padding token was accepted"
            z = tuple(combo[k][0][:tau]) + (y,)
            law[z] = law.get(z, 0.0) + w * pr
    return law


def dynamic_step_law(
    verifier: Callable, tgt: Model, drf: Model, V: int, L: int, K: int, keep: Callable[[list[Context]], bool]
) -> Law:
    """Like step_law, for drafts whose length is decided while drafting, as the engine does:
    K drafts in lockstep, and after each depth d >= 1 (d < L) `keep(prefixes of all K
    drafts)` decides whether every draft gets one more token. The verifier then sees blocks
    of that common length. Tests whether a length rule (a stopping time of the drafts,
    joint across them) keeps a verifier lossless."""
    law: Law = {}

    def grow(prefixes: list[Context], w: float) -> None:
        d = len(prefixes[0])
        if d == L or (d >= 1 and not keep(prefixes)):
            rows = [block_rows(tgt, drf, b) for b in prefixes]
            p = np.stack([r[0] for r in rows])
            q = np.stack([r[1] for r in rows])
            x = np.array(prefixes, dtype=np.int64).reshape(K, d)
            for (k, tau, y), pr in enumerate_outputs(verifier, p, q, x).items():
                z = tuple(prefixes[k][:tau]) + (y,)
                law[z] = law.get(z, 0.0) + w * pr
            return
        for toks in itertools.product(range(V), repeat=K):
            wt = w * float(np.prod([drf(c)[t] for c, t in zip(prefixes, toks, strict=True)]))
            if wt > 0.0:
                grow([c + (t,) for c, t in zip(prefixes, toks, strict=True)], wt)

    grow([() for _ in range(K)], 1.0)
    return law


def strict_error(law: Law, tgt: Model, V: int, L: int) -> float:
    """max_y |sum_j P(Z = y[:j]) P_tgt(y[j:] | y[:j]) - P_tgt(y)| over y in V^(L+1)."""
    total: dict[Context, float] = {}
    for z, pz in law.items():
        for rest in itertools.product(range(V), repeat=L + 1 - len(z)):
            y = z + rest
            total[y] = total.get(y, 0.0) + pz * joint(tgt, rest, start=z)
    return max(
        abs(total.get(y, 0.0) - joint(tgt, y)) for y in itertools.product(range(V), repeat=L + 1)
    )


def completability_excess(law: Law, tgt: Model, V: int, L: int) -> float:
    """max_u P(Z extends u) - P_tgt(u) over prefixes u of length 1..L+1."""
    cover: dict[Context, float] = {}
    for z, pz in law.items():
        for m in range(1, len(z) + 1):
            cover[z[:m]] = cover.get(z[:m], 0.0) + pz
    return max(
        cover.get(u, 0.0) - joint(tgt, u)
        for m in range(1, L + 2)
        for u in itertools.product(range(V), repeat=m)
    )


def expected_tau(law: Law) -> float:
    return sum(pz * (len(z) - 1) for z, pz in law.items())


def expected_tau_sd(tgt: Model, drf: Model, V: int, L: int) -> float:
    """§1 closed form: sum_i sum_{x^i} prod_{j<=i} min(p_j, q_j)."""
    total, m = 0.0, {(): 1.0}
    for t in range(1, L + 1):
        for u in itertools.product(range(V), repeat=t):
            a, c = u[:-1], u[-1]
            m[u] = m[a] * min(float(tgt(a)[c]), float(drf(a)[c]))
            total += m[u]
    return total


def expected_tau_gbv(tgt: Model, drf: Model, V: int, L: int) -> float:
    """§2 closed form: sum_i sum_{x^i} min_{0<=j<=i} Q(x^j) P(x_{j+1..i} | x^j)."""
    total, w = 0.0, {(): 1.0}
    for t in range(1, L + 1):
        for u in itertools.product(range(V), repeat=t):
            w[u] = min(w[u[:-1]] * float(tgt(u[:-1])[u[-1]]), joint(drf, u))
            total += w[u]
    return total
