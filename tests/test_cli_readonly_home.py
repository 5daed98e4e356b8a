"""A LOCALSPEC_HOME that cannot be written (issue 43, item 3): a shared or packaged cache
whose models are there but whose directory is read-only.

`run --method auto` printed its answer, then an OSError traceback, exited 1 and lost its
--json line; `serve` failed every auto request with a 500. Now what the cost model cannot
save is kept in memory for the process, said in ONE warning. A model whose stamp is stale
in such a cache (copied without its times) is hashed and used; the stamp stays unwritten.

Tests run as root, which ignores permission bits, so "cannot be written" is made real in
ways that refuse root too: the directory immutable (`chattr +i`, where the filesystem and
the container allow it; checked with a write), else paths occupied by the wrong kind of
file (the `costs` directory a plain file; an acceptance file or a sidecar a directory).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest

from localspec import costmodel
from localspec.costmodel import Acceptance, CostCurve, CostModel, store
from localspec.costmodel.curves import load_curve, save_curve

WARNING = "cost model: cannot write its cache"


@pytest.fixture(autouse=True)
def _fresh_store() -> Iterator[None]:
    store.forget()  # the one warning is once per process: each test starts before it
    yield
    store.forget()


def _refuses(d: Path) -> bool:
    """Whether root really cannot create a file in `d`."""
    try:
        (d / "probe").write_text("x")
    except OSError:
        return True
    (d / "probe").unlink()
    return False


@contextlib.contextmanager
def immutable(d: Path) -> Iterator[bool]:
    """`d` made read-only even for root (chattr +i) for the block; yields False (nothing
    done) where chattr is missing or not permitted here."""
    chattr = shutil.which("chattr")
    ok = chattr is not None and subprocess.run([chattr, "+i", str(d)], capture_output=True).returncode == 0
    try:
        if ok and not _refuses(d):
            ok = False
        yield ok
    finally:
        if chattr is not None:
            subprocess.run([chattr, "-i", str(d)], capture_output=True)


def fake_ctx(model_file: Path, where: str = "CPU:31|t=1") -> SimpleNamespace:
    """What a curve's cache key reads of a context: its model file and placement."""
    return SimpleNamespace(model=SimpleNamespace(path=model_file), placement_key=where, threads=1)


def test_unwritable_cache_keeps_curves_and_acceptance_in_memory_with_one_warning(tmp_path, monkeypatch, caplog):
    home = tmp_path / "home"
    home.mkdir()
    (home / "costs").write_text("a file where the cache directory should be")  # refuses root too
    monkeypatch.setenv("LOCALSPEC_HOME", str(home))
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    t, d = fake_ctx(model), fake_ctx(model, "CPU:31|t=2")
    curve = CostCurve([1, 8], [0.01, 0.02])
    caplog.set_level("WARNING", logger="localspec.costmodel")

    save_curve(t, curve)  # raised FileExistsError before
    assert load_curve(t) == curve and not curve.dirty  # kept for this process
    cm = CostModel(curve, CostCurve([1, 8], [0.001, 0.002]), acceptance=Acceptance(accepted=30.0, trials=40.0))
    cm.acceptance_path = home / "costs" / "accept-pair-t0.json"
    cm.draft.healed[1] = 0.0009
    cm.draft.dirty = True
    costmodel.save(t, d, cm)  # what every turn of run, chat and serve calls (SessionCosts.save)
    costmodel.save(t, d, cm)  # ... again: still no second warning
    got = Acceptance()
    got.load(cm.acceptance_path)
    assert (got.accepted, got.trials) == (30.0, 40.0)
    assert load_curve(d) == cm.draft  # the healed size too
    warnings = [r for r in caplog.records if WARNING in r.getMessage()]
    assert len(warnings) == 1 and str(home / "costs") in warnings[0].getMessage()
    assert not any(r.exc_info for r in caplog.records)  # a line, not a traceback


def test_memory_copy_wins_over_an_older_file_and_a_write_that_works_again_clears_it(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCALSPEC_HOME", str(tmp_path))
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    ctx = fake_ctx(model)
    old, new = CostCurve([1, 8], [0.01, 0.02]), CostCurve([1, 8], [0.005, 0.02])
    save_curve(ctx, old)
    path = next((tmp_path / "costs").glob("*.json"))
    os.replace(path, path.with_name("moved"))
    path.mkdir()  # the next rename onto it fails (IsADirectoryError, root too)
    save_curve(ctx, new)
    assert load_curve(ctx) == new  # not the older copy a shared cache holds
    path.rmdir()
    os.replace(path.with_name("moved"), path)  # writable again: the disk is current once more
    save_curve(ctx, new)
    store.forget()
    assert load_curve(ctx) == new
    assert not list((tmp_path / "costs").glob("*.tmp*"))  # no temporary file left behind


# ---------------------------------------------------------------------------- end to end


def run_auto(home: Path, target: Path, draft: Path | None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "localspec.cli", "run", "-m", str(target), "--method", "auto",
           "--raw", "-p", "1, 2, 3, 4, 5,", "-n", "8", "--temp", "0", "-c", "512", "-t", "1", "--json"]
    cmd += ["-md", str(draft)] if draft is not None else []
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "LOCALSPEC_HOME": str(home)})


def unwritable(costs: Path, exits: contextlib.ExitStack) -> Callable[[Path], None]:
    """Make the cache directory `costs` refuse writes for the rest of the test: immutable
    where allowed; else each file the run writes is occupied by a directory (`occupy`)."""
    if exits.enter_context(immutable(costs)):
        return lambda path: None

    def occupy(path: Path) -> None:
        path.unlink(missing_ok=True)
        path.mkdir()

    return occupy


def test_run_auto_with_a_read_only_cache(tmp_path, smollm2_path):
    """Curves cached, the directory read-only: the turn's acceptance (and any healed curve)
    cannot be written back. It was an OSError traceback after the answer, exit 1, no
    --json line. The draft is the target's own file, so the one curve timed by a first
    run (no draft, a writable cache) serves both."""
    home = tmp_path / "shared"
    first = run_auto(home, smollm2_path, None)
    assert first.returncode == 0 and WARNING not in first.stderr, first.stderr
    assert len(list((home / "costs").glob("*.json"))) == 1
    accept = home / "costs" / f"accept-{smollm2_path.name}--{smollm2_path.name}-t0.json"
    with contextlib.ExitStack() as exits:
        unwritable(home / "costs", exits)(accept)
        r = run_auto(home, smollm2_path, smollm2_path)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.count(WARNING) == 1, r.stderr
    d = json.loads(r.stdout.strip().splitlines()[-1])
    assert d["stop_reason"] == "max_tokens" and d["n_tokens"] == 8 and d["text"]
    assert d["timing_seconds"] == 0  # the cached curve was read


def test_curves_timed_into_an_unwritable_cache_are_used(tmp_path, monkeypatch, smollm2_path, caplog):
    """Nothing cached and nothing can be: the curves timed for an auto turn were dropped
    with the error ("could not time this placement") and the turn ran plain decoding. Now
    the turn decides with them, and another session of the process (a server slot) finds
    them without timing again. The timing is tests/support/timing.py's, unheld."""
    from localspec.config import GenConfig
    from localspec.costmodel import curves
    from localspec.events import Done
    from tests.support.helpers import session
    from tests.support.timing import HeldTiming

    (tmp_path / "costs").write_text("a file where the cache directory should be")
    monkeypatch.setenv("LOCALSPEC_HOME", str(tmp_path))
    timing = HeldTiming(held=False)
    monkeypatch.setattr(curves, "timing_steps", timing)
    caplog.set_level("WARNING", logger="localspec.costmodel")
    sess = session(smollm2_path, smollm2_path, n_ctx=1024, threads=1)
    done = [ev for ev in sess.generate("1, 2, 3,", GenConfig(method="auto", n_predict=4)) if isinstance(ev, Done)]
    assert done and done[0].stats.timing_seconds > 0 and timing.finished > 0
    assert "could not time" not in done[0].stats.choice_note and sess.costs is not None
    other = session(smollm2_path, smollm2_path, n_ctx=1024, threads=1)
    assert costmodel.timing_plan(other.target.ctx, other.draft.ctx, None) == []  # in memory
    assert sum(WARNING in rec.getMessage() for rec in caplog.records) == 1


def test_serve_auto_request_with_a_read_only_cache(tmp_path, monkeypatch, smollm2_path, smollm2_q4_0_path, caplog):
    """The server's turns save through the same code: an auto request answers 200 (it was a
    500) and the warning is said once however many requests come."""
    from localspec.config import GenConfig
    from localspec.server.app import ServerConfig, create_app
    from localspec.server.schema import Limits
    from tests.support.helpers import session
    from tests.test_server import COUNT, ServerThread

    monkeypatch.setenv("LOCALSPEC_HOME", str(tmp_path))
    cfg = GenConfig(method="auto", n_predict=6)
    sess = session(smollm2_path, smollm2_q4_0_path, n_ctx=1024, threads=1)
    # cached curves under which speculation pays: auto speculates, and saves what it learned
    save_curve(sess.target.ctx, CostCurve([1, 64], [0.010, 0.012]))
    save_curve(sess.draft.ctx, CostCurve([1, 64], [0.0005, 0.001]))
    accept = Acceptance.path(sess.target.ctx, sess.draft.ctx, greedy=True)
    caplog.set_level("WARNING", logger="localspec.costmodel")
    with contextlib.ExitStack() as exits:
        unwritable(tmp_path / "costs", exits)(accept)
        sess.start_timing(cfg)
        srv = ServerThread(create_app(sess, ServerConfig(model_id="smollm2", limits=Limits(cfg=cfg, n_ctx=1024))))
        try:
            for stream in (False, True, False):
                r = httpx.post(srv.url + "/v1/completions", timeout=120,
                               json={"prompt": COUNT, "max_tokens": 6, "temperature": 0, "stream": stream})
                assert r.status_code == 200, r.text
                assert "error" not in r.text
        finally:
            srv.stop()
    assert sum(WARNING in rec.getMessage() for rec in caplog.records) == 1


def test_a_model_in_a_read_only_cache_resolves_when_its_stamp_is_stale(tmp_path, monkeypatch, smollm2_path):
    """A cache copied without its files' times (their sidecar stamps stale) is hashed again
    on use; the sidecar that records the hash could not be written and that was an
    OSError traceback before any answer. The verified model is used all the same."""
    from localspec.models import resolve_model

    models = tmp_path / "models"
    models.mkdir()
    shutil.copyfile(smollm2_path, models / smollm2_path.name)  # a copy: no sidecar, a new mtime
    monkeypatch.setenv("LOCALSPEC_HOME", str(tmp_path))
    with contextlib.ExitStack() as exits:
        if not exits.enter_context(immutable(models)):
            (models / f"{smollm2_path.name}.localspec.json").mkdir()  # the sidecar's rename fails
        assert resolve_model("smollm2-135m", progress=False) == models / smollm2_path.name
    assert [p.name for p in models.iterdir() if p.name.endswith(".tmp")] == []


def test_costs_clear_on_a_read_only_cache_is_one_line(tmp_path):
    costs = tmp_path / "costs"
    costs.mkdir()
    (costs / "m.gguf-1-CPU_t=1-v3.json").write_text(json.dumps(CostCurve([1, 8], [0.01, 0.02]).to_json()))
    with contextlib.ExitStack() as exits:
        if not exits.enter_context(immutable(costs)):
            (costs / "x-v3.json").mkdir()  # a "curve" that cannot be unlinked
        r = subprocess.run([sys.executable, "-m", "localspec.cli", "costs", "clear"], capture_output=True, text=True,
                           timeout=120, env={**os.environ, "LOCALSPEC_HOME": str(tmp_path)})
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: cannot drop"), r.stderr
