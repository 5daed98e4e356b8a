"""`localspec serve` while the cost model is timed (issue 24): the server answers at once,
/health says how far the timing is, a request waits for one batch size at most and says
so in its `timings`, and a client that gives up stops an `auto` request too.

The timing is tests/support/timing.py's HeldTiming (each size runs when the test
lets it), the server a real uvicorn on a free port over the SmolLM2 pair.
"""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from localspec.config import GenConfig
from localspec.costmodel import CostCurve, curves
from localspec.costmodel.curves import save_curve
from localspec.server.app import ServerConfig, create_app
from localspec.server.schema import Limits
from tests.support.helpers import session
from tests.support.timing import SIZES, HeldTiming, fresh_costs, wait_for  # noqa: F401 - a fixture
from tests.test_server import COUNT, ServerThread

pytestmark = pytest.mark.usefixtures("fresh_costs")  # no curves cached, a timer that never waits


def serve(pair: tuple, cfg: GenConfig, cached: tuple[CostCurve, CostCurve] | None = None) -> ServerThread:
    """What `localspec serve` does: start the timing (nothing to time when the curves are
    `cached`), then listen."""
    sess = session(*pair, n_ctx=2048, threads=1)
    if cached is not None:
        save_curve(sess.target.ctx, cached[0])
        save_curve(sess.draft.ctx, cached[1])
    sess.start_timing(cfg)
    s = ServerThread(create_app(sess, ServerConfig(model_id="smollm2", limits=Limits(cfg=cfg, n_ctx=2048))))
    s.session = sess
    return s


def test_health_and_requests_during_background_timing(smollm2_path, smollm2_q4_0_path, monkeypatch) -> None:
    fake = HeldTiming()
    monkeypatch.setattr(curves, "timing_steps", fake)
    srv = serve((smollm2_path, smollm2_q4_0_path), GenConfig(method="auto", n_predict=8))
    try:
        fake.wait_entered(1)  # a batch size is being timed: the server answers all the same
        h = httpx.get(srv.url + "/health", timeout=5).json()
        assert h["status"] == "ok" and h["localspec"]["timing"] == {"done": 0, "total": 2 * SIZES}
        got: dict = {}
        th = threading.Thread(target=lambda: got.update(r=httpx.post(
            srv.url + "/v1/completions", json={"prompt": COUNT, "max_tokens": 8}, timeout=60)))
        th.start()
        wait_for(lambda: srv.session._costing.gate.waiting == 1)  # the request waits for that step
        h = httpx.get(srv.url + "/health", timeout=5).json()
        assert h["busy"] and h["localspec"]["timing"]["done"] == 0
        fake.allow(1)
        th.join(30)
        body = got["r"].json()
        assert got["r"].status_code == 200 and body["usage"]["completion_tokens"] == 8
        assert body["timings"]["timing_wait_ms"] > 0  # what it waited for
        ls = body["localspec"]
        assert ls["ran"] == "ar" and f"still timing this machine (1/{2 * SIZES}" in ls["choice_note"]
        fake.allow(2 * SIZES - 1)
        wait_for(lambda: httpx.get(srv.url + "/health", timeout=5).json()["localspec"]["timing"] is None)
        r = httpx.post(srv.url + "/v1/completions", json={"prompt": COUNT, "max_tokens": 4}, timeout=60).json()
        assert r["timings"]["timing_wait_ms"] == 0 and "timing" not in r["localspec"].get("choice_note", "")
    finally:
        fake.allow(2 * SIZES)  # never leave the timer's thread holding a step
        srv.stop()


def test_a_client_that_gives_up_stops_an_auto_request(smollm2_path, smollm2_q4_0_path) -> None:
    """The cost model is ready (cached curves under which speculation pays), so auto
    speculates; a non-streaming client that times out stops it within an iteration."""
    cached = CostCurve([1, 64], [0.010, 0.012]), CostCurve([1, 64], [0.0005, 0.001])
    srv = serve((smollm2_path, smollm2_q4_0_path), GenConfig(method="auto", n_predict=16), cached)
    try:
        assert srv.session.timing_progress is None  # nothing to time
        n = len(srv.worker.served)
        t0 = time.monotonic()
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(srv.url + "/v1/completions", json={"prompt": COUNT, "max_tokens": 1500}, timeout=1.5)
        wait_for(lambda: len(srv.worker.served) > n, timeout=15)
        last = srv.worker.served[-1]
        assert last.cancelled and last.reason == "interrupted" and last.n_tokens < 1500
        print(f"stopped {time.monotonic() - t0 - 1.5:.2f} s after the client gave up, at {last.n_tokens} tokens")
    finally:
        srv.stop()
