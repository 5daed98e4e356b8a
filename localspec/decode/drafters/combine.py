"""Drafters made of drafters: a chain (`--spec-type ngram,draft`) and a stack (`ngram+draft`).

A chain tries its drafters in order; the first that has a draft drafts this iteration.
Which one drafted depends only on the history, never on this iteration's verification, so
every lossless verifier stays exact (llama.cpp's `--spec-type ngram-simple,draft-simple`).

A stack puts a lookup's continuation AND the draft model's drafts into ONE trie. Why: a
chain lets one drafter draft per iteration; on an edit the lookup is right for a stretch,
then the draft model is, and a chain pays a target pass for whichever guessed wrong. In a
stack both are scored in the same target decode: draft 0 is the lookup's point mass,
drafts 1..K the draft model's samples (their own q rows), the accepted one committed,
nothing evaluated twice. The drafts come from different distributions, so the trie names
its verifier: `rrs` (recursive rejection with each draft's own q: verify/rrs.py, exact by
enumeration), whatever lossless --method was asked for; at temperature 0 every rule is the
longest-greedy-match walk. When the lookup has no match the model drafts alone (an
ordinary trie, verified by the method asked for); the model always drafts, so its KV stays
in step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from localspec.decode.drafters.base import Drafter, DrafterBase, DraftRequest, Outcome
from localspec.decode.drafters.trie import DraftTrie, Node
from localspec.verify import Decision

if TYPE_CHECKING:
    from localspec.decode.state import KVState

STACK_VERIFIER = "rrs"  # the verifier of a trie whose drafts have different q (verify/rrs.py)


class ChainDrafter(DrafterBase):
    """Drafters tried in order (see the module docstring)."""

    def __init__(self, drafters: list[Drafter]) -> None:
        self.drafters = drafters
        self.last = drafters[0]
        self.name = ",".join(d.name for d in drafters)
        self.kind = drafters[0].kind if len({d.kind for d in drafters}) == 1 else "chain"

    @property
    def draft(self) -> KVState | None:  # type: ignore[override]
        """The draft model's KV (for the room check), if one is in the chain."""
        return next((d.draft for d in self.drafters if d.draft is not None), None)

    @property
    def extra_drafts(self) -> int:  # type: ignore[override]
        """A stack in the chain may add its lookup's draft: room for the most any part adds."""
        return max(d.extra_drafts for d in self.drafters)

    @property
    def matched(self) -> int:  # type: ignore[override]
        """The match length of the lookup that drafted last (auto's gate prices by it)."""
        return self.last.matched

    @property
    def run(self) -> int:  # type: ignore[override]
        """How far back the last drafting lookup's match agrees (auto's long bets)."""
        return self.last.run

    @property
    def origin(self) -> str:  # type: ignore[override]
        """Where the last drafting lookup found its continuation."""
        return self.last.origin

    def propose(self, req: DraftRequest) -> DraftTrie | None:
        for d in self.drafters:
            trie = d.propose(req)
            if trie is not None:
                self.last = d
                return trie
        return None

    def accept(self, trie: DraftTrie, d: Decision) -> None:
        self.last.accept(trie, d)

    def learn(self, outcome: Outcome) -> None:
        self.last.learn(outcome)


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
                     evaluated_depth=model.evaluated_depth, source=model.source, calls_model=model.calls_model,
                     sources=[lookup.source] + [model.source] * model.K, verifier=STACK_VERIFIER)


class StackDrafter(DrafterBase):
    """A lookup drafter and the draft model's drafter drafting into one trie (see above)."""

    extra_drafts = 1  # the lookup's draft beside -K model drafts

    def __init__(self, lookup: Drafter, model: Drafter) -> None:
        self.lookup = lookup
        self.model = model
        self.name = f"{lookup.name}+{model.name}"
        self.kind = model.kind
        self._parts: tuple[DraftTrie | None, DraftTrie] | None = None
        self.last: DraftTrie | None = None  # the trie of the newest propose (auto learns from it)

    @property
    def draft(self) -> KVState | None:  # type: ignore[override]
        return self.model.draft

    @property
    def matched(self) -> int:  # type: ignore[override]
        return self.lookup.matched

    @property
    def run(self) -> int:  # type: ignore[override]
        return self.lookup.run

    @property
    def origin(self) -> str:  # type: ignore[override]
        return self.lookup.origin

    def propose(self, req: DraftRequest) -> DraftTrie | None:
        """K model drafts plus, when the history matches, the lookup's one (K + 1 in all)."""
        found = self.lookup.propose(DraftRequest(req.committed, 1, req.L))
        drafted = self.model.propose(req)
        if drafted is None:
            self._parts, self.last = None, found
            return found
        self._parts = (found, drafted)
        self.last = drafted if found is None else merge(found, drafted)
        return self.last

    def accept(self, trie: DraftTrie, d: Decision) -> None:
        """Keep the verifier's choice in the draft model's KV: its own draft k - 1, or for
        the lookup's draft nothing of the model's drafts (the next propose catches the
        draft up with the accepted tokens, as after a chain's lookup iteration)."""
        if self._parts is None:  # the model had nothing: the lookup drafted alone
            self.lookup.accept(trie, d)
            return
        found, drafted = self._parts
        if trie.sources is None:
            self.model.accept(drafted, d)
            return
        assert found is not None
        if d.k == 0:
            first = trie.nodes[trie.path[0][0]].token if d.tau > 0 else d.token
            self.model.accept(drafted, Decision(0, 0, first))  # its drafts dropped; `first` pending
            self.lookup.accept(found, d)
        else:
            self.model.accept(drafted, Decision(d.k - 1, d.tau, d.token))
            self.lookup.accept(found, Decision(0, 0, d.token))

    def learn(self, outcome: Outcome) -> None:
        self.model.learn(outcome)
