"""A drafter's output: K drafts as a prefix trie, each token with the row q it was drawn from.

Why a trie: drafts that agree on a prefix share its nodes, so the target evaluates each
shared token once (with the seq ids of all drafts through it) in the one verification
decode. Lookup drafts are point masses (q = 1 on the drafted token); a stack of drafters
names the verifier its mixed q rows need (`verifier`) and who wrote each draft (`sources`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from localspec.decode.blocks import PAD
from localspec.sampling import SparseRow

PREDICTION = "prediction"  # the client's predicted output (drafters/prediction.py)
GRAMMAR = "grammar"  # the drafter of a grammar's forced tokens (drafters/grammar.py): a trie's forced tail is its


@dataclass
class Node:
    """A trie node: token at depth (1-based) shared by drafts `members` (0-based draft ids)."""

    token: int
    depth: int
    members: list[int]
    parent: int  # node index, -1 for the root
    evaluated: bool = False  # in the draft's KV (a draft's last token usually is not)

    @property
    def seq_ids(self) -> list[int]:
        return [k + 1 for k in self.members]


@dataclass
class DraftTrie:
    """K drafts as a prefix trie plus the draft rows they were sampled from."""

    K: int
    nodes: list[Node] = field(default_factory=list)
    path: list[list[int]] = field(default_factory=list)  # path[k][i] = node of draft k, depth i+1
    q: list[list[SparseRow]] = field(default_factory=list)  # q[k][i] = row token i was drawn from
    conf: list[list[float]] = field(default_factory=list)  # conf[k][i] = draft's confidence at token i
    evaluated_depth: int = 0  # deepest level the drafting model decoded (for the decode count)
    hinted: int = 0  # of those, levels evaluated in the first decode from a hint (no decode of their own)
    source: str = "draft"  # the drafter that wrote it (its registry name)
    calls_model: bool = False  # drafting ran a model (the draft model, a head): draft_calls counts its decodes
    # a trie whose drafts come from different drafters: who wrote each (None: all `source`)
    # and the verifier their different q rows need (None: the method's own)
    sources: list[str] | None = None
    verifier: str | None = None
    forced: int = 0  # tokens a grammar forced, appended to draft 0's end (decode/constrained.fit)

    @property
    def draft_calls(self) -> int:
        """Draft decodes it took: the pending tokens' plus one per evaluated depth (less the
        hinted ones); a drafter that ran no model took none."""
        return self.evaluated_depth + 1 - self.hinted if self.calls_model else 0

    @property
    def L(self) -> int:
        """The longest draft (all drafts have this length unless they end on their own)."""
        return max((len(p) for p in self.path), default=0)

    def length(self, k: int) -> int:
        return len(self.path[k])

    def source_of(self, k: int) -> str:
        """The drafter that wrote draft k."""
        return self.source if self.sources is None else self.sources[k]

    def tokens(self) -> np.ndarray:
        """(K, L) int array of draft tokens; PAD after a draft that ended before L."""
        out = np.full((self.K, self.L), PAD, dtype=np.int64)
        for k, p in enumerate(self.path):
            out[k, : len(p)] = [self.nodes[n].token for n in p]
        return out


def point_mass(token: int) -> SparseRow:
    """A drafted token's q when a drafter is sure (a lookup): all mass on it."""
    return SparseRow(np.array([token], dtype=np.int64), np.ones(1))


def chain_trie(tokens: list[int], source: str, confs: list[float] | None = None) -> DraftTrie:
    """One draft of point masses (a lookup's continuation) as a trie."""
    trie = DraftTrie(K=1, path=[[]], q=[[]], conf=[[]], source=source)
    for depth, t in enumerate(tokens, start=1):
        trie.nodes.append(Node(t, depth, [0], depth - 2))
        trie.path[0].append(depth - 1)
        trie.q[0].append(point_mass(t))
        trie.conf[0].append(1.0 if confs is None else confs[depth - 1])
    return trie


class DraftStop(Protocol):
    """When to stop drafting (the cost model's costmodel.CalibratedStop; tests use others).

    accept_prob(c): the chance a draft token drawn from a row of confidence c is accepted.
    worth(depth, p): whether drafting token `depth` (1-based) pays when the chance that the
    whole draft up to and including it is accepted is p.
    """

    def accept_prob(self, conf: float) -> float: ...

    def worth(self, depth: int, p: float) -> bool: ...
