"""The shared bench runner on a scripted session (no model): what reaches localspec and the
llama.cpp peer, the run record it makes, and the peer column dropping out on failure."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

import pytest

from localspec.bench import peer
from localspec.bench.common import Prompt
from localspec.bench.runner import PEER, Job, Runner, Spec, drain, spec
from localspec.config import GenConfig
from localspec.events import Done, Event, Stats, Written

BOS = "<s>"


class Scripted:
    """Answers every generate() with two Written events and a Done; records the prompts."""

    target_name, draft_name = "t", "d"

    def __init__(self, bos_text: str = "") -> None:
        self._bos = bos_text
        self.prompts: list[object] = []
        self.configs: list[GenConfig] = []
        self.forgot = 0

    def forget_lookups(self) -> None:
        self.forgot += 1

    @property
    def bos_text(self) -> str:
        return self._bos

    def render(self, messages, *, template_kwargs=None) -> str:
        return BOS + "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>"

    def generate(self, prompt, cfg: GenConfig, *, prefill: str = "", template_kwargs=None) -> Iterator[Event]:
        self.prompts.append(prompt)
        self.configs.append(cfg)
        st = Stats(method=cfg.method, n_tokens=6, iterations=2, target_calls=2, seconds=0.5,
                   accepted_lengths=[3, 1], draft_seconds=0.1, verify_seconds=0.3, overhead_seconds=0.01)
        yield Written((1, 2), "ab", "target")
        yield Written((3, 4), "cd", "target")
        yield Done("max_tokens", "abcd", st)


def _args(**kw) -> argparse.Namespace:
    base = dict(n_predict=6, draft_temp=None, threads=2, ctx=512, peer_p_min=0.75, auto_free=True)
    return argparse.Namespace(**{**base, **kw})


def test_drain_returns_done_and_keeps_events() -> None:
    kept: list[Event] = []
    done = drain(Scripted().generate("x", GenConfig()), keep=kept)
    assert done.text == "abcd" and len(kept) == 3 and kept[-1] is done
    with pytest.raises(RuntimeError, match="without its Done"):
        drain(iter([Written((1,), "a", "target")]))


def test_local_run_record_and_prompt_shapes() -> None:
    sess = Scripted()
    r = Runner(sess, _args()).local(Prompt("math", "m1", "2+2?"), spec("mdbv", 3, 4, 0.4), seed=7)
    assert sess.prompts == [[{"role": "user", "content": "2+2?"}]]  # chat prompts go as messages
    cfg = sess.configs[0]
    assert (cfg.method, cfg.K, cfg.L, cfg.seed, cfg.sampling.temp, cfg.n_predict) == ("mdbv", 3, 4, 7, 0.4, 6)
    assert (r.dataset, r.prompt_id, r.label, r.text, r.reason) == ("math", "m1", "mdbv K=3 L=4", "abcd", "max_tokens")
    assert r.block_efficiency == 3.0 and r.mean_accepted == 2.0 and r.iterations == 2
    assert r.spec == spec("mdbv", 3, 4, 0.4) and r.to_json()["block_efficiency"] == 3.0
    Runner(sess, _args()).local(Prompt("text", "t1", "Once upon", chat=False), spec("ar"), seed=0)
    assert sess.prompts[-1] == "Once upon"  # raw text stays raw text
    assert sess.forgot == 2  # every run starts with an empty suffix store


def test_peer_gets_rendered_text_without_a_second_bos(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple] = []

    def fake_run(target, draft, prompt, n_predict, threads, draft_max, draft_min, p_min, temp=0.0, seed=42, **kw):
        seen.append((prompt, n_predict, threads, draft_max, p_min, temp, seed, kw))
        return peer.PeerResult(20.0, 10, 8, n_predict + 2, 0.4, ["spec"], "", text="abcd")

    monkeypatch.setattr(peer, "run_speculative_simple", fake_run)
    models = (Path("t.gguf"), Path("d.gguf"))
    peer_spec = Spec(PEER, 1, 16, 0.0)
    for bos, expect in ((BOS, "<user>hi<assistant>"), ("", BOS + "<user>hi<assistant>")):
        r = Runner(Scripted(bos), _args(), models).peer(Prompt("chat", "c1", "hi"), peer_spec, seed=3)
        assert seen[-1][0] == expect
    assert seen[-1][1:] == (6, 2, 16, 0.75, 0.0, 3, {"ctx_size": 512, "spec_type": "draft-simple"})
    assert (r.method, r.label, r.n_tokens, r.target_calls, r.block_efficiency) == (PEER, "llama.cpp n_max=16", 8, 0, None)
    assert r.extra["acceptance"] == 0.8


def test_run_all_interleaves_and_drops_a_failing_peer(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    def failing(*a, **kw):
        raise peer.PeerRunError("boom")

    monkeypatch.setattr(peer, "run_speculative_simple", failing)
    specs = [spec("ar"), spec("sd", 1, 4)]
    jobs = [Job(Prompt("d", f"p{i}", "q"), specs, i, Spec(PEER, 1, 16), {"ablation": i == 0}) for i in range(2)]
    runner = Runner(Scripted(), _args(), (Path("t"), Path("d")))
    runs, interrupted = runner.run_all(jobs, "test")
    assert not interrupted and runner.peer_models is None
    assert [(r.prompt_id, r.label) for r in runs] == [("p0", "ar"), ("p0", "sd K=1 L=4"), ("p1", "ar"), ("p1", "sd K=1 L=4")]
    assert [r.extra["ablation"] for r in runs] == [True, True, False, False]
    assert capsys.readouterr().err.count("llama.cpp peer failed") == 1


def test_a_reversed_job_runs_the_peers_first_and_records_each_position(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(peer, "run_speculative_simple",
                        lambda *a, **kw: peer.PeerResult(20.0, 10, 8, 8, 0.4, ["spec"], "", text="abcd"))
    specs = [spec("ar"), spec("sd", 1, 4)]
    peers = [Spec(PEER, 1, 16), Spec(PEER, 1, 16, proposers="ngram-simple")]
    jobs = [Job(Prompt("d", f"p{i}", "q"), specs, i, peers[0], more_peers=peers[1:], reverse=i == 1) for i in range(2)]
    runs, _ = Runner(Scripted(), _args(), (Path("t"), Path("d"))).run_all(jobs, "test")
    forward = ["ar", "sd K=1 L=4", peers[0].label, peers[1].label]
    assert [(r.prompt_id, r.label) for r in runs] == [("p0", x) for x in forward] + [("p1", x) for x in forward[::-1]]
    assert [r.extra["position"] for r in runs] == [0, 1, 2, 3] * 2
    assert [r.extra["reversed"] for r in runs] == [False] * 4 + [True] * 4
