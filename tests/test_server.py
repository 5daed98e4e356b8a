"""`localspec serve` end to end: a real uvicorn server on a free 127.0.0.1 port, the SmolLM2
pair (target Q4_1, draft Q4_0: a draft that gets rejections), the official `openai` SDK as
the client, httpx for the error cases. Answers are short (a few dozen tokens) so the whole
file stays well under two minutes on one thread.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai
import pytest
import uvicorn

from localspec.config import GenConfig
from localspec.server.app import ServerConfig, create_app
from localspec.server.cli import bind, is_loopback, model_id
from localspec.server.schema import Limits
from tests.support.helpers import session

KEY = "test-key"
HAIKU = [{"role": "user", "content": "Write a haiku about the sea."}]
COUNT = "1, 2, 3, 4, 5,"  # a raw prompt SmolLM2 keeps counting on: it does not stop early
KINDS = {"draft", "correction", "bonus", "target"}


def server_cfg() -> GenConfig:
    """The server's defaults: lossless sd with a fixed L (no cost-model calibration in CI)."""
    return GenConfig(method="sd", K=1, L=4, n_predict=16)


class FlakySession:
    """The real session, but its next generate() can be told to fail (an engine failure)."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.fail_next = False  # fail before any event (-> HTTP 500)
        self.fail_mid = False  # fail after two events (-> an error event inside a 200 stream)

    def generate(self, *a, **kw):
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("simulated engine failure")
        events = self.inner.generate(*a, **kw)
        if self.fail_mid:
            self.fail_mid = False
            return self._broken(events)
        return events

    @staticmethod
    def _broken(events):
        try:
            for i, ev in enumerate(events):
                yield ev
                if i == 1:
                    raise RuntimeError("simulated failure mid-stream")
        finally:
            events.close()

    def __getattr__(self, name):
        return getattr(self.inner, name)


class ServerThread:
    """uvicorn.Server on its own thread, on a socket bound to a free port."""

    def __init__(self, app) -> None:
        self.app = app
        sock = bind("127.0.0.1", 0)
        self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on",
                                                    timeout_graceful_shutdown=2))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)

    @property
    def worker(self):
        return self.app.state.worker

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(15)
        assert not self.thread.is_alive()


@pytest.fixture(scope="module")
def pair(smollm2_path: Path, smollm2_q4_0_path: Path) -> tuple[Path, Path]:
    return smollm2_path, smollm2_q4_0_path


@pytest.fixture(scope="module")
def srv(pair):
    """The main server: API key on, queue 16, an engine that can be made to fail."""
    sess = FlakySession(session(*pair, n_ctx=2048, threads=1))
    config = ServerConfig(model_id="smollm2", draft="smollm2-q4_0", api_key=KEY, max_body=64 * 1024,
                          limits=Limits(cfg=server_cfg(), n_ctx=2048))
    s = ServerThread(create_app(sess, config))
    s.session = sess
    yield s
    s.stop()


@pytest.fixture(scope="module")
def small(pair):
    """A second server with a queue of one (its own session over the same loaded models)."""
    config = ServerConfig(model_id="smollm2", draft="smollm2-q4_0", max_queue=1,
                          limits=Limits(cfg=server_cfg(), n_ctx=2048))
    s = ServerThread(create_app(session(*pair, n_ctx=2048, threads=1), config))
    yield s
    s.stop()


def sdk_client(srv: ServerThread, api_key: str = "none", timeout: float = 120) -> openai.OpenAI:
    """The openai SDK pointed at a test server (no retries: a failure shows at once)."""
    return openai.OpenAI(base_url=srv.url + "/v1", api_key=api_key, max_retries=0, timeout=timeout)


@pytest.fixture(scope="module")
def client(srv) -> openai.OpenAI:
    return sdk_client(srv, KEY)


def extra(obj, name: str):
    """A non-OpenAI field of an SDK object (timings, localspec)."""
    return (obj.model_extra or {}).get(name)


def post(srv, path: str, body, *, key: str | None = KEY, **kw) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    if isinstance(body, (dict, list)):
        kw["json"] = body
    else:
        kw["content"] = body
        headers["Content-Type"] = "application/json"  # what every client sends (415 without it)
    return httpx.post(srv.url + path, headers=headers, timeout=120, **kw)


def error_of(r: httpx.Response) -> dict:
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    return body["error"]


# ------------------------------------------------------------------------------ basics
def test_models_health_and_auth(srv, client):
    ids = [m.id for m in client.models.list().data]
    assert ids == ["smollm2"]
    h = httpx.get(srv.url + "/health")  # open without a key, for load balancers
    assert h.status_code == 200 and h.json()["status"] == "ok"
    for key in (None, "wrong"):
        r = httpx.get(srv.url + "/v1/models", headers={"Authorization": f"Bearer {key}"} if key else {})
        assert r.status_code == 401 and error_of(r)["code"] == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=srv.url + "/v1", api_key="wrong", max_retries=0).chat.completions.create(
            model="smollm2", messages=HAIKU, max_tokens=4)


def test_chat_stream_equals_nonstream_and_run(srv, client, pair, capsys):
    kw = dict(model="smollm2", messages=HAIKU, max_tokens=24, temperature=0)
    r = client.chat.completions.create(**kw)
    text = r.choices[0].message.content
    assert text and r.choices[0].finish_reason in ("stop", "length")
    assert r.object == "chat.completion" and r.choices[0].message.role == "assistant"
    assert r.usage.completion_tokens == extra(r, "timings")["predicted_n"] > 0
    t, ls = extra(r, "timings"), extra(r, "localspec")
    assert 0 < t["draft_n_accepted"] <= t["draft_n"]
    assert ls["method"] == "sd" and ls["K"] == 1 and ls["L"] == 4
    assert sum(ls["accepted_histogram"]) == ls["verify_steps"] > 0
    assert ls["block_efficiency"] > 1.0  # accepted draft tokens: more than one token per target call

    chunks = list(client.chat.completions.create(**kw, stream=True, stream_options={"include_usage": True}))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == text
    assert chunks[0].choices[0].delta.role == "assistant"
    finish = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finish) == 1 and finish[0].choices[0].finish_reason == r.choices[0].finish_reason
    last = chunks[-1]  # the usage chunk: no choices, usage, and the extras
    assert last.choices == [] and last.usage.completion_tokens == r.usage.completion_tokens
    assert all(c.usage is None for c in chunks[:-1])
    assert extra(last, "timings")["predicted_n"] == r.usage.completion_tokens
    assert extra(last, "localspec")["method"] == "sd"

    from localspec.cli.main import main

    capsys.readouterr()
    rc = main(["run", "-m", str(pair[0]), "-md", str(pair[1]), "-c", "2048", "-t", "1", "--method", "sd",
               "-K", "1", "-L", "4", "-n", "24", "--temp", "0", "--json", "-p", HAIKU[0]["content"]])
    assert rc == 0
    run = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert run["text"] == text


def test_completions_stream_and_nonstream(client):
    kw = dict(model="smollm2", prompt=COUNT, max_tokens=12, temperature=0)
    r = client.completions.create(**kw)
    assert r.object == "text_completion" and r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 12 and "6" in r.choices[0].text
    chunks = list(client.completions.create(**kw, stream=True))
    assert "".join(c.choices[0].text for c in chunks) == r.choices[0].text
    assert chunks[-1].choices[0].finish_reason == "length"
    assert extra(chunks[-1], "timings")["predicted_n"] == 12  # no usage asked: extras on the finish chunk
    ids = client.completions.create(model="smollm2", prompt=[1, 2, 3], max_tokens=2)  # token ids
    assert ids.usage.prompt_tokens == 3


def test_provenance_reassembles_exactly(client):
    chunks = list(client.chat.completions.create(
        model="smollm2", messages=HAIKU, max_tokens=24, stream=True,
        extra_body={"localspec": {"provenance": True}}))
    text, kinds = "", set()
    for c in chunks:
        if not c.choices or c.choices[0].delta.content in (None, ""):
            continue
        segs = extra(c, "localspec")["provenance"]
        assert "".join(s["text"] for s in segs) == c.choices[0].delta.content
        assert all(s["kind"] in KINDS and s["tokens"] >= 0 for s in segs)
        kinds |= {s["kind"] for s in segs}
        text += c.choices[0].delta.content
    ref = client.chat.completions.create(model="smollm2", messages=HAIKU, max_tokens=24,
                                         extra_body={"localspec": {"provenance": True}})
    assert text == ref.choices[0].message.content
    whole = extra(ref, "localspec")["provenance"]
    assert "".join(s["text"] for s in whole) == text
    # the tokens usage counts: not the end-of-turn token (no text) that ends a haiku
    assert ref.choices[0].finish_reason == "stop" and extra(ref, "localspec")["stop_reason"] == "eog"
    assert sum(s["tokens"] for s in whole) == ref.usage.completion_tokens
    assert all(s["text"] or s["tokens"] for s in whole)
    assert "draft" in kinds and kinds & {"correction", "bonus"}  # sd: accepted drafts and target tokens
    # accepted draft text names its proposer (here the draft model); nothing else carries one
    assert {s.get("proposer") for s in whole if s["kind"] == "draft"} == {"draft"}
    assert all("proposer" not in s for s in whole if s["kind"] != "draft")


def test_stop_sequences(client):
    ref = client.completions.create(model="smollm2", prompt=COUNT, max_tokens=16).choices[0].text
    assert " 9," in ref
    cut = ref[: ref.index(" 9,")]
    r = client.completions.create(model="smollm2", prompt=COUNT, max_tokens=16, stop=[" 9,", "zzz"])
    assert r.choices[0].text == cut and r.choices[0].finish_reason == "stop"
    assert extra(r, "localspec")["stop_reason"] == "stop"
    chunks = list(client.completions.create(model="smollm2", prompt=COUNT, max_tokens=16, stop=" 9,", stream=True))
    assert "".join(c.choices[0].text for c in chunks) == cut


def test_second_turn_reuses_prefix(client):
    first = client.chat.completions.create(model="smollm2", messages=HAIKU, max_tokens=16)
    history = [*HAIKU, {"role": "assistant", "content": first.choices[0].message.content},
               {"role": "user", "content": "Now one about mountains."}]
    second = client.chat.completions.create(model="smollm2", messages=history, max_tokens=8)
    t1, t2 = extra(first, "timings"), extra(second, "timings")
    # the whole first turn (its prompt and answer) came from the KV cache: only the suffix ran
    assert t2["cache_n"] >= first.usage.prompt_tokens
    assert t2["prompt_n"] + t2["cache_n"] == second.usage.prompt_tokens
    assert t2["prompt_n"] < second.usage.prompt_tokens - first.usage.prompt_tokens
    assert second.usage.prompt_tokens_details.cached_tokens == t2["cache_n"]
    print(f"turn 1: {t1['prompt_n']} prompt tokens in {t1['prompt_ms']:.0f} ms; "
          f"turn 2: {t2['prompt_n']} evaluated of {second.usage.prompt_tokens} in {t2['prompt_ms']:.0f} ms")


def test_per_request_speculative_settings(client):
    ar = client.completions.create(model="smollm2", prompt=COUNT, max_tokens=8,
                                   extra_body={"speculative": {"method": "ar"}})
    assert extra(ar, "localspec")["method"] == "ar" and extra(ar, "timings")["draft_n"] == 0
    sd = client.completions.create(model="smollm2", prompt=COUNT, max_tokens=8,
                                   extra_body={"speculative": {"n_max": 2, "n_min": 1, "p_min": 0.5}})
    ls = extra(sd, "localspec")
    assert ls["L"] == 2 and len(ls["accepted_histogram"]) <= 3  # taus 0..2
    assert ls["ignored"] == ["speculative.n_min"]
    assert sd.choices[0].text == ar.choices[0].text  # lossless at T=0: the same answer either way


# ------------------------------------------------------------------------------ concurrency
def test_concurrent_clients_in_order_none_lost(srv, client):
    prompts = [f"{i}, {i + 1}, {i + 2}," for i in (10, 20, 30, 40)]
    want = {p: client.completions.create(model="smollm2", prompt=p, max_tokens=4).choices[0].text for p in prompts}
    before = len(srv.worker.served)

    def one_client(p: str) -> list[str]:
        return [client.completions.create(model="smollm2", prompt=p, max_tokens=4).choices[0].text
                for _ in range(5)]

    with ThreadPoolExecutor(4) as pool:
        results = dict(zip(prompts, pool.map(one_client, prompts), strict=True))
    for p in prompts:
        assert results[p] == [want[p]] * 5
    served = list(srv.worker.served)[before:]
    assert len(served) == 20 and all(s.reason == "max_tokens" for s in served)
    ids = [s.job_id for s in served]
    assert ids == sorted(ids)  # served in arrival (submission) order


def test_cancelled_stream_stops_and_queue_full(small):
    c = openai.OpenAI(base_url=small.url + "/v1", api_key="none", max_retries=0, timeout=120)
    stream = c.completions.create(model="smollm2", prompt=COUNT, max_tokens=1500, stream=True)
    next(iter(stream))  # it is running
    waiting: dict = {}

    def queued() -> None:
        waiting["r"] = c.completions.create(model="smollm2", prompt="a, b, c,", max_tokens=4)

    th = threading.Thread(target=queued)
    th.start()
    deadline = time.monotonic() + 10
    while small.worker.queued < 1:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    r = httpx.post(small.url + "/v1/completions", json={"prompt": "x", "max_tokens": 1}, timeout=30)
    assert r.status_code == 429 and int(r.headers["Retry-After"]) >= 1
    assert error_of(r)["type"] == "rate_limit_error"
    stream.close()  # the client goes away mid-stream
    th.join(60)
    assert waiting["r"].choices[0].text  # the next request was served
    cancelled = [s for s in small.worker.served if s.cancelled]
    assert cancelled and cancelled[-1].reason == "interrupted" and cancelled[-1].n_tokens < 1500

    # a non-streaming client that gives up (read timeout) stops its generation too
    n = len(small.worker.served)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(small.url + "/v1/completions", json={"prompt": COUNT, "max_tokens": 1500}, timeout=1.5)
    deadline = time.monotonic() + 15
    while len(small.worker.served) == n:
        assert time.monotonic() < deadline, "the abandoned request kept running"
        time.sleep(0.05)
    last = small.worker.served[-1]
    assert last.cancelled and last.reason == "interrupted" and last.n_tokens < 1500


# ------------------------------------------------------------------------------ errors
CHAT = "/v1/chat/completions"


@pytest.mark.parametrize("body, status, param, code", [
    ("{not json", 400, None, "invalid_json"),
    ("[1, 2]", 400, None, "invalid_body"),
    ('{"messages": [{"role": "user", "content": "hi"}], "temperature": NaN}', 400, None, "invalid_json"),
    ({"max_tokens": 4}, 400, "messages", "missing_required_parameter"),
    ({"messages": "hi"}, 400, "messages", "invalid_type"),
    ({"messages": [{"role": "user", "content": "hi"}], "max_tokens": "ten"}, 400, "max_tokens", "invalid_type"),
    ({"messages": [{"role": "user", "content": "hi"}], "temperature": -1}, 400, "temperature", "invalid_value"),
    ({"messages": [{"role": "user", "content": "hi"}], "n": 2}, 400, "n", "unsupported_parameter"),
    ({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]}, 400, "tools[0].function",
     "missing_required_parameter"),
    ({"messages": [{"role": "user", "content": "hi"}], "grammar": "root ::= foo"}, 400, "grammar", "invalid_grammar"),
    ({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema"}}, 400,
     "response_format.json_schema", "missing_required_parameter"),
    ({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "xml"}}, 400,
     "response_format.type", "invalid_value"),
    ({"messages": [{"role": "user", "content": "hi"}], "json_schema": {"type": "object"}, "grammar": "root ::= \"a\""},
     400, "json_schema", "invalid_value"),
    ({"messages": [{"role": "user", "content": "hi"}], "echo": True}, 400, "echo", "unsupported_parameter"),
    ({"messages": [{"role": "user", "content": "hi"}], "frequency_penalty": 0.5}, 400, "frequency_penalty",
     "unsupported_parameter"),
    ({"messages": [{"role": "user", "content": "hi"}], "wat": 1}, 400, "wat", "unknown_parameter"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, 400,
     "messages[0].content[0].type", "unsupported_parameter"),
    ({"messages": [{"role": "user", "content": "hi"}], "speculative": {"method": "nope"}}, 400,
     "speculative.method", "invalid_value"),
    ({"messages": [{"role": "user", "content": "hi"}], "speculative": {"K": 4, "L": 200}}, 400,
     "speculative", "invalid_value"),
])
def test_bad_requests(srv, body, status, param, code):
    r = post(srv, CHAT, body)
    assert r.status_code == status, r.text
    err = error_of(r)
    assert err["param"] == param and err["code"] == code and err["type"] == "invalid_request_error"


def test_real_frontend_shapes_are_accepted(srv):
    # what Continue / Open WebUI / the SDK send beyond the basics: neutral values, parts, extras
    body = {"model": "anything", "messages": [
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Write a haiku "}, {"type": "text", "text": "about the sea."}]}],
        "max_tokens": 6, "temperature": 0.0, "top_p": 1.0, "frequency_penalty": 0, "presence_penalty": 0.0,
        "n": 1, "user": "u1", "metadata": {"chat_id": "42"}, "stream": False, "logit_bias": {},
        "tool_choice": "none", "cache_prompt": True, "repeat_penalty": 1.0, "top_k": 40, "min_p": 0.05,
        "seed": 7, "chat_template_kwargs": {"enable_thinking": False}}
    r = post(srv, CHAT, body)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"]
    # a trailing assistant message is a prefill (llama-server's rule): the answer continues it
    plain = post(srv, CHAT, {"messages": HAIKU, "max_tokens": 4}).json()
    pre = post(srv, CHAT, {"messages": [*HAIKU, {"role": "assistant", "content": "Waves"}], "max_tokens": 4}).json()
    assert pre["usage"]["prompt_tokens"] > plain["usage"]["prompt_tokens"]
    assert pre["choices"][0]["message"]["content"] != plain["choices"][0]["message"]["content"]


def test_context_too_long_body_too_large_and_404(srv):
    long = {"messages": [{"role": "user", "content": "hello " * 2500}], "max_tokens": 2}
    r = post(srv, CHAT, long)
    assert r.status_code == 400 and error_of(r)["code"] == "context_length_exceeded"
    r = post(srv, "/v1/completions", {"prompt": "hello " * 2500, "max_tokens": 2, "stream": True})
    assert r.status_code == 400 and error_of(r)["param"] == "prompt"  # streaming too: before any chunk
    r = post(srv, CHAT, json.dumps({"messages": [{"role": "user", "content": "x" * 70_000}]}))
    assert r.status_code == 413 and error_of(r)["code"] == "request_too_large"
    r = post(srv, "/v1/nothing", {})
    assert r.status_code == 404 and error_of(r)["code"] == "not_found"


def test_engine_failure_is_500_and_server_keeps_serving(srv, client):
    srv.session.fail_next = True
    with pytest.raises(openai.InternalServerError) as e:
        client.chat.completions.create(model="smollm2", messages=HAIKU, max_tokens=4)
    assert "simulated engine failure" in str(e.value)
    r = client.chat.completions.create(model="smollm2", messages=HAIKU, max_tokens=4)
    assert r.choices[0].message.content
    srv.session.fail_mid = True
    with pytest.raises(openai.APIError, match="simulated failure mid-stream"):
        for _ in client.chat.completions.create(model="smollm2", messages=HAIKU, max_tokens=16, stream=True):
            pass
    r = client.chat.completions.create(model="smollm2", messages=HAIKU, max_tokens=4)
    assert r.choices[0].message.content


# ------------------------------------------------------------------------------ the command
def test_host_helpers():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.5")
    assert model_id("/models/SmolLM2-135M.Q4_1.gguf") == "SmolLM2-135M.Q4_1"
    assert model_id("qwen2.5-coder-1.5b") == "qwen2.5-coder-1.5b"


def test_serve_command_warns_serves_and_stops_on_sigterm(pair):
    cmd = [sys.executable, "-m", "localspec.cli", "serve", "-m", str(pair[0]), "-md", str(pair[1]),
           "--host", "0.0.0.0", "--port", "0", "-c", "512", "-t", "1", "--method", "sd", "-L", "4",
           "-n", "4", "--log-level", "warning"]
    env = {k: v for k, v in os.environ.items() if k != "LOCALSPEC_API_KEY"}
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env, cwd=Path(__file__).parents[1])
    lines = []
    try:
        while True:
            line = p.stderr.readline()
            assert line, "serve exited early:\n" + "".join(lines)
            lines.append(line)
            if line.startswith("localspec serve: http://"):
                break
        assert any("warning: serving on 0.0.0.0 without --api-key" in x for x in lines)
        port = int(line.split("://")[1].split("/")[0].rsplit(":", 1)[1])
        r = httpx.post(f"http://127.0.0.1:{port}/v1/completions", json={"prompt": COUNT}, timeout=60)
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 4
        p.send_signal(signal.SIGTERM)
        rest = p.communicate(timeout=30)[1]
        assert p.returncode == 0, rest
        assert "localspec serve: stopped" in rest
    finally:
        if p.poll() is None:
            p.kill()


def test_bench_client_reads_our_stream(small):
    from localspec.bench.serve import Result, stream_chat, summary

    s = stream_chat(small.port, HAIKU[0]["content"], 6)
    assert 1 <= s.tokens <= 6 and 0 < s.ttft <= s.latency
    row = summary(Result("localspec", samples=[s], wall=s.latency))
    assert row["requests"] == 1 and row["ttft_p50_ms"] == s.ttft * 1e3


@pytest.mark.slow  # > 7 s on 2 cores: the long tier (README's command stays short)
def test_serve_answers_503_loading_with_progress_until_ready(pair, tmp_path):
    """From the moment the port is bound, a client gets an answer: llama-server's 503
    "Loading model" JSON with localspec's progress (loading, then the -np start-up timing,
    here with nothing cached), for /health and for a chat request alike; then 200s."""
    cmd = [sys.executable, "-m", "localspec.cli", "serve", "-m", str(pair[0]), "-md", str(pair[1]),
           "--port", "0", "-c", "1024", "-t", "1", "-np", "2", "-n", "4", "--log-level", "warning"]
    env = {k: v for k, v in os.environ.items() if k != "LOCALSPEC_API_KEY"} | {"LOCALSPEC_HOME": str(tmp_path)}
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env, cwd=Path(__file__).parents[1])
    try:
        line = p.stderr.readline()
        assert line.startswith("localspec serve: loading on http://"), line
        port = int(line.split("://")[1].split(" ")[0].rsplit(":", 1)[1])
        seen: list[tuple[int, dict]] = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            r = httpx.get(f"http://127.0.0.1:{port}/health", timeout=10)
            seen.append((r.status_code, r.json()))
            if r.status_code == 200:
                break
            if len(seen) == 1:  # a request while loading: the same 503, OpenAI-shaped
                c = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", timeout=10,
                               json={"messages": [{"role": "user", "content": "hi"}]})
                assert c.status_code == 503 and c.json()["error"]["message"] == "Loading model"
            time.sleep(0.05)
        codes = [c for c, _ in seen]
        assert codes[-1] == 200 and set(codes) <= {200, 503} and 503 in codes, codes
        loading = [b for c, b in seen if c == 503]
        assert all(b["error"]["type"] == "unavailable_error" and b["status"] == "loading" for b in loading)
        steps = [b["localspec"]["loading"]["step"] for b in loading]
        assert all(isinstance(s, str) and s for s in steps)
        r = httpx.post(f"http://127.0.0.1:{port}/v1/completions", json={"prompt": COUNT}, timeout=60)
        assert r.status_code == 200
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            p.communicate(timeout=30)
        finally:
            if p.poll() is None:
                p.kill()


def test_structured_output_through_the_openai_sdk(client):
    """response_format json_schema (strict) and json_object through the real SDK, and
    llama-server's grammar field: the answers parse and hold the schema under the server's
    speculative default (sd with the draft model)."""
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 16},
                                               "population": {"type": "integer"}},
              "required": ["city", "population"], "additionalProperties": False}
    r = client.chat.completions.create(
        model="smollm2", max_tokens=48, temperature=0,
        messages=[{"role": "user", "content": "Name a city and its population as JSON."}],
        response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": schema, "strict": True}})
    obj = json.loads(r.choices[0].message.content)
    assert set(obj) == {"city", "population"} and isinstance(obj["population"], int)
    r = client.chat.completions.create(model="smollm2", max_tokens=48, temperature=0, messages=HAIKU,
                                       response_format={"type": "json_object"})
    assert r.choices[0].finish_reason == "length" or isinstance(json.loads(r.choices[0].message.content), dict)
    chunks = list(client.chat.completions.create(model="smollm2", max_tokens=12, temperature=0, messages=HAIKU,
                                                 stream=True, extra_body={"grammar": 'root ::= ("yes" | "no") "."'}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text in ("yes.", "no.")
