"""`localspec bench serve`: the command lines it starts (llama-server's above all), the
client's deliberate disconnects and the tally that proves nothing was lost, the RSS reader,
aggregate tok/s and the ratios; against a scripted SSE server (no model) and, when
scripts/build_llama_cpp_peer.sh has built it, one small real llama-server run."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from localspec.bench import serve
from localspec.bench.peer import SERVER_BIN, peer_tool, require_peer_tool
from localspec.bench.serve_clients import (
    HTTPStatusError,
    Result,
    Sample,
    drop_plan,
    read_rss_kib,
    run_load,
    stream_chat,
    tree_rss_kib,
)
from localspec.bench.serve_peer import llama_server_cmd, localspec_cmd, parse_slots_flag, server_cmd
from localspec.errors import LocalspecError


def _args(**kw) -> argparse.Namespace:
    base = dict(target="/m/t.gguf", draft=None, method="auto", clients=4, requests=3, n_predict=128, np=4,
                threads=2, ctx=1024, peer_draft_max=16, peer_draft_min=0, peer_p_min=0.75, disconnects=0.0,
                seed=0, settle=0.0, startup_timeout=60.0)
    return argparse.Namespace(**{**base, **kw})


def _flag(cmd: list[str], name: str) -> str:
    return cmd[cmd.index(name) + 1]


# --------------------------------------------------------------------------- command lines


def test_llama_server_cmd_splits_context_over_slots_and_keeps_threads() -> None:
    cmd = llama_server_cmd("/bin/llama-server", _args(np=4, ctx=1024, threads=3), 8123)
    assert cmd[0] == "/bin/llama-server" and _flag(cmd, "-m") == "/m/t.gguf"
    assert _flag(cmd, "-np") == "4" and _flag(cmd, "-c") == "4096"  # each slot gets 1024, like localspec
    assert _flag(cmd, "-t") == "3" and _flag(cmd, "-tb") == "3"
    assert _flag(cmd, "--port") == "8123" and _flag(cmd, "--host") == "127.0.0.1"
    assert "-md" not in cmd and "--spec-type" not in cmd


def test_llama_server_cmd_with_draft_names_the_speculative_type() -> None:
    cmd = llama_server_cmd("llama-server", _args(draft="/m/d.gguf", threads=2, peer_draft_max=8, peer_draft_min=1), 1)
    assert _flag(cmd, "-md") == "/m/d.gguf"
    assert _flag(cmd, "--spec-type") == "draft-simple"  # without it the draft loads but never drafts
    assert _flag(cmd, "--spec-draft-n-max") == "8" and _flag(cmd, "--spec-draft-n-min") == "1"
    assert _flag(cmd, "--spec-draft-p-min") == "0.75"
    assert _flag(cmd, "-td") == "2" and _flag(cmd, "-tbd") == "2"
    assert "--draft-max" not in cmd  # removed in these llama.cpp sources
    extra = llama_server_cmd("llama-server", _args(peer_args="--poll 0 --alias 'a b'"), 1)
    assert extra[-4:] == ["--poll", "0", "--alias", "a b"]


def test_parse_slots_flag_reads_options_not_prose() -> None:
    assert parse_slots_flag("  -np N, --parallel N   number of slots") == "-np"
    assert parse_slots_flag("usage: serve [--parallel N] [--queue Q]") == "--parallel"
    assert parse_slots_flag("  --queue Q   waiting requests (see -npx and --parallelism)") is None
    assert parse_slots_flag("") is None


def test_localspec_cmd_slots_only_where_the_server_has_them() -> None:
    a = _args(np=4, draft="/m/d.gguf")
    cmd, slots = localspec_cmd("localspec", a, 9, "-np")
    assert slots == 4 and _flag(cmd, "-np") == "4" and _flag(cmd, "-md") == "/m/d.gguf"
    # totals split over the slots, as llama-server's -c: each slot holds --ctx (and 512 batch tokens)
    assert _flag(cmd, "-c") == "4096" and _flag(cmd, "-b") == "2048" and _flag(cmd, "-n") == "128"
    cmd, slots = localspec_cmd("localspec", a, 9, None)
    assert slots == 1 and "-np" not in cmd and _flag(cmd, "-c") == "1024"
    cmd, slots = localspec_cmd("localspec-1", a, 9, "-np")
    assert slots == 1 and "-np" not in cmd and _flag(cmd, "--method") == "auto"
    cmd, slots = localspec_cmd("localspec-ar", a, 9, "--parallel")
    assert slots == 1 and _flag(cmd, "--method") == "ar" and "-md" not in cmd


def test_llama_server_not_built_is_a_one_line_skip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCALSPEC_PEER_DIR", str(tmp_path))
    cmd, slots, why = server_cmd("llama-server", _args(np=3), 1)
    assert cmd is None and slots == 3
    assert why == "llama-server not built: run scripts/build_llama_cpp_peer.sh"
    with pytest.raises(LocalspecError, match=r"llama-server not built: run scripts/build_llama_cpp_peer\.sh"):
        require_peer_tool(SERVER_BIN)
    fake = tmp_path / SERVER_BIN
    fake.write_text("#!/bin/sh\n")
    assert peer_tool(SERVER_BIN) is None  # not executable: not built
    fake.chmod(0o755)
    assert server_cmd("llama-server", _args(), 1)[0][0] == str(fake)


# --------------------------------------------------------------------------- accounting


def test_tally_accounts_for_every_request_and_counts_5xx() -> None:
    res = Result("x", wall=2.0)
    res.samples = [Sample(0.1, 1.0, 10), Sample(0.2, 1.0, 30), Sample(0.1, 0.3, 2, dropped=True)]
    res.errors = ["HTTP 500: b'boom'", "HTTP 503: b'busy'", "ConnectionResetError: reset", "HTTP 500: again"]
    t = res.tally()
    assert t["sent"] == 7 and t["completed"] == 2 and t["dropped"] == 1 and t["lost"] == 0
    assert t["errors"] == {"ConnectionResetError": 1, "HTTP 500": 2, "HTTP 503": 1}
    assert t["server_errors"] == 3
    assert res.aggregate_tok_per_s() == pytest.approx(20.0)  # (10 + 30) / 2 s; the dropped one not counted
    assert Result("y").aggregate_tok_per_s() == 0.0


def test_summary_keeps_dropped_out_of_latency() -> None:
    res = Result("localspec", wall=1.0, lone_ttft=0.05, rss_before_kib=2048, rss_after_kib=3072)
    res.samples = [Sample(0.1, 1.0, 11, drafted=8, accepted=6), Sample(9.0, 9.5, 3, dropped=True, drafted=99)]
    row = serve.summary(res)
    assert row["requests"] == 1 and row["ttft_p50_ms"] == pytest.approx(100.0)
    assert row["latency_p95_ms"] == pytest.approx(1000.0) and row["tok_per_s_per_request"] == pytest.approx(10 / 0.9)
    assert row["dropped"] == 1 and row["errors"] == 0 and row["lone_ttft_ms"] == pytest.approx(50.0)
    assert row["rss_before_mib"] == 2.0 and row["rss_after_mib"] == 3.0
    assert row["drafted"] == 8 and row["acceptance"] == pytest.approx(0.75)
    assert serve.summary(Result("ar", samples=[Sample(0.1, 1.0, 5)], wall=1.0))["acceptance"] is None


def test_ratios_are_against_localspec_one_slot_and_llama_server() -> None:
    rows = [{"server": "localspec", "slots": 4, "aggregate_tok_per_s": 30.0, "skipped": ""},
            {"server": "localspec-1", "slots": 1, "aggregate_tok_per_s": 10.0, "skipped": ""},
            {"server": "llama-server", "slots": 4, "aggregate_tok_per_s": 20.0, "skipped": ""},
            {"server": "llama-cpp", "slots": 1, "skipped": "extra missing"}]
    serve.add_ratios(rows)
    assert rows[0]["x_localspec_1slot"] == pytest.approx(3.0) and rows[0]["x_llama_server"] == pytest.approx(1.5)
    assert rows[2]["x_localspec_1slot"] == pytest.approx(2.0) and rows[2]["x_llama_server"] == pytest.approx(1.0)
    assert rows[3]["x_localspec_1slot"] is None
    alone = [{"server": "localspec", "slots": 4, "aggregate_tok_per_s": 30.0, "skipped": ""}]
    serve.add_ratios(alone)  # no one-slot localspec and no llama-server: no ratio, not a division by 0
    assert alone[0]["x_localspec_1slot"] is None and alone[0]["x_llama_server"] is None


def test_drop_plan_is_seeded_and_inside_the_first_half() -> None:
    assert drop_plan(1, 0, 25, 0.0, 128) == [None] * 25
    always = drop_plan(1, 0, 25, 1.0, 128)
    assert all(p is not None and 1 <= p <= 64 for p in always)
    half = drop_plan(7, 2, 200, 0.5, 128)
    assert half == drop_plan(7, 2, 200, 0.5, 128)
    assert half != drop_plan(7, 3, 200, 0.5, 128)  # each client its own stream
    assert 60 < sum(p is not None for p in half) < 140
    assert drop_plan(0, 0, 3, 1.0, 1) == [1, 1, 1]


# --------------------------------------------------------------------------- memory


def _fake_proc(root: Path, pid: int, ppid: int, rss_kib: int | None, comm: str = "srv") -> None:
    d = root / str(pid)
    d.mkdir()
    (d / "stat").write_text(f"{pid} ({comm}) S {ppid} 1 1 0 -1\n")
    rss = f"VmRSS:\t{rss_kib} kB\n" if rss_kib is not None else ""
    (d / "status").write_text(f"Name:\t{comm}\nVmPeak:\t99999 kB\n{rss}Threads:\t1\n")


def test_rss_reader_and_process_tree(tmp_path: Path) -> None:
    _fake_proc(tmp_path, 10, 1, 1000)
    _fake_proc(tmp_path, 11, 10, 200, comm="a b) c")  # a name with ') ' must not shift the fields
    _fake_proc(tmp_path, 12, 11, 30)
    _fake_proc(tmp_path, 13, 1, 5000)  # not ours
    _fake_proc(tmp_path, 14, 10, None)  # a kernel thread has no VmRSS
    assert read_rss_kib(10, tmp_path) == 1000 and read_rss_kib(14, tmp_path) == 0
    assert read_rss_kib(99, tmp_path) == 0  # gone
    assert tree_rss_kib(10, tmp_path) == 1230
    assert read_rss_kib(os.getpid()) > 1000  # this interpreter: a real /proc reading, in KiB


def test_tree_rss_sees_a_child_process() -> None:
    """A shell and its two sleeping children: every RSS in the tree is still, so the sum is
    exact (the test's own interpreter moved 90 MB between two reads under xdist)."""
    shell = subprocess.Popen(["sh", "-c", "sleep 30 & sleep 30; wait"])
    try:
        kids: list[int] = []
        for _ in range(50):  # the shell forks its children a moment after it starts
            time.sleep(0.05)
            kids = [int(d.name) for d in Path("/proc").glob("[0-9]*")
                    if _ppid(d) == shell.pid]
            if len(kids) == 2:
                break
        assert len(kids) == 2
        parts = [read_rss_kib(shell.pid)] + [read_rss_kib(k) for k in kids]
        assert all(p > 0 for p in parts) and tree_rss_kib(shell.pid) == sum(parts)
    finally:
        for k in kids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(k, 9)
        shell.kill()
        shell.wait()


def _ppid(d: Path) -> int:
    try:
        return int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


# --------------------------------------------------------------------------- a scripted SSE server


class _SSE(BaseHTTPRequestHandler):
    """Streams `chunks` content deltas then usage and [DONE]; `status` != 200 answers that.
    Records each request's outcome (finished / client gone) in the server's `outcomes`."""

    chunks = 12
    status = 200

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.prompts.append(body["messages"][0]["content"])
        if self.status != 200:
            self.send_response(self.status)
            self.end_headers()
            self.wfile.write(b'{"error": "scripted"}')
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        n = min(self.chunks, body["max_tokens"])
        try:
            for i in range(n):
                self.wfile.write(f'data: {json.dumps({"choices": [{"delta": {"content": f"t{i}"}}]})}\n\n'.encode())
                self.wfile.flush()
                time.sleep(0.01)
            last = {"choices": [], "usage": {"completion_tokens": n}, "timings": {"draft_n": 10, "draft_n_accepted": 7}}
            self.wfile.write(f"data: {json.dumps(last)}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
            self.server.outcomes.append("finished")
        except OSError:
            self.server.outcomes.append("client gone")


@pytest.fixture
def sse() -> Iterator[ThreadingHTTPServer]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), type("H", (_SSE,), {}))
    srv.outcomes, srv.prompts = [], []
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def test_stream_chat_reads_usage_and_hangs_up_on_purpose(sse: ThreadingHTTPServer) -> None:
    port = sse.server_address[1]
    s = stream_chat(port, "hi", 8)
    assert not s.dropped and s.tokens == 8 and 0 < s.ttft <= s.latency
    assert (s.drafted, s.accepted) == (10, 7)  # from the last chunk's `timings`
    d = stream_chat(port, "hi", 100, drop_after=3)
    assert d.dropped and d.tokens == 3
    deadline = time.monotonic() + 5
    while len(sse.outcomes) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert sse.outcomes == ["finished", "client gone"]  # the server really lost its client mid-answer
    short = stream_chat(port, "hi", 2, drop_after=5)  # the answer ends before the drop point: completed
    assert not short.dropped and short.tokens == 2


def test_stream_chat_raises_the_status(sse: ThreadingHTTPServer) -> None:
    sse.RequestHandlerClass.status = 500
    with pytest.raises(HTTPStatusError, match=r"^HTTP 500"):
        stream_chat(sse.server_address[1], "hi", 8)


def test_run_load_with_disconnects_loses_nothing(sse: ThreadingHTTPServer) -> None:
    res = Result("scripted")
    run_load(sse.server_address[1], ["a", "b"], 3, 4, 12, res, disconnects=0.5, seed=3)
    planned = sum(p is not None for i in range(3) for p in drop_plan(3, i, 4, 0.5, 12))
    t = res.tally()
    assert t["sent"] == 12 and t["lost"] == 0 and t["errors"] == {}
    assert t["dropped"] == planned and 0 < planned < 12 and t["completed"] == 12 - planned
    assert res.wall > 0 and res.aggregate_tok_per_s() == pytest.approx(12 * (12 - planned) / res.wall)
    assert len(set(sse.prompts)) == 12 and "[2-3] b" in sse.prompts  # no request finds its prompt cached


def test_run_load_counts_server_errors(sse: ThreadingHTTPServer) -> None:
    sse.RequestHandlerClass.status = 500
    res = Result("scripted")
    run_load(sse.server_address[1], ["a"], 2, 2, 4, res)
    t = res.tally()
    assert t["sent"] == 4 and t["server_errors"] == 4 and t["errors"] == {"HTTP 500": 4} and t["lost"] == 0
    assert "5xx" in serve.table([serve.summary(res)]) and "HTTP 500 x4" in serve.table([serve.summary(res)])


# --------------------------------------------------------------------------- real llama-server

_NOT_BUILT = f"{SERVER_BIN} not built: run scripts/build_llama_cpp_peer.sh"


@pytest.mark.skipif(peer_tool(SERVER_BIN) is None, reason=_NOT_BUILT)
def test_llama_server_help_has_every_flag_we_pass() -> None:
    out = subprocess.run([str(peer_tool(SERVER_BIN)), "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    text = out.stdout + out.stderr
    cmd = llama_server_cmd("x", _args(draft="/m/d.gguf"), 1)
    missing = [f for f in cmd if f.startswith("-") and f not in text]
    assert missing == []


@pytest.mark.skipif(peer_tool(SERVER_BIN) is None, reason=_NOT_BUILT)
def test_real_llama_server_two_clients_with_a_draft_and_disconnects(smollm2_path: Path) -> None:
    """2 clients x 2 requests, 8 tokens, half of them dropped: all accounted, no 5xx.
    About 16 s on the 2-core dev machine when it is quiet (no wall-time assert: the test
    must not depend on a quiet machine, tests/README.md)."""
    a = _args(target=str(smollm2_path), draft=str(smollm2_path), clients=2, requests=2, n_predict=8, np=2,
              ctx=512, peer_draft_max=4, disconnects=0.5, seed=1, settle=0.2)
    res = serve.bench_one("llama-server", a, ["Say hello.", "Count to five.", "Name a color.", "Hi!"])
    assert res.skipped == "", res.skipped
    row = serve.summary(res)
    assert row["sent"] == 4 and row["lost"] == 0 and row["server_errors"] == 0 and row["errors"] == 0, row
    planned = sum(p is not None for i in range(2) for p in drop_plan(1, i, 2, 0.5, 8))
    assert row["completed"] + row["dropped"] == 4 and row["dropped"] <= planned
    assert row["completed"] >= 1 and row["aggregate_tok_per_s"] > 0 and row["lone_ttft_ms"] > 0
    assert row["rss_before_mib"] > 10 and row["rss_after_mib"] > 10  # the model is resident
    assert "-np 2" in row["command"] and "-c 1024" in row["command"]
    assert row["drafted"] > 0  # --spec-type draft-simple: the draft really drafts


_CHATTY_SERVER = '''
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class H(BaseHTTPRequestHandler):
    def log_message(self, *a):
        sys.stderr.write("x" * 100_000 + "\\n")  # a verbose server: far over a pipe's 64 KiB
        sys.stderr.flush()

    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"{}")

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.end_headers()
        last = {"choices": [{"delta": {"content": "ok"}}], "usage": {"completion_tokens": 1}}
        self.wfile.write(f"data: {json.dumps(last)}\\n\\ndata: [DONE]\\n\\n".encode())

ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
'''


def test_bench_one_survives_a_server_that_logs_a_lot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server's stderr goes to a file: a pipe nobody reads would fill and block it."""
    script = tmp_path / "chatty.py"
    script.write_text(_CHATTY_SERVER)
    monkeypatch.setattr(serve, "server_cmd", lambda kind, a, port: ([sys.executable, str(script), str(port)], 1, ""))
    res = serve.bench_one("chatty", _args(clients=2, requests=2, startup_timeout=30.0), ["a", "b"])
    assert res.skipped == "" and res.tally()["completed"] == 4 and res.rss_before_kib > 0
