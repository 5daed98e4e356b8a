"""Predicted outputs: the client says what the answer will mostly be (OpenAI's `prediction`).

An editor applying an edit, or an agent rewriting a file, knows most of the answer before it
is written: the file as it was. OpenAI's Chat Completions take it as `prediction` ({"type":
"content", "content": ...}) and speculate on it; here it is one more lookup, so what the user
gets is still the target's answer, token for token (a prediction is a point-mass draft:
every verifier stays exact; tests/test_prediction.py compares with plain decoding).

Two ways it drafts, tried in this order each iteration:

- aligned: while the answer so far is the prediction's first tokens, the prediction's next
  tokens (the answer's first token included: no history match is needed to start);
- matched: once the answer has left it (the edit itself), the longest n-gram (--spec-ngram-max
  down to --spec-ngram-min) of the history's tail found in the prediction, and what follows
  it there: where the answer comes back to the old text after an edit.

`auto` prices its bets per (prediction, match length) like the prompt lookup's; until this
session has evidence, a match of length n starts from the shipped prior of a prompt match of
that length, and an aligned bet from the longest match's (costmodel/priors.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from localspec.decode.drafters.base import LOOKUP, DrafterBase, DraftRequest
from localspec.decode.drafters.lookup import RUN_CAP, NgramIndex
from localspec.decode.drafters.trie import DraftTrie, chain_trie

if TYPE_CHECKING:
    from localspec.costmodel import CostModel
    from localspec.decode.turn import Turn

ALIGNED = 8  # the match length an aligned bet is priced as: the answer so far IS the prediction's start


class PredictionDrafter(DrafterBase):
    """Drafts the client's predicted output (see the module docstring)."""

    name = "prediction"
    kind = LOOKUP

    def __init__(self, prediction: list[int], n_prompt: int, n_min: int = 2, n_max: int = 8) -> None:
        self.prediction = prediction
        self.n_prompt = n_prompt  # where the answer starts in the committed history
        self.index = NgramIndex(n_min, n_max)
        self.index.extend(prediction)
        self.matched = 0
        self.run = 0

    def propose(self, req: DraftRequest) -> DraftTrie | None:
        toks, self.matched = self.continuation(req.committed, req.L)
        return chain_trie(toks, self.name) if toks else None

    def continuation(self, committed: list[int], L: int) -> tuple[list[int], int]:
        """(up to L predicted tokens, the match length they are priced as); ([], 0): none."""
        pred, k = self.prediction, len(committed) - self.n_prompt
        if 0 <= k < len(pred) and committed[self.n_prompt:] == pred[:k]:
            self.run = min(k, RUN_CAP)  # the whole answer so far is the copy
            return pred[k : k + L], ALIGNED
        got = self.index.match(committed, L)
        self.run = self.index.run
        return got


def build(turn: Turn, auto: CostModel | None = None) -> PredictionDrafter | None:
    """The registry's builder: None when the turn has no prediction. The prediction is
    tokenized as plain text (a control token's text in it stays text)."""
    text = turn.cfg.prediction
    if not text:
        return None
    toks = turn.target_model.tokenize(text, add_special=False, parse_special=False)
    if not toks:
        return None
    return PredictionDrafter(toks, len(turn.target.committed), turn.cfg.ngram_min, turn.cfg.ngram_max)
