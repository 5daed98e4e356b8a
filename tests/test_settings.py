"""localspec.settings: flags -> Asked (checked, nothing loaded) -> resolve(asked, session) -> Settings.

The model's card fills only what the user did not type; the provisional sampling before a
model loads is llama.cpp's; nothing is overwritten in place; the numbers are checked once.
"""

from __future__ import annotations

import pytest

from localspec.cli.main import build_parser
from localspec.config import AUTO_MAX_K, AUTO_MAX_L, GenConfig
from localspec.errors import ConfigError
from localspec.sampling_defaults import LLAMA_CPP_DEFAULTS
from localspec.session import SessionOptions
from localspec.settings import COST_TIMING_TOKENS, Asked, batch_minimum, check, resolve


class CardSession:
    """Just what resolve reads: GGUF sampling keys, no thinking markers, a plain template."""

    sampling_metadata = {"general.sampling.temp": "0.3", "general.sampling.top_k": "7"}
    think_markers = None

    def render(self, messages, **kw):
        return "".join(m["content"] for m in messages)


def _asked(*argv: str) -> Asked:
    from localspec.flags.args import asked_of

    return asked_of(build_parser().parse_args(["run", "-m", "x.gguf", "-p", "hi", *argv]))


def test_untyped_sampling_is_llama_cpp_s_until_the_model_says_otherwise():
    asked = _asked()
    assert asked.typed == {"temp": None, "top_k": None, "top_p": None, "min_p": None}
    s = asked.cfg.sampling
    assert (s.temp, s.top_k, s.top_p, s.min_p) == tuple(LLAMA_CPP_DEFAULTS[f] for f in ("temp", "top_k", "top_p", "min_p"))
    assert asked.greedy is None  # the model's to say


def test_the_card_fills_only_what_was_not_typed_and_nothing_in_place():
    asked = _asked("--top-k", "3")
    before = asked.cfg.sampling
    st = resolve(asked, CardSession(), "x.gguf")
    assert st.cfg.sampling.temp == pytest.approx(0.3)  # the GGUF's
    assert st.cfg.sampling.top_k == 3  # the flag wins
    assert st.cfg.sampling.top_p == LLAMA_CPP_DEFAULTS["top_p"]
    assert asked.cfg.sampling is before and before.temp == LLAMA_CPP_DEFAULTS["temp"]  # not overwritten
    assert "flag --top-k" in st.sampling_line() and "GGUF general.sampling.temp" in st.sampling_line()


def test_a_typed_zero_temperature_stays_greedy():
    st = resolve(_asked("--temp", "0"), CardSession(), "x.gguf")
    assert st.cfg.sampling.greedy


def test_a_bad_card_value_is_refused_once_resolved():
    class Bad(CardSession):
        sampling_metadata = {"general.sampling.top_p": "7"}

    with pytest.raises(ConfigError, match="--top-p"):
        resolve(_asked(), Bad(), "x.gguf")


def test_typed_values_are_checked_before_any_model_loads():
    with pytest.raises(ConfigError, match="--temp"):
        _asked("--temp", "nan")


def test_the_batch_check_assumes_sampling_when_the_model_decides():
    asked = _asked("--method", "auto")
    unknown, _ = batch_minimum(asked.cfg, 16, greedy=asked.greedy)
    greedy, _ = batch_minimum(asked.cfg, 16, greedy=True)
    assert unknown == max(COST_TIMING_TOKENS, AUTO_MAX_K * AUTO_MAX_L + 2) > greedy == COST_TIMING_TOKENS
    with pytest.raises(ConfigError, match=f"below {unknown}"):
        check(SessionOptions(n_batch=unknown - 1), asked, has_draft=True)
    opts, _ = check(SessionOptions(n_batch=unknown - 1), _asked("--temp", "0"), has_draft=True)
    assert opts.n_batch == unknown - 1


def test_check_returns_new_options_instead_of_editing_them():
    opts = SessionOptions(threads=0)
    out, _ = check(opts, Asked(GenConfig(method="ar")), has_draft=False)
    assert out.threads is None and opts.threads == 0


def test_the_timing_batch_is_the_cost_model_s_largest():
    from localspec.costmodel.curves import BATCH_SIZES, QUICK_SIZES

    assert COST_TIMING_TOKENS == max(BATCH_SIZES) == max(QUICK_SIZES)


def test_run_walks_down_once_sampling_decided_once_nothing_written_in_place(smollm2_path, monkeypatch, capsys):
    """`localspec run --explain`: the model's card is consulted once and no settings object
    (GenConfig, SamplingConfig, SessionOptions) has a field written after it is built (before
    localspec/settings.py: the card twice, six fields overwritten in place)."""
    import localspec.sampling_defaults as sd
    from localspec import config, session
    from localspec.cli.main import main

    calls = {"card": 0}
    writes: list[str] = []
    real = sd.resolve_for

    def counted(*a, **k):
        calls["card"] += 1
        return real(*a, **k)

    monkeypatch.setattr(sd, "resolve_for", counted)
    monkeypatch.setattr("localspec.settings.resolve_for", counted)
    built: set[int] = set()
    for cls in (config.GenConfig, config.SamplingConfig, session.SessionOptions):
        init = cls.__init__

        def __init__(self, *a, _init=init, **k):
            _init(self, *a, **k)
            built.add(id(self))

        def __setattr__(self, name, value):
            if id(self) in built:
                writes.append(f"{type(self).__name__}.{name}")
            object.__setattr__(self, name, value)

        monkeypatch.setattr(cls, "__init__", __init__)
        monkeypatch.setattr(cls, "__setattr__", __setattr__)
    rc = main(["run", "-m", str(smollm2_path), "--method", "ar", "-n", "3", "-p", "hi", "--explain",
               "-t", "0", "--stop", "zz"])
    assert rc == 0
    assert calls["card"] == 1 and writes == []
    assert "in force: sampling" in capsys.readouterr().err
