"""A drafter defined here alone, registered once, runs everywhere a built-in one does.

The proof that the drafter interface (localspec/decode/drafters/base.py) and its registry are
the only places a drafter lives: `toy` below is written in this file, registered with
`registry.register`, and then drives a fixed method, a chain and a stack with the draft
model, `auto` (priced by the lookup gate like any lookup) and `localspec serve`'s
provenance, without a line of the package knowing its name. At T = 0 every run must give
AR's text token for token, and every accepted draft span must name `toy`.

The toy drafts the reference answer with every seventh token of it wrong (point masses, so
every lossless verifier applies): some drafts wholly right, some cut short.
"""

from __future__ import annotations

import httpx
import pytest

from localspec.config import GenConfig, SamplingConfig
from localspec.decode.drafters import registry
from localspec.decode.drafters.base import LOOKUP, DrafterBase, DraftRequest
from localspec.decode.drafters.trie import DraftTrie, chain_trie
from localspec.errors import ConfigError
from localspec.events import Accepted, Drafted

EDIT = [{"role": "user", "content": "Return this code exactly as it is:\n\ndef add(a, b):\n    return a + b\n\n\n"
         "def sub(a, b):\n    return a - b\n"}]


class Toy(DrafterBase):
    """Drafts the known answer (`Toy.answer`, set by the test from an AR run) after the
    prompt, with every seventh token of the answer replaced by a wrong one."""

    name = "toy"
    kind = LOOKUP
    answer: list[int] = []
    prompt_len = 0
    proposals = 0

    def propose(self, req: DraftRequest) -> DraftTrie | None:
        done = len(req.committed) - Toy.prompt_len
        if done < 0 or req.committed[Toy.prompt_len:] != Toy.answer[:done]:
            return None  # not on the reference path (another prompt): nothing to draft
        toks = Toy.answer[done:done + req.L]
        if not toks:
            return None
        Toy.proposals += 1
        self.matched = min(done, 4) + 1  # what auto's gate learns per: any small key will do
        return chain_trie([t if (done + i) % 7 != 6 else (t + 1) % 1000 for i, t in enumerate(toks)], self.name)


@pytest.fixture
def toy():
    registry.register(registry.DrafterSpec("toy", LOOKUP, lambda turn, auto: Toy(), one_chain=True,
                                           summary="a test's drafter"))
    Toy.proposals = 0
    yield Toy
    registry.unregister("toy")


def greedy(method: str, **kw) -> GenConfig:
    return GenConfig(method=method, n_predict=kw.pop("n_predict", 40), sampling=SamplingConfig(temp=0.0), **kw)


@pytest.fixture(scope="module")
def smol(smollm2_path, smollm2_q4_0_path):
    from tests.support.helpers import session

    s = session(smollm2_path, smollm2_q4_0_path)
    ref = list(s.generate(EDIT, greedy("ar")))[-1]
    return s, ref, s.last_prompt_tokens, s.last_tokens


def _arm(toy, smol) -> None:
    _, _, prompt, answer = smol
    toy.prompt_len, toy.answer = len(prompt), answer


def _sources(events) -> set[str]:
    return {ev.source for ev in events if isinstance(ev, Accepted) and ev.tokens}


def test_the_registry_names_it_everywhere_config_reads(toy):
    cfg = GenConfig(method="sd", spec_type=("toy+draft",))
    cfg.validate()
    assert cfg.spec_type == ("toy+draft",) and cfg.stacked and "toy" in registry.lookups()
    with pytest.raises(ConfigError, match="use draft, ngram, prediction, suffix, mtp, grammar, toy"):  # the error lists it
        GenConfig(spec_type=("nope",)).validate()
    registry.unregister("toy")
    with pytest.raises(ConfigError, match="toy is not a drafter"):  # gone once unregistered
        GenConfig(spec_type=("toy",)).validate()


@pytest.mark.parametrize("spec_type", [("toy",), ("toy", "draft"), ("toy+draft",)])
def test_a_fixed_method_runs_it_alone_chained_and_stacked(toy, smol, spec_type):
    _arm(toy, smol)
    s, ref, _, _ = smol
    events = list(s.generate(EDIT, greedy("sd", K=1, L=5, spec_type=spec_type)))
    done = events[-1]
    assert done.text == ref.text and toy.proposals > 0
    st = done.stats
    assert st.proposed["toy"][0] > 0 and 0 < st.proposed["toy"][1] < st.proposed["toy"][0]  # partly right
    assert "toy" in _sources(events) and {ev.source for ev in events if isinstance(ev, Drafted)} <= {"toy", "draft"}
    assert st.to_json()["proposers"]["toy"]["drafted"] == st.proposed["toy"][0]
    if spec_type == ("toy+draft",):
        assert st.stacked > 0 and st.target_calls == st.iterations  # one target pass per stacked iteration


def test_auto_prices_it_as_a_lookup(toy, smol, monkeypatch, tmp_path):
    """auto, no draft model named: the toy drafts where the gate (on a flat verify curve, a
    GPU's) says it pays, and the text is AR's."""
    from localspec import costmodel
    from localspec.costmodel import CostCurve

    _arm(toy, smol)
    s, ref, _, _ = smol
    monkeypatch.setenv("LOCALSPEC_HOME", str(tmp_path))
    monkeypatch.setattr(costmodel, "load_curve", lambda ctx: CostCurve([1, 64], [0.010, 0.012]))
    s.costs = None
    cfg = greedy("auto", spec_type=("toy",), auto_K=True, auto_L=True, seed=1)
    events = list(s.generate(EDIT, cfg))
    done = events[-1]
    assert done.text == ref.text
    assert done.stats.proposed.get("toy", (0, 0))[0] > 0 and "toy" in done.stats.ran and "toy" in _sources(events)
    assert done.stats.draft_calls == 0  # the draft model was not named: it never ran
    s.costs = None


def test_the_server_provenance_names_it(toy, smol):
    from localspec.server.app import ServerConfig, create_app
    from localspec.server.schema import Limits
    from tests.test_server import ServerThread

    _arm(toy, smol)
    s, ref, _, _ = smol
    cfg = greedy("sd", K=1, L=4, spec_type=("toy",))
    srv = ServerThread(create_app(s, ServerConfig(model_id="smollm2", limits=Limits(cfg=cfg, n_ctx=2048))))
    try:
        r = httpx.post(srv.url + "/v1/chat/completions", timeout=120, json={
            "model": "smollm2", "messages": EDIT, "max_tokens": 40, "temperature": 0,
            "localspec": {"provenance": True}})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["choices"][0]["message"]["content"] == ref.text
        segs = body["localspec"]["provenance"]
        assert {g.get("proposer") for g in segs if g["kind"] == "draft"} == {"toy"}
    finally:
        srv.stop()
