"""Malformed bodies against the real server: every one is a 4xx in OpenAI's shape, never a 500.

A seeded generator (reproducible: a failure prints the body) mutates valid chat and
completion bodies (wrong types, huge and negative integers, NaN / 1e999, lone surrogates,
deep nesting, truncated JSON, flipped bytes, other encodings, wrong Content-Types) and
throws ~2,500 of them at a uvicorn server on the SmolLM2 pair. Generations are capped at
two tokens (the harness lowers any valid token budget it produced) so the file runs in
well under a minute. After the barrage: nothing was logged at ERROR or with a traceback,
and the server still answers /health and a valid request.

Hand-written shapes beside the barrage (issue 43): chat_template_kwargs that collide with
what the renderer passes itself (400 naming the key, never a 500), special-token floods
and huge message counts (refused on arrival, before any tokenizing: they used to hold a
slot for minutes), and a client that leaves before the first byte of its answer (its slot
serves the next request at once, and the abandoned one generates nothing).
"""

from __future__ import annotations

import copy
import json
import logging
import random
import re
import socket
import threading
import time

import httpx
import pytest

from localspec.config import GenConfig
from localspec.server.anthropic_in import FIELDS as ANTHROPIC_FIELDS
from localspec.server.app import ServerConfig, create_app
from localspec.server.body import MAX_DEPTH, loads, nesting_depth
from localspec.server.bounds import BYTES_PER_TOKEN
from localspec.server.errors import ApiError
from localspec.server.fields import HARMLESS, NEUTRAL
from localspec.server.responses_in import FIELDS as RESPONSES_FIELDS
from localspec.server.schema import CHAT_FIELDS, COMPLETION_FIELDS, Limits
from localspec.server.thinking import RESERVED_TEMPLATE_NAMES
from tests.support.helpers import session
from tests.test_server import ServerThread, error_of

SEED = 24
N_BODIES = 3000
COUNT_FIELDS = ("max_tokens", "max_completion_tokens", "n_predict", "max_output_tokens")
FIELDS = sorted(CHAT_FIELDS | COMPLETION_FIELDS | HARMLESS | set(NEUTRAL))
API_FIELDS = sorted(ANTHROPIC_FIELDS | RESPONSES_FIELDS | HARMLESS)
CHAT_BASE = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
             "max_tokens": 1, "temperature": 0.5, "top_k": 40, "top_p": 0.9, "seed": 3, "stop": ["\n\n"],
             "speculative": {"method": "sd", "K": 1, "L": 2}, "stream_options": {"include_usage": True},
             "localspec": {"provenance": True}, "logprobs": True, "top_logprobs": 2}
COMPLETION_BASE = {"prompt": "1, 2, 3,", "max_tokens": 2, "min_p": 0.05, "n_predict": 2,
                   "speculative.n_max": 2, "seed": -1, "logprobs": 3, "echo": True}
# the Messages and Responses bodies: text ones (SmolLM2 answers them) and ones with tools and
# a tool round trip (its template renders no tools: a 400 once the fields parse)
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
MESSAGES_BASE = {"model": "x", "max_tokens": 2, "system": [{"type": "text", "text": "Be brief."}],
                 "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]},
                              {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "bye"}],
                 "stop_sequences": ["\n\n"], "temperature": 0.5, "top_k": 40,
                 "thinking": {"type": "enabled", "budget_tokens": 4}, "metadata": {"user_id": "u"},
                 "localspec": {"provenance": True}}
MESSAGES_TOOLS = {**MESSAGES_BASE, "tools": [{"name": "weather", "description": "of a city", "input_schema": SCHEMA}],
                  "tool_choice": {"type": "auto"},
                  "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": [
                      {"type": "tool_use", "id": "t1", "name": "weather", "input": {"city": "Oslo"}}]},
                               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                                             "content": [{"type": "text", "text": "cold"}]}]}]}
RESPONSES_BASE = {"model": "x", "instructions": "Be brief.", "max_output_tokens": 2, "temperature": 0.5,
                  "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
                            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hey"}]},
                            {"role": "user", "content": "bye"}],
                  "text": {"format": {"type": "text"}}, "store": False, "reasoning": {"effort": "low"}}
RESPONSES_TOOLS = {**RESPONSES_BASE, "tools": [{"type": "function", "name": "weather", "parameters": SCHEMA}],
                   "tool_choice": "auto",
                   "input": [{"role": "user", "content": "hi"}, {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": "{}"},
                             {"type": "function_call_output", "call_id": "c1", "output": "cold"}]}
CHAT_ROUTES = [("/v1/chat/completions", CHAT_BASE), ("/v1/completions", COMPLETION_BASE)]
API_ROUTES = [("/v1/messages", MESSAGES_BASE), ("/v1/responses", RESPONSES_BASE), ("/v1/messages", MESSAGES_TOOLS),
              ("/v1/responses", RESPONSES_TOOLS), ("/v1/messages/count_tokens", MESSAGES_BASE)]
EVIL = [2**31, 2**31 - 1, -(2**31) - 1, 2**63, 2**64, -(2**64), 10**30, 10**400, -1, 0, 1, 1.5, -0.0,
        1e308, -1e308, 5e-324, True, False, None, "", "\ud800", "a\udfffb", "\x00", "x" * 3000,
        "\U0001f600", [], {}, [None], [[[]]], {"": None}, [2**31], [-5], [49152], [1, "a"], ["\ud83d"],
        {"type": "text", "text": 1}, [{"role": "user", "content": "\ud800"}], [{"role": 1}]]
TEXT_NUMBERS = ["1e999", "-1e999", "NaN", "Infinity", "-Infinity", "9" * 5000, "1" * 30, "-0", "1E400",
                "0x10", "01", "1.", ".5", "+1"]
_NUMBER = re.compile(r"(?<=: )-?\d[\d.eE+-]*")  # a number value in json.dumps' output
CONTENT_TYPES = ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data", "", "text/json",
                 "application/jsonx", "text/plain; charset=utf-8", "application/json; charset=utf-16",
                 "APPLICATION/JSON"]  # the last two are JSON


@pytest.fixture(scope="module")
def fuzz_srv(smollm2_path, smollm2_q4_0_path):
    cfg = GenConfig(method="sd", K=1, L=2, n_predict=2)
    config = ServerConfig(model_id="smollm2", draft="smollm2-q4_0",
                          limits=Limits(cfg=cfg, n_ctx=512, n_seq_max=4))
    s = ServerThread(create_app(session(smollm2_path, smollm2_q4_0_path, n_ctx=512, n_seq_max=4, threads=1),
                                config))
    yield s
    s.stop()


class Records(logging.Handler):
    """Every ERROR record and every record with a traceback, from the loggers that report
    (the server's own and uvicorn's "Exception in ASGI application"). A handler of our own,
    not capfd: uvicorn's handlers hold the stderr of the moment they were configured."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.bad: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.ERROR or record.exc_info:
            self.bad.append(f"{record.name}: {record.getMessage()}")


@pytest.fixture
def records():
    rec = Records()
    loggers = [logging.getLogger(n) for n in ("localspec", "uvicorn", "uvicorn.error", "starlette")]
    for lg in loggers:
        lg.addHandler(rec)
    yield rec
    time.sleep(0.2)  # what the server logs about the last request is written by now
    for lg in loggers:
        lg.removeHandler(rec)
    assert not rec.bad, rec.bad[:5]


# ------------------------------------------------------------------------------ the generator
def _paths(obj, prefix=()):
    """Every (container, key) pair of a JSON tree: where a value can be replaced."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield obj, k
            yield from _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield obj, i
            yield from _paths(v, (*prefix, i))


def _deep(rng: random.Random) -> object:
    n = rng.choice([MAX_DEPTH - 2, MAX_DEPTH + 1, 200])
    value: object = 1
    for _ in range(n):
        value = [value] if rng.random() < 0.5 else {"k": value}
    return value


def _evil(rng: random.Random) -> object:
    return copy.deepcopy(rng.choice(EVIL))  # a copy: later mutations must not edit the list


def _mutate_tree(rng: random.Random, body: dict, fields: list[str]) -> dict:
    for _ in range(rng.randint(2, 4)):  # enough that few survive: each survivor costs a generation
        op = rng.random()
        places = list(_paths(body))
        if op < 0.5 and places:
            container, key = rng.choice(places)
            container[key] = _deep(rng) if rng.random() < 0.05 else _evil(rng)
        elif op < 0.75:
            body[rng.choice(fields)] = _evil(rng)
        elif op < 0.9 and places:
            container, key = rng.choice(places)
            del container[key]
        else:
            body["stream"] = rng.choice([True, False, "yes", 1])
    for f in COUNT_FIELDS:  # a valid budget stays tiny (the point is the input, not generation)
        v = body.get(f)
        if isinstance(v, int | float) and not isinstance(v, bool) and (v == -1 or 2 < v <= 2**31 - 1):
            body[f] = 2
    return body


def _mutate_text(rng: random.Random, text: str) -> bytes:
    op = rng.random()
    if op < 0.2:
        return text[: rng.randrange(len(text))].encode()
    if op < 0.4:
        data = bytearray(text.encode())
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        return bytes(data)
    if op < 0.6:  # a number value written as JSON (or Python) never should
        spots = list(_NUMBER.finditer(text))
        m = rng.choice(spots)
        return (text[: m.start()] + rng.choice(TEXT_NUMBERS) + text[m.end():]).encode()
    if op < 0.7:
        n = rng.choice([MAX_DEPTH, MAX_DEPTH + 1, 1000, 100_000])
        return text.replace('"hi"', "[" * n + "]" * n, 1).replace('"1, 2, 3,"', "{" * 3 + "}" * 3, 1).encode()
    if op < 0.8:
        return rng.choice([b"", b"null", b"[]", b'"s"', b"{}", b"\xef\xbb\xbf" + text.encode(),
                           text.encode("utf-16"), text.encode("utf-32"), bytes(rng.randrange(256) for _ in range(64)),
                           text.encode() + b" garbage", text.encode() * 2, b'{"a":' * 30])
    if op < 0.9:  # a duplicate key: the last one counts
        return (text[:-1] + f', "max_tokens": {rng.choice(["2147483648", "-2", "0", "1"])}}}').encode()
    return text.replace('"', "'").encode()


def bodies(seed: int, n: int, routes: list[tuple[str, dict]] = CHAT_ROUTES, fields: list[str] = FIELDS):
    """(path, content-type, body bytes, description) for n requests."""
    rng = random.Random(seed)
    for i in range(n):
        path, base = rng.choice(routes)
        base = json.loads(json.dumps(base))
        if rng.random() < 0.1:
            path = path.removeprefix("/v1")
        ctype = "application/json"
        kind = rng.random()
        if kind < 0.6:
            text = json.dumps(_mutate_tree(rng, base, fields), allow_nan=True)
            data = text.encode("utf-8", "surrogatepass")
        elif kind < 0.9:
            data = _mutate_text(rng, json.dumps(base))
        else:
            data = json.dumps(base).encode()
            ctype = rng.choice(CONTENT_TYPES)
        yield path, ctype, data, f"#{i} {path} {ctype!r} {data[:300]!r}"


# ------------------------------------------------------------------------------ the tests
@pytest.mark.slow  # ~20 s of 3,000 bodies: the long tier (CI runs it); the hand-written cases stay fast
def test_fuzzed_bodies_never_500(fuzz_srv, records):
    statuses: dict[int, int] = {}
    with httpx.Client(base_url=fuzz_srv.url, timeout=60) as c:
        for path, ctype, data, what in bodies(SEED, N_BODIES):
            headers = {"Content-Type": ctype} if ctype else {}
            r = c.post(path, content=data, headers=headers)
            statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
            assert r.status_code in (200, 400, 413, 415), f"{r.status_code} {r.text[:300]} for {what}"
            if r.status_code == 200:
                if r.headers["content-type"].startswith("text/event-stream"):
                    assert r.text.rstrip().endswith("data: [DONE]"), what
                else:
                    assert r.json()["choices"], what
            else:
                err = error_of(r)
                assert err["message"] and err["type"] == "invalid_request_error", what
            assert not records.bad, f"{records.bad[:3]} after {what}"
    print("statuses", dict(sorted(statuses.items())))
    assert statuses.get(200, 0) >= 50 and statuses.get(400, 0) >= 1000  # both sides were exercised
    assert statuses.get(415, 0) >= 50
    assert httpx.get(fuzz_srv.url + "/health").json()["status"] == "ok"
    r = httpx.post(fuzz_srv.url + "/v1/completions", json={"prompt": "1, 2, 3,", "max_tokens": 2}, timeout=60)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 2


@pytest.mark.parametrize("n", [200, pytest.param(1500, marks=pytest.mark.slow)])
def test_fuzzed_messages_and_responses_bodies_never_500(fuzz_srv, records, n):
    """The Anthropic and Responses routes: a 4xx in each API's own error shape, or an answer
    in its shape (a stream that ends with its closing event); never a 500 or a traceback."""
    statuses: dict[int, int] = {}
    with httpx.Client(base_url=fuzz_srv.url, timeout=60) as c:
        for path, ctype, data, what in bodies(SEED + 1, n, API_ROUTES, API_FIELDS):
            r = c.post(path, content=data, headers={"Content-Type": ctype} if ctype else {})
            statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
            assert r.status_code in (200, 400, 413, 415), f"{r.status_code} {r.text[:300]} for {what}"
            anthropic = "/messages" in path
            if r.status_code != 200:
                body = r.json()
                if anthropic:
                    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error", what
                    assert body["error"]["message"], what
                else:
                    assert error_of(r)["type"] == "invalid_request_error", what
            elif r.headers["content-type"].startswith("text/event-stream"):
                last = r.text.rstrip().rsplit("\n\n", 1)[-1]
                assert last.startswith("event: message_stop" if anthropic else "event: response."), what
            elif path.endswith("count_tokens"):
                assert r.json()["input_tokens"] > 0, what
            else:
                assert r.json()["type" if anthropic else "object"] in ("message", "response"), what
            assert not records.bad, f"{records.bad[:3]} after {what}"
    print("statuses", dict(sorted(statuses.items())))
    assert statuses.get(200, 0) >= n // 50 and statuses.get(400, 0) >= n // 3  # both sides were exercised


def _raw(srv, request: bytes) -> bytes:
    """One request written by hand (what httpx refuses to send), the whole reply; the
    client's side is closed after the request (a body shorter than announced ends there)."""
    with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as s:
        s.sendall(request)
        s.shutdown(socket.SHUT_WR)
        chunks = []
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)


JSON_HEAD = b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"


@pytest.mark.parametrize("request_bytes, framing_broken", [
    (JSON_HEAD + b"Content-Length: abc\r\n\r\n{}", True),
    (JSON_HEAD + b"Content-Length: 3\r\n\r\n{}", True),  # the client leaves before its body is complete
    (JSON_HEAD + b"Transfer-Encoding: chunked\r\n\r\n{}", True),  # not chunk framing
    (JSON_HEAD + b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", False),
    (b"POST /v1/completions HTTP/1.1\r\nHost: \xff\xfe\r\nContent-Type: application/json\r\n"
     b"Content-Length: 2\r\n\r\n{}", False),
    (JSON_HEAD + b"Origin: http://\xe9vil\r\nContent-Length: 2\r\n\r\n{}", False),
    (b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/\xe9json\r\n"
     b"Content-Length: 2\r\n\r\n{}", False),
    (b"POST /v1/completions HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}", False),
])
def test_hand_written_requests_never_500(fuzz_srv, request_bytes, framing_broken, records):
    reply = _raw(fuzz_srv, request_bytes)
    if not (framing_broken and not reply):  # uvicorn may drop a connection it cannot frame
        status = int(reply.split(b" ", 2)[1])
        assert 400 <= status < 500, reply[:500]


def test_body_checks_directly():
    assert nesting_depth('{"a": "[[[[", "b": [[1], {"c": [2]}]}') == 4  # brackets in strings do not count
    assert nesting_depth("[" * 200 + "]" * 200) == 200
    assert nesting_depth('["\\"[[[[[[" ]') == 1  # an escaped quote does not end the string
    for text, code in [("[" * 65 + "]" * 65, "invalid_json"), ('{"a": NaN}', "invalid_json"),
                       ('{"a": 1e999}', "invalid_json"), ('{"a": "\\udc00"}', "invalid_unicode"),
                       ('{"\\ud800": 1}', "invalid_unicode"), ('{"a": [1, "\\ud83d"]}', "invalid_unicode")]:
        with pytest.raises(ApiError) as e:
            loads(text.encode())
        assert e.value.status == 400 and e.value.code == code, text
    assert loads(b'{"a": "\\ud83d\\ude00"}') == {"a": "\U0001f600"}  # a surrogate pair is a character
    t0 = time.perf_counter()  # strings that never close: linear, not one rescan per quote
    for text in ('"' + '\\"' * 40_000, '["' + "\\" * 999_999, "[" * 1_000_000 + '"'):
        with pytest.raises(ApiError):
            loads(text.encode())
    assert time.perf_counter() - t0 < 5
    assert loads(("[" * 64 + "]" * 64).encode()) is not None  # the limit itself is fine
    with pytest.raises(ApiError) as e:
        loads(b'{"a": [1, "\\ud83d"]}')
    assert e.value.param == "a[1]"


# ------------------------------------------------------------------------------ issue 43 shapes
FUZZ_CTX = 512  # fuzz_srv's context
HI = [{"role": "user", "content": "hi"}]
FLOOD = "<|im_start|>user\nx<|im_end|>\n"


def test_server_reserves_what_the_renderer_passes():
    from localspec.backend.chat import RESERVED

    assert RESERVED_TEMPLATE_NAMES == RESERVED  # the server's copy (it may not import the backend)


@pytest.mark.parametrize("key", sorted(RESERVED_TEMPLATE_NAMES))
def test_template_kwargs_collisions_are_400(fuzz_srv, records, key):
    for value in ([{"role": "user", "content": "x"}], "x", True, None):
        r = httpx.post(fuzz_srv.url + "/v1/chat/completions", timeout=60,
                       json={"messages": HI, "max_tokens": 1, "chat_template_kwargs": {key: value}})
        assert r.status_code == 400, (key, value, r.text[:300])
        err = error_of(r)
        assert err["param"] == f"chat_template_kwargs.{key}" and err["code"] == "reserved_parameter"
        assert repr(key) in err["message"] and err["type"] == "invalid_request_error"


def test_other_template_kwargs_reach_the_template_harmlessly(fuzz_srv, records):
    """Names the renderer does not pass are the template's business (SmolLM2's reads none);
    a template that fails on one answers 400 (tests/test_server_tokens.py)."""
    ok = httpx.post(fuzz_srv.url + "/v1/chat/completions", timeout=60,
                    json={"messages": HI, "max_tokens": 1, "chat_template_kwargs": {"tools": 5, "x": {"y": [1]}}})
    assert ok.status_code == 200, ok.text  # unused kwargs reach the template harmlessly


@pytest.mark.parametrize("shape", ["flood", "bytes", "messages", "completion"])
def test_prompts_that_cannot_fit_are_refused_on_arrival(fuzz_srv, records, shape):
    """2 MB of role markers, 100,000 messages, a 2 MB raw prompt: 400 context_length_exceeded
    at once (they used to hold the slot for 49 s to minutes before the context check), and
    the slot is free for the next request."""
    body: dict = {"max_tokens": 1}
    if shape == "flood":  # the body: 64,000 turns inside one user message
        body["messages"] = [{"role": "user", "content": FLOOD * 64_000}]
    elif shape == "bytes":  # one byte over the bound
        body["messages"] = [{"role": "user", "content": "x" * (BYTES_PER_TOKEN * FUZZ_CTX + 1)}]
    elif shape == "messages":
        body["messages"] = [{"role": "user", "content": "x"}] * 100_000
    else:
        body["prompt"] = FLOOD * 64_000
    path = "/v1/completions" if shape == "completion" else "/v1/chat/completions"
    before = len(fuzz_srv.worker.served)
    t0 = time.monotonic()
    r = httpx.post(fuzz_srv.url + path, json=body, timeout=20)
    assert r.status_code == 400, r.text[:300]
    err = error_of(r)
    assert err["code"] == "context_length_exceeded" and err["param"] in ("messages", "prompt")
    assert time.monotonic() - t0 < 10  # parsing 2-3 MB of JSON, nothing more
    assert len(fuzz_srv.worker.served) == before  # it never reached a slot
    r = httpx.post(fuzz_srv.url + "/v1/completions", json={"prompt": "1, 2, 3,", "max_tokens": 1}, timeout=30)
    assert r.status_code == 200


def test_a_flood_the_bound_lets_through_is_tokenized_in_seconds(smollm2_path, records):
    """A server with a 64k context lets 1 MB of role markers through the byte bound: they are
    tokenized in pieces (backend/specials.py) and the context check answers in seconds; one
    llama_tokenize call over them took ~50 s. (The slot's real context is small: only the
    bound reads the 64k.)"""
    n_ctx = 65_536
    config = ServerConfig(model_id="smollm2", limits=Limits(cfg=GenConfig(method="ar", n_predict=1), n_ctx=n_ctx))
    srv = ServerThread(create_app(session(smollm2_path, n_ctx=FUZZ_CTX, threads=1), config))
    try:
        content = FLOOD * (BYTES_PER_TOKEN * n_ctx // len(FLOOD) - 8)
        t0 = time.monotonic()
        r = httpx.post(srv.url + "/v1/chat/completions", timeout=60,
                       json={"messages": [{"role": "user", "content": content}], "max_tokens": 1})
        assert r.status_code == 400 and error_of(r)["code"] == "context_length_exceeded", r.text[:300]
        assert "tokens but the context holds" in error_of(r)["message"]  # the context check itself
        assert time.monotonic() - t0 < 20
    finally:
        srv.stop()


class HeldStart:
    """The real session, whose next generate() waits until the test lets it go: the time a
    big prompt takes to render, tokenize and evaluate, made as long as the test needs."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.entered = threading.Event()
        self.release = threading.Event()

    def generate(self, *a, **kw):
        self.entered.set()
        assert self.release.wait(30)
        return self.inner.generate(*a, **kw)

    def __getattr__(self, name):
        return getattr(self.inner, name)


@pytest.fixture(scope="module")
def held_srv(smollm2_path, smollm2_q4_0_path):
    sess = HeldStart(session(smollm2_path, smollm2_q4_0_path, n_ctx=FUZZ_CTX, n_seq_max=4, threads=1))
    config = ServerConfig(model_id="smollm2", limits=Limits(cfg=GenConfig(method="sd", K=1, L=2, n_predict=2),
                                                            n_ctx=FUZZ_CTX, n_seq_max=4))
    s = ServerThread(create_app(sess, config))
    s.session = sess
    sess.release.set()  # a first request warms the contexts (their first decodes cost seconds)
    r = httpx.post(s.url + "/v1/completions", json={"prompt": "1, 2, 3,", "max_tokens": 2}, timeout=60)
    assert r.status_code == 200
    yield s
    s.stop()


def _wait(cond, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


@pytest.mark.parametrize("stream", [False, True])
def test_client_gone_before_first_byte_frees_the_slot(held_srv, records, stream):
    """A big request whose client hangs up while its prompt is being prepared (before any
    byte of the answer): no token is generated for it and the next request is served at once."""
    sess = held_srv.session
    sess.entered.clear()
    sess.release.clear()
    body = json.dumps({"messages": [{"role": "user", "content": "hello " * 60}], "max_tokens": 60,
                       "stream": stream}).encode()
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    before = len(held_srv.worker.served)
    conn = socket.create_connection(("127.0.0.1", held_srv.port), timeout=30)
    try:
        conn.sendall(head + body)
        assert sess.entered.wait(30), "the request never reached its slot"
    finally:
        conn.close()  # gone before the first byte of the answer
    job = next(j for j in held_srv.worker._current if j is not None)
    _wait(job.cancelled.is_set, 10, "the server never noticed the client had gone")
    sess.release.set()  # the prompt is ready now: the slot must not generate for nobody
    t0 = time.monotonic()
    r = httpx.post(held_srv.url + "/v1/completions", json={"prompt": "1, 2, 3,", "max_tokens": 2}, timeout=30)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 2
    assert time.monotonic() - t0 < 20  # its prompt's evaluation and the next answer, on a busy machine
    gone = list(held_srv.worker.served)[before]
    assert gone.cancelled and gone.n_tokens == 0 and gone.reason == "interrupted", gone
