"""A session's compiled grammars, and the matcher each constrained turn starts from.

Why a cache: a server meets the same grammar again and again (every request of an agent
carries the same tools list or schema) and compiling one costs milliseconds to seconds,
while a fresh matcher of a compiled grammar costs microseconds. Why gates around the
matcher: the answer is constrained, not the prompt; a thinking model's reasoning block
stays free until the answer starts (decode/think_gate.py), and a tool call's grammar holds
only from its opening marker on (decode/tool_gate.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from localspec.backend import Model
from localspec.config import GenConfig
from localspec.decode.constrained import TurnConstraint
from localspec.decode.think_gate import think_gate
from localspec.decode.tool_gate import tool_gate
from localspec.session import ThinkMarkers

if TYPE_CHECKING:
    from localspec.constrain import Constraint, ConstraintSpec

MAX_GRAMMARS = 32  # compiled grammars a session keeps


class Grammars:
    """The most recent MAX_GRAMMARS compiled grammars of one model, by (kind, text)."""

    def __init__(self, model: Model) -> None:
        self.model = model
        self._compiled: dict[tuple[str, str], Constraint] = {}

    def __len__(self) -> int:
        return len(self._compiled)

    def compiled(self, spec: ConstraintSpec) -> Constraint:
        """The spec's grammar compiled for this model, from the cache (the least recently used
        of MAX_GRAMMARS goes). A tool call's trigger and laziness are its gate's, not the
        grammar's, so the key is (kind, text)."""
        from localspec.backend.grammar import eog_ids, ll_tokenizer
        from localspec.constrain import Constraint

        tm = self.model
        key = (spec.kind, spec.text)
        compiled = self._compiled.pop(key, None)
        if compiled is None:
            compiled = Constraint(spec, ll_tokenizer(tm), tm.n_vocab, eog_ids(tm))
            while len(self._compiled) >= MAX_GRAMMARS:
                del self._compiled[next(iter(self._compiled))]  # the least recently used
        self._compiled[key] = compiled
        return compiled

    def turn(self, cfg: GenConfig, markers: ThinkMarkers | None, prompt_text: str | None) -> TurnConstraint | None:
        """The turn's grammar state: a fresh matcher of the compiled grammar for the turn's
        spec (compiled once per spec; the model's llguidance tokenizer once per process:
        backend/grammar.py) behind the thinking and tool-call gates; None when unconstrained.
        A grammar that does not compile raises ConfigError here, before anything is decoded."""
        spec = cfg.constraint
        if spec is None:
            return None
        from localspec.backend.grammar import eog_ids

        tm = self.model
        n = tm.n_vocab
        matcher = self.compiled(spec).matcher()
        trig = spec.trigger
        if trig is not None:  # a tool call: the grammar from its opening marker on
            ids = [tuple(tm.tokenize(t, add_special=False, parse_special=True)) if t else () for t in (trig.open, trig.close)]
            matcher = tool_gate(matcher, ids[0], trig.lazy, n, close=ids[1], eog=eog_ids(tm), parallel=trig.parallel)
        matcher = think_gate(matcher, markers, prompt_text, n)
        return TurnConstraint(matcher, n, spec.kind)
