"""`serve -np N`: N slots decode at once, their decodes joined; each slot is cancellable alone.

A real uvicorn server over a localspec.pool.Pool of two slots on the SmolLM2 pair (speculative
`sd`, so both the target's verifications and the draft's steps are joined).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from localspec.config import GenConfig, SamplingConfig
from localspec.pool import Pool
from localspec.server.app import ServerConfig, create_app
from localspec.server.schema import Limits
from tests.support.helpers import session
from tests.test_server import ServerThread

COUNT = "1, 2, 3, 4, 5,"


@pytest.fixture(scope="module")
def slots_srv(smollm2_path: Path, smollm2_q4_0_path: Path):
    base = session(smollm2_path, smollm2_q4_0_path, n_ctx=4096, n_seq_max=16)
    pool = Pool(base, 2)
    cfg = GenConfig(method="sd", L=4, n_predict=24, sampling=SamplingConfig(temp=0.0))
    config = ServerConfig(model_id="smollm2", limits=Limits(cfg=cfg, n_ctx=2048, n_batch=256, n_seq_max=8))
    s = ServerThread(create_app(base, config, pool))
    s.pool = pool
    yield s
    s.stop()


def test_two_slots_run_at_once_with_joined_decodes(slots_srv):
    seen_both = threading.Event()
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            r = httpx.get(slots_srv.url + "/slots", timeout=10).json()
            if sum(s["is_processing"] for s in r) == 2:
                seen_both.set()
            time.sleep(0.01)

    def ask(i: int) -> dict:
        r = httpx.post(slots_srv.url + "/v1/completions", timeout=120,
                       json={"prompt": f"{COUNT} {i}", "max_tokens": 24, "temperature": 0})
        assert r.status_code == 200, r.text
        return r.json()

    w = threading.Thread(target=watch)
    w.start()
    decodes0 = slots_srv.pool.rounds.decodes
    try:
        with ThreadPoolExecutor(4) as ex:
            answers = list(ex.map(ask, range(6)))
    finally:
        stop.set()
        w.join(10)
    assert all(a["usage"]["completion_tokens"] >= 1 for a in answers)
    assert seen_both.is_set()  # two requests were being decoded at the same moment
    made = sum(s.target.ctx.n_decodes + s.draft.ctx.n_decodes for s in slots_srv.pool.slots)
    assert slots_srv.pool.rounds.decodes - decodes0 < made  # rounds joined the slots' decodes
    health = httpx.get(slots_srv.url + "/health", timeout=10).json()
    assert [s["id"] for s in health["slots"]] == [0, 1] and not health["busy"]


def test_a_dropped_stream_frees_its_slot_and_the_other_finishes(slots_srv):
    long = {"prompt": COUNT, "max_tokens": 2000, "temperature": 0, "stream": True}
    other: dict = {}

    def finish() -> None:
        r = httpx.post(slots_srv.url + "/v1/completions", timeout=120,
                       json={"prompt": COUNT, "max_tokens": 16, "temperature": 0})
        other["r"] = r

    before = len(slots_srv.worker.served)
    with httpx.Client(timeout=60) as c, c.stream("POST", slots_srv.url + "/v1/completions", json=long) as r:
        t = threading.Thread(target=finish)
        t.start()
        for i, _ in enumerate(r.iter_lines()):
            if i > 3:
                break  # the client goes away mid-stream
    t.join(120)
    assert other["r"].status_code == 200 and other["r"].json()["usage"]["completion_tokens"] == 16
    deadline = time.monotonic() + 30
    while slots_srv.worker.busy and time.monotonic() < deadline:
        time.sleep(0.05)
    served = list(slots_srv.worker.served)[before:]
    dropped = [s for s in served if s.cancelled]
    assert dropped and dropped[0].n_tokens < 2000  # stopped early, not run to its end
    assert slots_srv.pool.rounds.n_active == 0


def test_np_out_of_range_is_one_line_exit_2():
    r = subprocess.run([sys.executable, "-m", "localspec.cli", "serve", "-np", "0", "-m", "x.gguf"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "-np/--parallel must be in 1..16" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_a_follow_up_goes_to_the_slot_that_holds_its_conversation(slots_srv):
    """Sequential chats A, B, then B's second turn: B2 lands on B1's slot (llama-server's slot
    similarity; the least recently used slot would be A's), so the KV cache there serves its
    history: all of B1's prompt is cached."""
    def chat(messages: list[dict]) -> dict:
        r = httpx.post(slots_srv.url + "/v1/chat/completions", timeout=120,
                       json={"messages": messages, "max_tokens": 8, "temperature": 0})
        assert r.status_code == 200, r.text
        return r.json()

    chat([{"role": "user", "content": "Write a short poem about the moon and the tide at night."}])
    a1 = [{"role": "user", "content": "Name three rivers in Europe, one per line, with their lengths."}]
    ra = chat(a1)
    a2 = [*a1, {"role": "assistant", "content": ra["choices"][0]["message"]["content"]},
          {"role": "user", "content": "And in Asia?"}]
    r2 = chat(a2)
    cached = r2["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached >= ra["usage"]["prompt_tokens"] - 1, (cached, ra["usage"])


def test_each_slot_decodes_under_its_own_request_grammar(slots_srv):
    """-np 2: concurrent requests with different grammars and none: each slot's turn has its
    own matcher, so each answer holds its own grammar (and the free one is free)."""
    import re

    grammars = {"digits": ('root ::= [0-9]{4,8} "."', r"[0-9]{4,8}\."),
                "words": ('root ::= ("red" | "green" | "blue") (" " ("red" | "green" | "blue")){2,5}',
                          r"(red|green|blue)( (red|green|blue)){2,5}")}

    def ask(i: int) -> tuple[str | None, str]:
        name = ("digits", "words", None)[i % 3]
        body = {"prompt": f"{COUNT} {i}", "max_tokens": 40, "temperature": 0}
        if name:
            body["grammar"] = grammars[name][0]
        r = httpx.post(slots_srv.url + "/v1/completions", timeout=120, json=body)
        assert r.status_code == 200, r.text
        return name, r.json()["choices"][0]["text"]

    with ThreadPoolExecutor(3) as ex:
        answers = list(ex.map(ask, range(6)))
    for name, text in answers:
        if name:
            assert re.fullmatch(grammars[name][1], text), (name, text)
    assert any(not re.fullmatch(r"[0-9.]*", t) for n, t in answers if n is None)


def test_slots_return_each_requests_logprobs(slots_srv):
    """-np 2: concurrent requests, some scoring their prompt (echo + max_tokens 0), some
    asking for the answer's log-probabilities: each gets entries for its own tokens (rows of
    a joined decode are sliced per slot)."""

    def ask(i: int) -> tuple[int, dict]:
        body = {"prompt": f"{COUNT} {i}", "temperature": 0, "logprobs": 2}
        body.update({"max_tokens": 0, "echo": True} if i % 2 else {"max_tokens": 12})
        r = httpx.post(slots_srv.url + "/v1/completions", timeout=120, json=body)
        assert r.status_code == 200, r.text
        return i, r.json()

    with ThreadPoolExecutor(4) as ex:
        answers = list(ex.map(ask, range(6)))
    for i, a in answers:
        ch = a["choices"][0]
        lp = ch["logprobs"]
        assert "".join(lp["tokens"]) == ch["text"]
        if i % 2:
            assert ch["text"] == f"{COUNT} {i}" and len(lp["tokens"]) == a["usage"]["prompt_tokens"]
            assert lp["token_logprobs"][0] is None and all(p <= 0 for p in lp["token_logprobs"][1:])
        else:
            assert len(lp["tokens"]) == a["usage"]["completion_tokens"] > 0
            assert all(max(top.values()) == p for p, top in zip(lp["token_logprobs"], lp["top_logprobs"],
                                                                 strict=True))  # greedy
