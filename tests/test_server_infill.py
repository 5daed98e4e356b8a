"""`/infill` and `/v1/completions` with `suffix` on a real server: Qwen2.5-Coder-0.5B (a FIM
model) alone, greedy, drafting by prompt lookup only (no draft model, no cost-model timing),
and SmolLM2 (no FIM tokens) for the 400. Answers are short; the whole file is slow-marked
(model load plus a dozen completions is well over 7 s on 2 cores)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import httpx
import pytest

from localspec.config import GenConfig
from localspec.decode.state import common_prefix
from localspec.server.app import ServerConfig, create_app
from localspec.server.fim_prefetch import next_request
from localspec.server.schema import Limits
from localspec.session import FimInput
from tests.support.helpers import session
from tests.test_server import ServerThread

pytestmark = pytest.mark.slow

# the hole's text is in the suffix: what prompt lookup drafts from
LIST = {"input_prefix": "values = [\n    'alpha',\n    'beta',\n",
        "input_suffix": "]\n\nsame = [\n    'alpha',\n    'beta',\n    'gamma',\n    'delta',\n    'epsilon',\n]\n"}
# a method body: the answer's first line is indented by 8, then the class goes on at 4
BODY = {"input_prefix": "class Point:\n    def __init__(self, x, y):\n",
        "input_suffix": "\n    def norm(self):\n        return (self.x ** 2 + self.y ** 2) ** 0.5\n"}


def server_cfg() -> GenConfig:
    cfg = GenConfig(method="sd", K=1, L=8, n_predict=16, spec_type=("ngram",))
    cfg.sampling.temp = 0.0
    return cfg


@pytest.fixture(scope="module")
def srv(qwen_draft_path: Path):
    sess = session(qwen_draft_path, n_ctx=2048, threads=2)
    # no prefetch here: these tests use the session between requests (the prefetch tests' own server has it)
    config = ServerConfig(model_id="qwen-0.5b", limits=Limits(cfg=server_cfg(), n_ctx=2048), prefetch=False)
    s = ServerThread(create_app(sess, config))
    s.session = sess
    yield s
    s.stop()


@pytest.fixture(scope="module")
def srv_prefetch(qwen_draft_path: Path):
    sess = session(qwen_draft_path, n_ctx=4096, threads=2)
    s = ServerThread(create_app(sess, ServerConfig(model_id="qwen-0.5b", limits=Limits(cfg=server_cfg(), n_ctx=4096))))
    s.session = sess
    yield s
    s.stop()


def infill(srv, body: dict, timeout: float = 120) -> dict:
    r = httpx.post(f"{srv.url}/infill", json=body, timeout=timeout)
    assert r.status_code == 200, r.text
    return r.json()


def test_infill_answers_in_llama_servers_shape_and_matches_the_session(srv) -> None:
    got = infill(srv, {**LIST, "n_predict": 12, "localspec": {"provenance": True}})
    for key in ("content", "stop", "tokens_predicted", "tokens_evaluated", "timings", "stop_type", "id_slot"):
        assert key in got, key
    assert got["stop"] is True and got["stop_type"] == "limit" and got["tokens_predicted"] == 12
    assert got["timings"]["predicted_n"] == 12
    # the same prompt and config straight on a session (after the server's turn: no overlap)
    cfg = server_cfg()
    cfg.n_predict = 12
    prompt = srv.session.fim_prompt(FimInput(LIST["input_prefix"], LIST["input_suffix"]), 12)
    assert got["tokens_evaluated"] == len(prompt)
    assert got["content"] == "".join(e.text for e in _done(srv.session.generate(prompt, cfg)))
    # provenance: the lookup copied the suffix's lines into the hole
    segs = got["localspec"]["provenance"]
    assert "".join(s["text"] for s in segs) == got["content"]
    assert sum(s["tokens"] for s in segs if s.get("proposer") == "ngram") >= 4, segs


def _done(events):
    return [e for e in events if type(e).__name__ == "Done"]


def test_completions_suffix_is_the_same_fill(srv) -> None:
    body = {"prompt": LIST["input_prefix"], "suffix": LIST["input_suffix"], "max_tokens": 10, "temperature": 0}
    oai = httpx.post(f"{srv.url}/v1/completions", json=body, timeout=120)
    assert oai.status_code == 200, oai.text
    ours = infill(srv, {**LIST, "n_predict": 10})
    assert oai.json()["choices"][0]["text"] == ours["content"]
    assert oai.json()["object"] == "text_completion"


def test_streamed_infill_is_llama_server_chunks_without_done(srv) -> None:
    whole = infill(srv, {**LIST, "n_predict": 10})["content"]
    with httpx.stream("POST", f"{srv.url}/infill", json={**LIST, "n_predict": 10, "stream": True},
                      timeout=120) as r:
        assert r.status_code == 200
        lines = [ln for ln in r.iter_lines() if ln]
    assert all(ln.startswith("data: ") for ln in lines) and "data: [DONE]" not in lines
    chunks = [json.loads(ln[6:]) for ln in lines]
    assert [c["stop"] for c in chunks] == [False] * (len(chunks) - 1) + [True]
    assert "".join(c["content"] for c in chunks) == whole
    assert chunks[-1]["content"] == "" and chunks[-1]["timings"]["predicted_n"] == 10


def test_n_indent_ends_the_hole_where_the_block_ends(srv) -> None:
    # the free answer is asked once to warm the prompt cache: the cut request then decodes
    # after the same cached prefix as the second free one (a first request's fresh prompt
    # evaluation rounded a near-tie, `** 0.5` vs `math.sqrt`, the other way on an AVX2 EPYC)
    infill(srv, {**BODY, "n_predict": 24})
    free = infill(srv, {**BODY, "n_predict": 24})["content"]
    cut = infill(srv, {**BODY, "n_predict": 24, "n_indent": 8})
    assert cut["stop_type"] == "limit", cut
    first = free.index("\n") + 1
    # what follows the first line in the free answer is a line indented by less than 8
    assert cut["content"] == free[:first] + free[first:][: len(free[first:]) - len(free[first:].lstrip(" \t"))]
    assert "n_indent=8" in cut["localspec"]["message"]


def test_t_max_predict_ms_stops_at_the_first_new_line(srv) -> None:
    free = infill(srv, {**BODY, "n_predict": 24})["content"]
    got = infill(srv, {**BODY, "n_predict": 24, "t_max_predict_ms": 1})
    assert got["stop_type"] == "limit" and "t_max_predict_ms" in got["localspec"]["message"]
    assert free.startswith(got["content"]) and "\n" in got["content"]
    assert "\n" not in got["content"][: got["content"].index("\n")]
    assert len(got["content"]) < len(free)


def test_response_fields_trim_the_answer(srv) -> None:
    got = infill(srv, {**LIST, "n_predict": 4, "response_fields": ["content", "timings/predicted_n"]})
    assert set(got) == {"content", "timings/predicted_n"} and got["timings/predicted_n"] == 4


def test_a_newer_request_from_the_same_slot_stops_the_old_one(srv) -> None:
    """An editor typed on: the older completion ends within an iteration, the newer runs."""
    first_chunk = threading.Event()
    old: dict = {}

    def stream_old() -> None:
        body = {**BODY, "n_predict": 400, "id_slot": 3, "stream": True}
        with httpx.stream("POST", f"{srv.url}/infill", json=body, timeout=300) as r:
            chunks = []
            for ln in r.iter_lines():
                if ln:
                    chunks.append(json.loads(ln[6:]))
                    first_chunk.set()
        old["last"] = chunks[-1]

    t = threading.Thread(target=stream_old)
    t.start()
    assert first_chunk.wait(120)
    t0 = time.monotonic()
    new = infill(srv, {**LIST, "n_predict": 4, "id_slot": 3})
    t.join(60)
    assert not t.is_alive()
    assert old["last"]["stop_type"] == "none" and old["last"]["tokens_predicted"] < 400  # interrupted
    assert new["tokens_predicted"] == 4 and new["stop_type"] == "limit"
    assert time.monotonic() - t0 < 60
    served = {s.job_id: s for s in srv.worker.served}
    assert any(s.reason == "interrupted" and s.cancelled for s in served.values())


def test_another_slot_is_not_superseded(srv) -> None:
    """Different id_slot values are different clients: both complete in full."""
    out: dict = {}

    def one(slot: int) -> None:
        out[slot] = infill(srv, {**LIST, "n_predict": 6, "id_slot": slot})

    ts = [threading.Thread(target=one, args=(s,)) for s in (5, 6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(180)
    assert [out[s]["tokens_predicted"] for s in (5, 6)] == [6, 6]


def test_a_model_without_fim_tokens_is_a_400(smollm2_path: Path) -> None:
    sess = session(smollm2_path, n_ctx=512)
    s = ServerThread(create_app(sess, ServerConfig(model_id="smollm2", limits=Limits(cfg=GenConfig(), n_ctx=512))))
    try:
        r = httpx.post(f"{s.url}/infill", json={"input_prefix": "a", "input_suffix": "b"}, timeout=30)
        assert r.status_code == 400 and "Infill is not supported" in r.json()["error"]["message"]
        r = httpx.post(f"{s.url}/v1/completions", json={"prompt": "a", "suffix": "b"}, timeout=30)
        assert r.status_code == 400 and r.json()["error"]["param"] == "suffix"
    finally:
        s.stop()


def test_a_superseded_request_stops_during_its_prompt(srv) -> None:
    """A keystroke that lands while the older request's prompt is still being evaluated ends
    that evaluation at the next batch: no answer, part of the prompt evaluated (and kept)."""
    big = [{"filename": f"mod{i}.py", "text": "".join(f"def f{i}_{j}(x):\n    return x * {j}\n" for j in range(60))}
           for i in range(3)]
    body = {**BODY, "input_extra": big, "n_predict": 16, "id_slot": 9}
    old: dict = {}
    t = threading.Thread(target=lambda: old.update(infill(srv, body)))
    t.start()
    time.sleep(0.3)  # its prompt (about 2,000 tokens, 4 batches) is being evaluated
    new = infill(srv, {**LIST, "n_predict": 2, "id_slot": 9})
    t.join(120)
    assert new["tokens_predicted"] == 2
    assert old["tokens_predicted"] == 0 and old["stop_type"] == "none", old
    assert 0 < old["timings"]["prompt_n"] < old["tokens_evaluated"], old["timings"]


def test_a_follow_up_request_drafts_the_previous_answer(srv) -> None:
    """The user typed the first part of the suggestion: the next request drafts the rest of
    it (server/fim_hint.py), and answers what plain decoding would. (The list's next items:
    the 0.5B model goes on with its own suggestion there.)"""
    body = {**LIST, "n_predict": 16, "id_slot": 0, "localspec": {"provenance": True}}
    first = infill(srv, body)["content"]
    typed = first[: max(1, len(first) // 3)]
    follow = {**body, "input_prefix": LIST["input_prefix"] + typed}
    got = infill(srv, follow)
    by = {s.get("proposer") for s in got["localspec"]["provenance"]}
    assert "prediction" in by, got["localspec"]["provenance"]
    cfg = server_cfg()
    cfg.n_predict = 16
    prompt = srv.session.fim_prompt(FimInput(follow["input_prefix"], LIST["input_suffix"]), 16)
    assert got["content"] == "".join(e.text for e in _done(srv.session.generate(prompt, cfg)))
    other = infill(srv, {**body, "input_prefix": LIST["input_prefix"] + "zzz"})  # typed what was not suggested
    assert "prediction" not in {s.get("proposer") for s in other["localspec"]["provenance"]}


def _prefetch_done(srv, before: int, timeout: float = 120) -> dict:
    """Slot 0 of /slots once a prefetch begun after `before` tokens prefetched has ended
    (not merely "not prefetching": the guess starts a moment after the answer is sent)."""
    deadline = time.monotonic() + timeout
    while True:
        slot = httpx.get(f"{srv.url}/slots", timeout=10).json()[0]
        if (slot["n_prefetched"] > before and not slot["prefetching"]) or time.monotonic() > deadline:
            return slot
        time.sleep(0.02)


def _prefetch_state(srv, want: bool, timeout: float = 120) -> dict:
    """Slot 0 of /slots once its `prefetching` is `want`."""
    deadline = time.monotonic() + timeout
    while True:
        slot = httpx.get(f"{srv.url}/slots", timeout=10).json()[0]
        if slot["prefetching"] == want or time.monotonic() > deadline:
            return slot
        time.sleep(0.02)


def test_the_suggestions_first_word_typed_finds_its_prompt_evaluated(srv_prefetch) -> None:
    """While the editor is idle the server evaluates the request the user's typing the
    suggestion's first word would bring (server/fim_prefetch.py): when it comes, nothing of
    its prompt is left to evaluate, and the answer is the one a fresh evaluation gives."""
    body = {**BODY, "n_predict": 16, "id_slot": 3}
    start = _prefetch_state(srv_prefetch, False)["n_prefetched"]
    first = infill(srv_prefetch, body)["content"]
    guess = next_request(FimInput(BODY["input_prefix"], BODY["input_suffix"]), first)
    assert guess is not None, first
    assert _prefetch_done(srv_prefetch, start)["n_prefetched"] > start  # the suffix after the guessed word, at least
    mid = _prefetch_state(srv_prefetch, False)["n_prefetched"]
    got = infill(srv_prefetch, {**body, "input_prefix": guess.prefix})
    assert got["timings"]["prompt_n"] == 0 and got["timings"]["cache_n"] == got["tokens_evaluated"], got["timings"]
    cfg = server_cfg()
    cfg.n_predict = 16
    if next_request(guess, got["content"]) is not None:  # the guess this answer starts: the session is ours after it
        _prefetch_done(srv_prefetch, mid)
    srv_prefetch.session.reset()  # a fresh evaluation
    prompt = srv_prefetch.session.fim_prompt(guess, 16)
    assert got["content"] == "".join(e.text for e in _done(srv_prefetch.session.generate(prompt, cfg)))


def test_a_request_stops_the_prefetch_and_a_wrong_guess_changes_nothing(srv_prefetch) -> None:
    """A request that comes while a guess is evaluated stops it within a chunk, and when the
    user typed something else its prompt is evaluated as if there had been no guess."""
    big = [{"filename": f"mod{i}.py", "text": "".join(f"def f{i}_{j}(x):\n    return x * {j}\n" for j in range(60))}
           for i in range(3)]
    body = {**BODY, "input_suffix": BODY["input_suffix"] + big[0]["text"] * 2, "n_predict": 16, "id_slot": 4}
    first = infill(srv_prefetch, body)["content"]
    running = _prefetch_state(srv_prefetch, True)
    assert running["prefetching"], running
    # not what was suggested; one token asked: an answer with no word to guess from, no new prefetch
    other = {**body, "input_prefix": BODY["input_prefix"] + "        zzz = 0\n", "n_predict": 1}
    got = infill(srv_prefetch, other)
    slot = _prefetch_state(srv_prefetch, False)
    sess = srv_prefetch.session
    guess = sess.fim_prompt(next_request(FimInput(body["input_prefix"], body["input_suffix"]), first), 16)
    needed = len(guess) - 1 - common_prefix(sess.fim_prompt(FimInput(body["input_prefix"], body["input_suffix"]), 16), guess)
    assert 0 <= slot["n_prefetched"] - running["n_prefetched"] < needed  # stopped, not finished
    cfg = server_cfg()
    cfg.n_predict = 1
    prompt = sess.fim_prompt(FimInput(other["input_prefix"], other["input_suffix"]), 1)
    assert got["content"] == "".join(e.text for e in _done(srv_prefetch.session.generate(prompt, cfg)))


def test_with_two_slots_the_guessed_request_finds_its_prompt_evaluated(qwen_draft_path: Path) -> None:
    """`-np 2`: the guess runs on the slot that answered (between 32-token chunks: a pool
    slot's decodes join the others'), and the request it guessed is dispatched there."""
    from localspec.pool import Pool

    base = session(qwen_draft_path, n_ctx=8192, n_seq_max=16, threads=2)
    pool = Pool(base, 2)
    s = ServerThread(create_app(base, ServerConfig(model_id="qwen-0.5b",
                                                   limits=Limits(cfg=server_cfg(), n_ctx=4096, n_seq_max=8)), pool))
    try:
        body = {**BODY, "n_predict": 16}
        first = infill(s, body)["content"]
        guess = next_request(FimInput(BODY["input_prefix"], BODY["input_suffix"]), first)
        assert guess is not None, first
        slots = httpx.get(f"{s.url}/slots", timeout=10).json()
        deadline = time.monotonic() + 120
        while any(x["prefetching"] for x in slots) and time.monotonic() < deadline:
            time.sleep(0.02)
            slots = httpx.get(f"{s.url}/slots", timeout=10).json()
        assert sum(x["n_prefetched"] for x in slots) > 0, slots
        got = infill(s, {**body, "input_prefix": guess.prefix})
        assert got["timings"]["prompt_n"] == 0, got["timings"]
    finally:
        s.stop()


def test_the_openai_sdk_suffix_request_is_prefetched_too(srv_prefetch) -> None:
    """OpenAI's insert mode (/v1/completions with `suffix`) through the real `openai` client:
    the request the first word of its answer brings finds its prompt evaluated."""
    import openai

    client = openai.OpenAI(base_url=f"{srv_prefetch.url}/v1", api_key="none", max_retries=0)
    ask = {"model": "qwen-0.5b", "suffix": BODY["input_suffix"], "max_tokens": 16, "temperature": 0}
    start = _prefetch_state(srv_prefetch, False)["n_prefetched"]
    first = client.completions.create(prompt=BODY["input_prefix"], **ask).choices[0].text
    guess = next_request(FimInput(BODY["input_prefix"], BODY["input_suffix"]), first)
    assert guess is not None, first
    _prefetch_done(srv_prefetch, start)
    got = client.completions.create(prompt=guess.prefix, **ask)
    assert got.model_extra["timings"]["prompt_n"] == 0, got.model_extra["timings"]
