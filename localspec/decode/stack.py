"""Stacked proposers: a lookup's continuation AND the draft model's drafts in ONE trie.

Why: a chain (`--spec-type ngram,draft`) lets one proposer draft per iteration; on an edit the
lookup is right for a stretch, then the draft model is, and a chain pays a target pass for
whichever guessed wrong. A stack (`--spec-type ngram+draft`) puts both in the same target
decode: draft 0 is the lookup's point mass, drafts 1..K the draft model's samples (their own
q rows), scored together, the accepted one committed, nothing evaluated twice. The drafts
come from different distributions, so the iteration is verified by `rrs` (recursive
rejection with each draft's own q: verify/rrs.py, exact by enumeration), whatever lossless
--method was asked for; at temperature 0 every rule is the longest-greedy-match walk.

When the lookup has no match the draft model drafts alone (an ordinary trie, verified by the
method asked for); the draft model always drafts, so its KV stays in step.
"""

from __future__ import annotations

from localspec.decode.proposer import DraftTrie, Node, Proposer

STACK = "stack"  # DraftTrie.source of a merged trie


def merge(lookup: DraftTrie, model: DraftTrie) -> DraftTrie:
    """One trie: the lookup's draft first (members 0), the model's drafts after it (k + 1)."""
    off = len(lookup.nodes)
    nodes = [Node(n.token, n.depth, list(n.members), n.parent, n.evaluated) for n in lookup.nodes]
    nodes += [Node(n.token, n.depth, [k + 1 for k in n.members], n.parent + off if n.parent >= 0 else -1,
                   n.evaluated) for n in model.nodes]
    return DraftTrie(K=1 + model.K, nodes=nodes,
                     path=[list(lookup.path[0])] + [[i + off for i in p] for p in model.path],
                     q=[list(lookup.q[0])] + [list(r) for r in model.q],
                     conf=[list(lookup.conf[0])] + [list(c) for c in model.conf],
                     evaluated_depth=model.evaluated_depth, source=STACK)


class StackProposer:
    """A lookup proposer and the draft model's Proposer drafting into one trie (see above)."""

    def __init__(self, lookup, model: Proposer, lookup_source: str = "ngram") -> None:  # noqa: ANN001
        self.lookup = lookup  # a LookupProposer or SuffixProposer
        self.lookup_source = lookup_source
        self.model = model
        self.draft = model.draft
        self._parts: tuple[DraftTrie | None, DraftTrie] | None = None
        self.last: DraftTrie | None = None  # the trie of the newest propose (auto learns from it)

    @property
    def matched(self) -> int:
        return getattr(self.lookup, "matched", 0)

    def propose(self, committed: list[int], K: int, L: int, stop=None, greedy_first: bool = False,  # noqa: ANN001
                per_draft: bool = False) -> DraftTrie:
        """K model drafts plus, when the history matches, the lookup's one (K + 1 in all)."""
        found = self.lookup.propose(committed, 1, L)
        if found is not None:  # a chain of lookups (auto's) names the one that matched
            self.lookup_source = found.source
        drafted = self.model.propose(committed, K, L, stop, greedy_first, per_draft)
        self._parts = (found, drafted)
        self.last = drafted if found is None else merge(found, drafted)
        return self.last

    def accept(self, trie: DraftTrie, k: int, tau: int, token: int) -> None:
        """Keep the verifier's choice in the draft model's KV: its own draft k - 1, or for
        the lookup's draft nothing of the model's drafts (the next propose catches the
        draft up with the accepted tokens, as after a chain's lookup iteration)."""
        assert self._parts is not None
        found, drafted = self._parts
        if trie.source != STACK:
            self.model.accept(drafted, k, tau, token)
            return
        if k == 0:
            first = trie.nodes[trie.path[0][0]].token if tau > 0 else token
            self.model.accept(drafted, 0, 0, first)  # its drafts dropped; `first` pending
            self.lookup.accept(found, 0, tau, token)
        else:
            self.model.accept(drafted, k - 1, tau, token)
            self.lookup.accept(found, 0, 0, token)

    def observe(self, tau: int, drafted: int, confs: list[float]) -> None:
        self.model.observe(tau, drafted, confs)
