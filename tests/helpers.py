"""Small shared helpers for tests that load real models (SmolLM2)."""

from __future__ import annotations

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
