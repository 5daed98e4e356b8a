"""Small shared helpers for tests that load real models (SmolLM2)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from localspec.backend import Model
from localspec.runtime import RuntimeSession
from localspec.session import SessionOptions

_models: dict[str, Model] = {}


def model(path: Path) -> Model:
    """Load once per test process (SmolLM2 loads in ~0.1 s, but tests load it a lot)."""
    key = str(path)
    if key not in _models:
        _models[key] = Model(path)
    return _models[key]


def session(target: Path, draft: Path | None = None, **kw) -> RuntimeSession:
    opts = SessionOptions(n_ctx=kw.pop("n_ctx", 2048), threads=kw.pop("threads", 1), **kw)
    return RuntimeSession(model(target), model(draft) if draft else None, opts)


@dataclass
class FixedCutoff:
    """A DraftStop with llama.cpp's p-min rule: stop at the first row whose top probability
    is below `p_min` (a data-dependent length for tests of the proposer and exactness)."""

    p_min: float

    def accept_prob(self, conf: float) -> float:
        return 1.0 if conf >= self.p_min else 0.0

    def worth(self, depth: int, p: float) -> bool:
        return p > 0.0


def paying_cost_model_with_cutoff(sess, monkeypatch, p_min: float) -> list[tuple[int, ...]]:
    """Give `sess` a cost model under which speculation always pays and whose dynamic
    length is a p-min rule on the draft's real rows (so lengths depend on the data); nothing
    is saved. Returns the list the proposer appends each trie's draft lengths to.
    The caller resets `sess.costs = None` when done (other tests share the session)."""
    from localspec import costmodel
    from localspec.costmodel import Acceptance, CostCurve, CostModel
    from localspec.decode.drafters import model as proposer

    cheap = CostCurve([1, 64], [0.001, 0.002])
    sess.costs = CostModel(CostCurve([1, 64], [0.010, 0.020]), cheap, acceptance=Acceptance(prior=0.9))
    sess.costs.acceptance_path = None
    monkeypatch.setattr(costmodel, "model_for", lambda *a, **k: sess.costs)
    monkeypatch.setattr(CostModel, "draft_stop", lambda self, best, per_draft=False, lookahead=8: FixedCutoff(p_min))
    shapes: list[tuple[int, ...]] = []
    real = proposer.propose

    def recording(*a, **kw):
        trie = real(*a, **kw)
        shapes.append(tuple(trie.length(k) for k in range(trie.K)))
        return trie

    monkeypatch.setattr(proposer, "propose", recording)
    return shapes
