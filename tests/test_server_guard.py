"""`localspec serve` in front of a browser and a dashboard: Host and Origin rules, CORS,
Content-Type, and `/metrics` (a real uvicorn server on the SmolLM2 pair, as test_server.py).
"""

from __future__ import annotations

import re
import time

import httpx
import pytest

from localspec.config import GenConfig
from localspec.server.app import ServerConfig, create_app
from localspec.server.hosts import LOOPBACK_NAMES, host_name, host_policy, origin_policy
from localspec.server.schema import Limits
from tests.support.helpers import session
from tests.test_server import COUNT, ServerThread, error_of

KEY = "guard-key"
UI = "http://localhost:5173"  # the one web origin the server allows
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def srv(smollm2_path, smollm2_q4_0_path):
    """What `serve --api-key KEY --cors http://localhost:5173 --allowed-hosts box.lan` on
    127.0.0.1 runs."""
    config = ServerConfig(model_id="smollm2", draft="smollm2-q4_0", api_key=KEY,
                          allowed_hosts=host_policy("127.0.0.1", ["box.lan"]), cors=origin_policy([UI]),
                          limits=Limits(cfg=GenConfig(method="sd", K=1, L=4, n_predict=8), n_ctx=1024))
    s = ServerThread(create_app(session(smollm2_path, smollm2_q4_0_path, n_ctx=1024, threads=1), config))
    yield s
    s.stop()


def complete(srv, headers: dict | None = None, **body) -> httpx.Response:
    body = {"prompt": COUNT, "max_tokens": 2, **body}
    return httpx.post(srv.url + "/v1/completions", json=body, headers={**AUTH, **(headers or {})}, timeout=60)


# ------------------------------------------------------------------------------ browsers
def test_content_type_must_be_json(srv):
    body = b'{"prompt": "1, 2,", "max_tokens": 1}'
    for ctype in (None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
        headers = {**AUTH, **({"Content-Type": ctype} if ctype else {})}
        r = httpx.post(srv.url + "/v1/completions", content=body, headers=headers, timeout=30)
        assert r.status_code == 415 and error_of(r)["code"] == "unsupported_media_type", (ctype, r.text)
    ok = httpx.post(srv.url + "/v1/completions", content=body, timeout=60,
                    headers={**AUTH, "Content-Type": "application/json; charset=utf-8"})
    assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 1


def test_other_origins_are_refused_before_any_work(srv):
    before = len(srv.worker.served)
    evil = {"Origin": "https://evil.example", "Content-Type": "text/plain"}
    # the POST a page can send without a preflight: refused, and never reaches the model
    r = httpx.post(srv.url + "/v1/completions", content=b'{"prompt": "x"}', headers={**AUTH, **evil}, timeout=30)
    assert r.status_code == 403 and error_of(r)["code"] == "origin_not_allowed"
    assert "access-control-allow-origin" not in r.headers
    r = complete(srv, {"Origin": "https://evil.example"})  # JSON too: the origin decides
    assert r.status_code == 403
    r = httpx.get(srv.url + "/health", headers={"Origin": "null"})
    assert r.status_code == 403
    assert len(srv.worker.served) == before


def test_host_header_rules(srv):
    for host in ("evil.example", "evil.example:8080", "127.0.0.1.nip.io", "localhost.evil.example", "[::2]:1"):
        r = httpx.get(srv.url + "/health", headers={"Host": host})
        assert r.status_code == 403 and error_of(r)["code"] == "host_not_allowed", host
        r = complete(srv, {"Host": host})
        assert r.status_code == 403, host
    for host in ("localhost", f"localhost:{srv.port}", "127.0.0.1", f"[::1]:{srv.port}", "LOCALHOST", "box.lan:80"):
        r = httpx.get(srv.url + "/health", headers={"Host": host})
        assert r.status_code == 200, host
    assert complete(srv, {"Host": f"localhost:{srv.port}"}).status_code == 200


def test_cors_preflight_and_headers(srv):
    ask = {"Origin": UI, "Access-Control-Request-Method": "POST",
           "Access-Control-Request-Headers": "authorization, content-type, x-stainless-os"}
    r = httpx.options(srv.url + "/v1/chat/completions", headers=ask)
    assert r.status_code == 204  # no key needed: browsers send none on a preflight
    assert r.headers["access-control-allow-origin"] == UI
    assert "POST" in r.headers["access-control-allow-methods"]
    assert r.headers["access-control-allow-headers"] == ask["Access-Control-Request-Headers"]
    assert "Origin" in r.headers["vary"]
    r = httpx.options(srv.url + "/v1/chat/completions", headers={**ask, "Origin": "http://localhost:6666"})
    assert r.status_code == 403 and "access-control-allow-origin" not in r.headers
    # the request that follows: answered, readable by the page
    r = complete(srv, {"Origin": UI})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == UI
    assert "Origin" in r.headers["vary"]
    r = complete(srv, {"Origin": UI, "Authorization": "Bearer wrong"})  # errors are readable too
    assert r.status_code == 401 and r.headers["access-control-allow-origin"] == UI
    # an OPTIONS that is not a preflight is what it was before: no such method
    assert httpx.options(srv.url + "/v1/chat/completions").status_code == 405


def test_policies():
    assert host_policy("127.0.0.1") == LOOPBACK_NAMES
    assert host_policy("127.0.0.2") == LOOPBACK_NAMES | {"127.0.0.2"}
    assert host_policy("::1") == LOOPBACK_NAMES
    assert host_policy("0.0.0.0") is None and host_policy("192.168.1.5") is None  # the key protects those
    assert host_policy("0.0.0.0", ["box.lan"]) == LOOPBACK_NAMES | {"0.0.0.0", "box.lan"}
    assert host_policy("127.0.0.1", ["*"]) is None
    assert host_name("[::1]:8080") == "[::1]" and host_name("LocalHost:1") == "localhost"
    assert host_name("localhost.") == "localhost" and host_name("example.com") == "example.com"
    assert origin_policy([]) == frozenset() and origin_policy(["*"]) is None
    assert origin_policy(["http://A.example/", "http://b"]) == {"http://a.example", "http://b"}


def test_serve_flags_parse():
    from localspec.cli.main import build_parser

    a = build_parser().parse_args(["serve", "--allowed-hosts", "box.lan, other", "--cors", "http://a,http://b"])
    assert a.allowed_hosts == ["box.lan", "other"] and a.cors == ["http://a", "http://b"]
    a = build_parser().parse_args(["serve"])
    assert a.allowed_hosts == [] and a.cors == []


# ------------------------------------------------------------------------------ /metrics
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*",?)*\})? (\S+)$')


def scrape(srv) -> dict[str, float]:
    """The exposition text parsed strictly: every sample under a TYPE of its own name,
    values that are numbers; {'name{labels}': value}."""
    r = httpx.get(srv.url + "/metrics", headers=AUTH)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain; version=0.0.4")
    typed: dict[str, str] = {}
    out: dict[str, float] = {}
    for line in r.text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert kind in ("counter", "gauge") and name not in typed, line
            typed[name] = kind
        elif line.startswith("# HELP ") or not line:
            continue
        else:
            m = SAMPLE.match(line)
            assert m, f"not an exposition line: {line!r}"
            assert m.group(1) in typed, f"no TYPE for {line!r}"
            if typed[m.group(1)] == "counter":
                assert m.group(1).endswith("_total") or m.group(1).startswith("llamacpp:"), line
            out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out


def test_metrics_need_the_key(srv):
    assert httpx.get(srv.url + "/metrics").status_code == 401
    assert httpx.get(srv.url + "/metrics", headers={"Authorization": "Bearer no"}).status_code == 401


def test_metrics_count_requests_tokens_and_drafts(srv):
    m0 = scrape(srv)
    for name in ("llamacpp:prompt_tokens_total", "llamacpp:tokens_predicted_total", "llamacpp:requests_processing",
                 "llamacpp:requests_deferred", "llamacpp:n_decode_total", 'vllm:spec_decode_num_drafts_total'
                 '{model_name="smollm2"}', 'vllm:spec_decode_num_draft_tokens_total{model_name="smollm2",'
                 'proposer="draft"}', 'vllm:spec_decode_num_accepted_tokens_total{model_name="smollm2",'
                 'proposer="ngram"}', 'vllm:num_requests_waiting{model_name="smollm2"}'):
        assert name in m0, name
    r = complete(srv, max_tokens=8, prompt="Once upon a time")
    assert r.status_code == 200
    body = r.json()
    m1 = scrape(srv)

    def grew(name: str) -> float:
        return m1.get(name, 0.0) - m0.get(name, 0.0)

    model = 'model_name="smollm2"'
    assert grew("llamacpp:tokens_predicted_total") == body["usage"]["completion_tokens"] == 8
    assert grew(f"vllm:generation_tokens_total{{{model}}}") == 8
    assert grew(f"vllm:prompt_tokens_total{{{model}}}") == body["usage"]["prompt_tokens"]
    assert grew("llamacpp:prompt_tokens_total") == body["timings"]["prompt_n"]  # evaluated, not cached
    assert grew(f'vllm:request_success_total{{{model},finished_reason="length"}}') == 1
    drafted = grew(f'vllm:spec_decode_num_draft_tokens_total{{{model},proposer="draft"}}')
    accepted = grew(f'vllm:spec_decode_num_accepted_tokens_total{{{model},proposer="draft"}}')
    assert drafted == body["timings"]["draft_n"] > 0 and accepted == body["timings"]["draft_n_accepted"]
    assert grew(f"vllm:spec_decode_num_drafts_total{{{model}}}") == body["localspec"]["verify_steps"] > 0
    per_pos = sum(v - m0.get(k, 0.0) for k, v in m1.items()
                  if k.startswith("vllm:spec_decode_num_accepted_tokens_per_pos_total"))
    assert per_pos == accepted  # every accepted token was accepted at some position
    assert grew('localspec:http_requests_total{endpoint="completions",code="200"}') == 1
    assert m1["llamacpp:requests_processing"] == 0 and m1["llamacpp:requests_deferred"] == 0
    assert m1["llamacpp:n_tokens_max"] >= body["usage"]["total_tokens"]
    assert m1["llamacpp:predicted_tokens_seconds"] > 0


def test_metrics_count_a_request_whose_client_left(srv):
    before = scrape(srv)
    abort = 'vllm:request_success_total{model_name="smollm2",finished_reason="abort"}'
    with httpx.stream("POST", srv.url + "/v1/completions", headers=AUTH, timeout=60,
                      json={"prompt": COUNT, "max_tokens": 400, "stream": True}) as r:
        next(r.iter_lines())  # it runs; then the client goes away mid-stream
    deadline = time.monotonic() + 30
    while scrape(srv).get(abort, 0.0) == before.get(abort, 0.0):
        assert time.monotonic() < deadline, "the abandoned stream was never counted"
        time.sleep(0.1)
    after = scrape(srv)
    tokens = after["llamacpp:tokens_predicted_total"] - before["llamacpp:tokens_predicted_total"]
    assert 0 < tokens < 400


def test_metrics_split_tokens_by_every_proposer():
    """Each finished request's Stats.by_proposer() feeds the proposer label: a suffix or MTP
    draft is not counted as ngram (as it once was), and the draft model keeps the rest."""
    from localspec.events import Done, Stats
    from localspec.server.metrics import Metrics

    m = Metrics("m")
    st = Stats(method="sd", drafted=20, accepted_lengths=[4, 6], proposed={"suffix": (5, 3), "mtp": (2, 1)})
    m.submitted(1)
    m.record(1, ("done", Done("max_tokens", "x", st, "")))
    text = m.render(0, 0, 16)
    want = {"draft": (13, 6), "ngram": (0, 0), "suffix": (5, 3), "mtp": (2, 1)}
    for p, (d, a) in want.items():
        assert f'vllm:spec_decode_num_draft_tokens_total{{model_name="m",proposer="{p}"}} {d}' in text, p
        assert f'vllm:spec_decode_num_accepted_tokens_total{{model_name="m",proposer="{p}"}} {a}' in text, p
