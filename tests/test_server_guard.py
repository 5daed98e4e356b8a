"""`localspec serve` in front of a browser: Host and Origin rules, CORS, Content-Type (a
real uvicorn server on the SmolLM2 pair, as test_server.py).
"""

from __future__ import annotations

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
