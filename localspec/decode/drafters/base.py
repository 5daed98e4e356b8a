"""The one shape every drafter has (llama.cpp's common_speculative, HF's candidate generator).

A drafter is asked for a trie (`propose`), told what the verifier kept (`accept`: keep the
accepted draft in whatever state it has, e.g. the draft model's KV) and what it means for
its own estimates (`learn`). The loop never asks which drafter it holds: what differs
between them is answered here —

- `name`: its registry name, written into DraftTrie.source and the events (frontends
  colour and count by it);
- `kind`: "model" (drafting runs a model: the draft model, a head) or "lookup" (point
  masses read off text: free to draft, priced by auto's lookup gate per match length);
- `draft`: the draft model's KV when it keeps one (the loop's room check), else None;
- `extra_drafts`: drafts beyond -K that every trie may carry (a stack's lookup draft);
- `matched`: a lookup's match length at its last proposal (what auto's gate learns per);
- `origin`: where that proposal's continuation was found, PROMPT (the text the turn was given)
  or ANSWER (the turn's own answer so far), "" where the drafter does not tell (a second key
  of the gate: decode/drafters/lookup.py).

Targets' rows reach an MTP-style head through backend/mtp.py's decode hook; a drafter that
needs nothing of the kind ignores it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from localspec.decode.drafters.trie import DraftStop, DraftTrie

if TYPE_CHECKING:
    from localspec.decode.constrained import Matcher
    from localspec.decode.state import KVState
    from localspec.verify import Decision

MODEL = "model"
LOOKUP = "lookup"
PROMPT = "prompt"  # a lookup's continuation found in the text the turn was given
ANSWER = "answer"  # ... in the turn's own answer so far
PREFIX = "prefix"  # ... in a fill-in-the-middle prompt's text before the cursor (and its extra files)
SUFFIX = "suffix"  # ... in a fill-in-the-middle prompt's text after the cursor


@dataclass(frozen=True)
class DraftRequest:
    """What one iteration asks of a drafter: up to K drafts of up to L tokens after the
    target's committed tokens (stop: the dynamic length rule; greedy_first: draft 0 follows
    the argmax at T = 0; per_draft: each draft ends by its own path)."""

    committed: list[int]
    K: int = 1
    L: int = 8
    stop: DraftStop | None = None
    greedy_first: bool = False
    per_draft: bool = False
    # the grammar state of the main sequence when the turn is constrained (decode/constrained.py):
    # a drafter that samples masks its rows with it (on a fork); lookups ignore it (the loop
    # cuts their drafts)
    constraint: Matcher | None = None


@dataclass(frozen=True)
class Outcome:
    """One verification as a drafter learns from it: tau of `drafted` tokens accepted,
    with the drafter's confidence at each drafted position."""

    tau: int
    drafted: int
    confs: list[float] = field(default_factory=list)


@runtime_checkable
class Drafter(Protocol):
    """See the module docstring."""

    name: str
    kind: str
    draft: KVState | None
    extra_drafts: int
    matched: int
    origin: str

    def propose(self, req: DraftRequest) -> DraftTrie | None:
        """A trie of drafts, or None when it has nothing to draft (the target then writes
        the token itself)."""
        ...

    def accept(self, trie: DraftTrie, d: Decision) -> None:
        """The verifier kept draft d.k's first d.tau tokens, then emitted d.token."""
        ...

    def learn(self, outcome: Outcome) -> None:
        """What the verification means for the drafter's own estimates."""
        ...


class DrafterBase:
    """Defaults for a drafter that keeps no state (a lookup): nothing to accept or learn."""

    name = "drafter"
    kind = LOOKUP
    draft: KVState | None = None
    extra_drafts = 0
    matched = 0
    run = 0  # a lookup's: how far back its match's source agrees with the history (long copies)
    origin = ""

    def propose(self, req: DraftRequest) -> DraftTrie | None:
        raise NotImplementedError

    def accept(self, trie: DraftTrie, d: Decision) -> None:
        """Nothing to keep: the next proposal reads the grown history."""

    def learn(self, outcome: Outcome) -> None:
        """Nothing learned here (a lookup's acceptance is auto's gate's)."""
