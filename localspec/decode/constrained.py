"""A grammar inside the loop: the law every row is read under, and drafts that fit it.

A turn with a constraint (a grammar or JSON schema, localspec/constrain/) samples the
target's law MASKED by the grammar at each position and renormalised (sampling.masked_row):
what llama.cpp's sampler chain and vLLM sample. The verifiers are untouched: they are exact
for any target rows p and any draft rows q, so the engine only has to hand them the masked
p of every trie node, read at the grammar state of that node's path, and q rows that are
what the drafts were really drawn from:

- the draft model and the MTP head sample from their own rows masked the same way
  (decode/drafters/model.py, mtp.py), so a model draft never holds a refused token;
- a lookup's point mass is a function of the history alone; cutting it at its first
  refused token (`fit`) is a different deterministic draft, so still exact, and no verify
  row is spent on a token that cannot be emitted;
- tokens the grammar forces (one allowed token, or a fixed byte string) have masked p = 1:
  the `grammar` drafter proposes them alone (decode/drafters/grammar.py) and `fit` appends
  them to a one-draft trie as point masses (a deterministic function of the draft).

One Matcher follows the main sequence (`commit`); trie nodes are read by consume/rollback
along a depth-first walk (cheaper than a fork per node: a fork copies the parser state).
At T = 0 a row's argmax is checked with `allowed` (no mask) and the whole mask is computed
only where the argmax is refused.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from localspec.config import SamplingConfig
from localspec.decode.drafters.trie import DraftTrie, Node, point_mass
from localspec.sampling import SparseRow, masked_row


class Matcher(Protocol):
    """What the loop needs of a grammar state (localspec/constrain/matcher.Matcher)."""

    def allowed(self, token: int) -> bool: ...

    def mask(self) -> np.ndarray: ...

    def valid_prefix(self, tokens: list[int]) -> int: ...

    def consume(self, tokens: list[int]) -> None: ...

    def rollback(self, n: int) -> None: ...

    def forced(self, limit: int = 64) -> list[int]: ...

    def fork(self) -> Matcher: ...


def masked_dist(logits: np.ndarray, sampling: SamplingConfig, m: Matcher, buf: np.ndarray) -> SparseRow:
    """The sampling transform of `logits` under `m`'s mask (buf: a reused float32 row). At
    T = 0 the argmax is checked alone and the mask computed only when it is refused."""
    if sampling.greedy:
        tok = int(np.argmax(logits))
        if not m.allowed(tok):
            ids = np.flatnonzero(_fit(m.mask(), buf.shape[0]))
            tok = int(ids[np.argmax(logits[ids])])  # the first of the allowed maxima, as argmax
        return SparseRow(np.array([tok], dtype=np.int64), np.ones(1))
    return masked_row(logits, sampling, _fit(m.mask(), buf.shape[0]), buf)


def stepwise_valid_prefix(m: Matcher, tokens: list[int]) -> int:
    """How many of `tokens` `m` accepts from here, token by token (allowed, consume), its state
    restored after: for a gate around a grammar (think_gate, tool_gate), whose rule at a
    position depends on the tokens written before it, so no one-call check exists."""
    n = 0
    try:
        for t in tokens:
            if not m.allowed(t):
                break
            m.consume([t])
            n += 1
    finally:
        m.rollback(n)
    return n


def _fit(allowed: np.ndarray, n: int) -> np.ndarray:
    """The target vocabulary's mask on a row of n logits (a draft's vocabulary may be up to
    128 ids shorter or longer: ids the target does not have are refused)."""
    if allowed.shape[0] == n:
        return allowed
    if allowed.shape[0] > n:
        return allowed[:n]
    return np.concatenate([allowed, np.zeros(n - allowed.shape[0], dtype=bool)])


class TurnConstraint:
    """The turn's grammar state and the rows and drafts read under it (module docstring)."""

    def __init__(self, matcher: Matcher, n_vocab: int, label: str = "") -> None:
        self.matcher = matcher
        self.label = label  # what --json and the stats say (e.g. "json_schema")
        self.buf = np.empty(n_vocab, dtype=np.float32)

    # ------------------------------------------------------------------ one row
    def row(self, logits: np.ndarray, sampling: SamplingConfig) -> SparseRow:
        """The masked law at the main sequence's state."""
        return masked_dist(logits, sampling, self.matcher, self.buf)

    def commit(self, tokens: list[int]) -> None:
        """The main sequence emitted `tokens` (accepted drafts and the target's own)."""
        self.matcher.consume(tokens)

    # ------------------------------------------------------------------ drafts
    def fit(self, trie: DraftTrie, L: int) -> DraftTrie | None:
        """Each draft cut before its first refused token; a one-draft trie gets the tokens
        the grammar forces after it appended (point masses, up to L in all). None when
        nothing is left to verify."""
        keep = [self.matcher.valid_prefix([trie.nodes[n].token for n in p]) for p in trie.path]
        if any(k < len(p) for k, p in zip(keep, trie.path, strict=True)):
            trie = _cut(trie, keep)
        if trie.K == 1 and trie.L < L:
            toks = [trie.nodes[n].token for n in trie.path[0]]
            self.matcher.consume(toks)
            try:
                more = self.matcher.forced(L - len(toks))
            finally:
                self.matcher.rollback(len(toks))
            trie.forced += len(more)
            for t in more:
                depth = len(trie.path[0]) + 1
                trie.nodes.append(Node(t, depth, [0], trie.path[0][-1] if trie.path[0] else -1))
                trie.path[0].append(len(trie.nodes) - 1)
                trie.q[0].append(point_mass(t))
                trie.conf[0].append(1.0)
        return trie if trie.L > 0 else None

    def target_rows(self, trie: DraftTrie, node_rows: list[int], logits: np.ndarray,
                    sampling: SamplingConfig) -> dict[int, SparseRow]:
        """The masked law of every output row the verifier reads: the root row (index -1 in
        node_rows' sense: node_rows[-1]) at the main state, each node's row at the state after
        its path. One consume / rollback per node, depth first."""
        m = self.matcher
        out = {node_rows[-1]: masked_dist(logits[node_rows[-1]], sampling, m, self.buf)}
        children: dict[int, list[int]] = {}
        for i, n in enumerate(trie.nodes):
            children.setdefault(n.parent, []).append(i)
        stack: list[tuple[int, bool]] = [(i, True) for i in reversed(children.get(-1, []))]
        while stack:
            i, enter = stack.pop()
            if not enter:
                m.rollback(1)
                continue
            m.consume([trie.nodes[i].token])
            out[node_rows[i]] = masked_dist(logits[node_rows[i]], sampling, m, self.buf)
            stack.append((i, False))
            stack.extend((c, True) for c in reversed(children.get(i, [])))
        return out


def _cut(trie: DraftTrie, keep: list[int]) -> DraftTrie:
    """The trie with draft k cut to its first keep[k] tokens (nodes no draft reaches go)."""
    paths = [p[:k] for p, k in zip(trie.path, keep, strict=True)]
    used = sorted({n for p in paths for n in p})
    new = {old: i for i, old in enumerate(used)}
    nodes = [Node(trie.nodes[o].token, trie.nodes[o].depth,
                  [k for k in trie.nodes[o].members if o in paths[k]],
                  new.get(trie.nodes[o].parent, -1), trie.nodes[o].evaluated) for o in used]
    return DraftTrie(K=trie.K, nodes=nodes, path=[[new[n] for n in p] for p in paths],
                     q=[q[:k] for q, k in zip(trie.q, keep, strict=True)],
                     conf=[c[:k] for c, k in zip(trie.conf, keep, strict=True)],
                     evaluated_depth=trie.evaluated_depth, hinted=trie.hinted, source=trie.source,
                     calls_model=trie.calls_model, sources=trie.sources, verifier=trie.verifier)

