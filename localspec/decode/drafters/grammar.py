"""The `grammar` drafter: the tokens a grammar forces next, drafted for free.

Under a JSON schema long stretches of the answer are forced: keys, quotes, braces,
separators, an enum's only continuation. At such a position the masked target law has one
token with probability 1 (decode/constrained.py), so a draft of the forced tokens is never
rejected; it costs only its rows in the verify batch, and the token after it is the target's
own (the bonus). It needs no model and no history: `propose` asks the turn's grammar state
(`DraftRequest.constraint`) for what it forces, up to L tokens, and returns None where
nothing is forced (the next drafter in the chain, or the target, goes on).

The loop puts it first wherever a turn has a constraint (`make_drafter`, auto's policy), so
a draft model never runs where the next tokens are forced.
"""

from __future__ import annotations

from typing import Any

from localspec.decode.drafters.base import DrafterBase, DraftRequest
from localspec.decode.drafters.trie import GRAMMAR, DraftTrie, chain_trie


class GrammarDrafter(DrafterBase):
    """See the module docstring."""

    name = GRAMMAR
    kind = GRAMMAR

    def propose(self, req: DraftRequest) -> DraftTrie | None:
        if req.constraint is None:
            return None
        forced = req.constraint.forced(req.L)
        return chain_trie(forced, self.name) if forced else None


def build(turn: Any, auto: Any = None) -> GrammarDrafter | None:
    """The registry's builder: only for a constrained turn."""
    return GrammarDrafter() if getattr(turn, "constraint", None) is not None else None
