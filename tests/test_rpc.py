"""llama.cpp RPC: `localspec rpc-server`, `--rpc`, a target split across two servers.

Every client runs in a subprocess: once RPC devices are registered in a process, a model
loaded there may be placed on them, and a later abort on a stopped server would end that
process (here: pytest). The servers listen on free 127.0.0.1 ports only, and stop at the
end of the module (SIGTERM; PR_SET_PDEATHSIG too, should pytest itself be killed).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from localspec.backend import rpc, rpc_server

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:  # runs in the child before exec
    ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def localspec(*args: str, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "localspec.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, **kw)


def client(script: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


class Server:
    """One `localspec rpc-server` subprocess (CPU device, 1 thread) on a free loopback port."""

    def __init__(self) -> None:
        self.port = free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "localspec.cli", "rpc-server", "--port", str(self.port), "--device", "CPU",
             "--threads", "1"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, preexec_fn=_die_with_parent,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                rpc.probe(self.endpoint, timeout=2)
                return
            except rpc.RpcError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    out, err = self.proc.communicate()
                    raise RuntimeError(f"rpc-server did not start: {out} {err}") from None
                time.sleep(0.2)

    def stop(self) -> tuple[int, str, str]:
        """SIGTERM (as Ctrl-C): the server must exit by itself, 0, within seconds."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            out, err = self.proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
            return -999, out, err
        return self.proc.returncode, out, err


@pytest.fixture(scope="module")
def servers():
    pair = [Server(), Server()]
    yield pair
    results = [s.stop() for s in pair]
    for rc, _, err in results:
        assert rc == 0, err  # a server that needed SIGKILL fails the module's last test


# ----------------------------------------------------------------------------- no models
def test_probe_refused_and_malformed():
    port = free_port()  # nothing listens there
    with pytest.raises(rpc.RpcError, match=f"127.0.0.1:{port}: connection refused"):
        rpc.probe(f"127.0.0.1:{port}", timeout=2)
    with pytest.raises(rpc.RpcError, match="HOST:PORT"):
        rpc.probe("127.0.0.1", timeout=2)
    with pytest.raises(ValueError):
        rpc.split_endpoint("host:99999")
    assert rpc.split_endpoint("[::1]:7") == ("::1", 7)


def test_probe_names_a_server_that_is_not_rpc():
    """Something else on the port (here: a listener that answers garbage) -> clear error."""
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        port = srv.getsockname()[1]

        def answer():
            conn, _ = srv.accept()
            conn.recv(64)
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
            conn.close()

        t = threading.Thread(target=answer, daemon=True)
        t.start()
        with pytest.raises(rpc.RpcError, match=f"127.0.0.1:{port}"):
            rpc.probe(f"127.0.0.1:{port}", timeout=2)
        t.join(5)


def test_without_rpc_build_names_the_rebuild(monkeypatch):
    monkeypatch.setattr(rpc.llama_cpp, "llama_supports_rpc", lambda: False)
    with pytest.raises(rpc.RpcError, match='CMAKE_ARGS="-DGGML_RPC=on"'):
        rpc.connect(["127.0.0.1:1"])
    with pytest.raises(rpc.RpcError, match="GGML_RPC"):
        rpc_server.RpcServer("127.0.0.1", free_port())


def test_server_prints_endpoint_and_devices_and_stops_on_sigterm():
    s = Server()
    rc, out, err = s.stop()
    assert rc == 0, err
    assert f"listening on {s.endpoint}" in out and "\n  CPU: " in out, out
    assert "Starting RPC server v7" in out  # ggml's own banner: the server really started
    assert "WARNING" not in err and f"rpc-server on {s.endpoint} stopped" in err


def test_server_checks_its_flags(servers):
    busy = servers[0]
    r = localspec("rpc-server", "--port", str(busy.port), timeout=60)
    assert r.returncode == 2 and "already in use" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    r = localspec("rpc-server", "--host", "localhost", timeout=60)
    assert r.returncode == 2 and "IPv4" in r.stderr
    r = localspec("rpc-server", "--port", str(free_port()), "--device", "NOPE0", timeout=60)
    assert r.returncode == 2 and "NOPE0" in r.stderr and "CPU" in r.stderr
    r = localspec("rpc-server", "--port", str(free_port()), "--threads", "0", timeout=60)
    assert r.returncode == 2 and "--threads 0" in r.stderr


def test_non_loopback_host_warns(monkeypatch, capsys):
    """The warning path without binding a public interface: a fake server that is 'exposed'
    and whose loop ends at once (which is itself an error)."""
    from localspec.cli import rpc as cli_rpc
    from localspec.errors import LocalspecError

    class Fake:
        endpoint, exposed, threads, cache_dir, devices = "0.0.0.0:1", True, 1, None, []

        def __init__(self, *a):
            pass

        def start(self):
            pass

        def alive(self, wait=0.0):
            return False

    monkeypatch.setattr(rpc_server, "RpcServer", Fake)
    a = argparse.Namespace(host="0.0.0.0", port=1, device=[], threads=None, cache=None)
    with pytest.raises(LocalspecError, match="stopped on its own"):
        cli_rpc.cmd_rpc_server(a)
    err = capsys.readouterr().err
    assert "WARNING: 0.0.0.0 is not a loopback address" in err and "no authentication" in err


def test_busy_server_is_named_not_hung(servers):
    """A server serves one client at a time: while another holds it, ours is refused with a
    message instead of hanging in ggml's handshake."""
    s = servers[1]
    with socket.create_connection(("127.0.0.1", s.port), timeout=5) as hold:
        hold.sendall(struct.pack("<BQ", 14, 24) + bytes(24))  # HELLO: now the server is ours
        assert len(hold.recv(64)) >= 8
        t = time.monotonic()
        with pytest.raises(rpc.RpcError, match="one client at a time"):
            rpc.probe(s.endpoint, timeout=1.5)
        assert time.monotonic() - t < 5
    rpc.probe(s.endpoint, timeout=5)  # free again once the other client left


def test_unreachable_endpoint_exits_2_without_core_dump(smollm2_path):
    dead = f"127.0.0.1:{free_port()}"
    r = localspec("run", "-m", str(smollm2_path), "--method", "ar", "-n", "4", "-p", "hi", "--rpc", dead)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert dead in r.stderr and "connection refused" in r.stderr
    assert r.stderr.strip().count("\n") == 0 and "abort" not in r.stderr.lower()
    r = localspec("run", "-m", str(smollm2_path), "-p", "hi", "--rpc", "nohostport")
    assert r.returncode == 2 and "HOST:PORT" in r.stderr


def test_connect_registers_rpc_devices(servers):
    script = (
        "import json, sys\n"
        "from localspec.backend import rpc\n"
        "eps = sys.argv[1].split(',')\n"
        "names = rpc.connect(eps)\n"
        "again = rpc.connect(eps)\n"
        "print(json.dumps({'names': names, 'again': again, 'reg': {a: [d.__dict__ for d in v] "
        "for a, v in rpc.registered().items()}}))\n"
    )
    r = client(script, ",".join(s.endpoint for s in servers), timeout=120)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["names"] == ["RPC0", "RPC1"] and got["again"] == ["RPC0", "RPC1"]
    for s, dev in zip(servers, ["RPC0", "RPC1"], strict=True):
        (info,) = got["reg"][s.endpoint]
        assert info["name"] == dev and info["description"] == s.endpoint and info["total"] > 0


# ----------------------------------------------------------------------------- SmolLM2 over RPC
SPLIT_SCRIPT = r'''
import json, sys
from localspec.backend import Context, Model, rpc
from localspec.config import GenConfig
from localspec.placement.load import LoadOptions
from localspec.runtime import RuntimeSession
from localspec.session import SessionOptions

eps, target, draft = sys.argv[1].split(","), sys.argv[2], sys.argv[3]
PROMPTS = ["List the planets of the solar system.",
           "Write a Python function that checks whether a number is prime."]
RUNS = [("ar", 1, 1), ("sd", 1, 5), ("mdbv", 2, 4), ("auto", 1, 8)]
LOCAL = LoadOptions(gpu_layers=0, devices=["none"])

def texts(tm, dm):
    s = RuntimeSession(tm, dm, SessionOptions(n_ctx=1024, threads=1))
    out = {}
    for p in PROMPTS:
        for m, K, L in RUNS:
            cfg = GenConfig(method=m, K=K, L=L, n_predict=40, auto_K=m == "auto", auto_L=m == "auto")
            done = list(s.complete(p, cfg))[-1]
            out[f"{m}|{p}"] = {"tokens": s.last_tokens, "prompt": s.last_prompt_tokens, "text": done.text,
                               "method": done.stats.method}
    s.close()
    return out

dm = Model(draft, load=LOCAL)
local_t = Model(target, load=LOCAL)
local = texts(local_t, dm)
names = rpc.connect(eps)
split = LoadOptions(gpu_layers=20, devices=names, tensor_split=[1.0, 1.0])
remote_t = Model(target, verbose=True, load=split)  # its load log names each layer's device
assert rpc.connect(eps) == names  # again while we hold both servers' one client slot: no re-probe
remote = texts(remote_t, dm)

def gap(key):
    a, b = local[key]["tokens"], remote[key]["tokens"]
    i = next((j for j in range(min(len(a), len(b))) if a[j] != b[j]), None)
    if i is None:
        return None if len(a) == len(b) else 0.0
    ctx = Context(local_t, n_ctx=1024, n_batch=512, n_seq_max=1, threads=1)
    row = ctx.batch.clear().add_sequence(local[key]["prompt"] + a[:i], 0, 0, True)
    ctx.decode()
    lg = ctx.logits(row)
    return abs(float(lg[a[i]] - lg[b[i]]))

print(json.dumps({"names": names, "layers": remote_t.placement.layers,
                  "runs": {k: {"equal": local[k]["text"] == remote[k]["text"], "gap": gap(k),
                               "method": remote[k]["method"], "text": remote[k]["text"]} for k in local}}))
'''


@pytest.mark.slow  # ~18 s: two RPC servers and a split target (long tier)
def test_target_split_across_two_servers_matches_local(servers, smollm2_path, smollm2_q8_path, tmp_path):
    """SmolLM2 target: 11 layers on the local CPU, 10 on each server; draft local. Greedy
    ar / sd / mdbv / auto give the local run's text, or differ first at a near-tie (the
    batch-numerics rule of test_speculative.py: logit gap < 1.0 under a fresh evaluation)."""
    env = {**os.environ, "LOCALSPEC_HOME": str(tmp_path)}  # auto's cost curves: not the user's cache
    r = subprocess.run([sys.executable, "-c", SPLIT_SCRIPT, ",".join(s.endpoint for s in servers),
                        str(smollm2_path), str(smollm2_q8_path)],
                       capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["names"] == ["RPC0", "RPC1"]
    assert got["layers"] == {"RPC0": 10, "RPC1": 10, "CPU": 11}
    for dev in ("RPC0", "RPC1", "CPU"):  # llama.cpp's own account of where the layers went
        assert f"assigned to device {dev}," in r.stderr
    assert r.stderr.count("assigned to device RPC1,") == 10
    for key, run in got["runs"].items():
        assert run["text"], key
        assert run["equal"] or (run["gap"] is not None and run["gap"] < 1.0), (key, run)
    assert {run["method"] for run in got["runs"].values()} >= {"ar", "sd", "mdbv"}


def test_server_killed_mid_run_gives_one_clear_line(smollm2_path, tmp_path):
    """llama.cpp aborts the client (GGML_ABORT "Remote RPC server crashed...": SIGABRT, core
    dump). localspec's abort hook turns that into one line naming the dead server and exit
    code 3; the text streamed so far was printed; nothing is written to localspec's cache."""
    server = Server()
    out_path = tmp_path / "client.out"
    home = tmp_path / "home"
    home.mkdir()
    cmd = [sys.executable, "-m", "localspec.cli", "run", "-m", str(smollm2_path), "--rpc", server.endpoint,
           "-dev", "RPC0", "-ngl", "all", "--method", "ar", "-n", "100000", "--raw", "-t", "1",
           "-p", "Once upon a time"]
    with open(out_path, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                                env={**os.environ, "LOCALSPEC_HOME": str(home)}, preexec_fn=_die_with_parent)
    try:
        deadline = time.monotonic() + 120
        while len(out_path.read_text()) < 200:  # it is streaming the target's text
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.1)
        server.proc.kill()  # SIGKILL: the server is gone without a goodbye
        server.proc.wait(10)
        err = proc.communicate(timeout=60)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
        server.stop()
    assert proc.returncode == rpc.RPC_LOST_EXIT, (proc.returncode, err)
    line = err.strip()
    assert line.count("\n") == 0, err
    assert line.startswith(f"error: lost the connection to the RPC server {server.endpoint}: "), line
    assert "Restart the server" in line and "core dumped" not in err
    assert len(out_path.read_text()) >= 200
    assert list(home.iterdir()) == []


def test_devices_command_lists_the_servers(servers):
    r = localspec("devices", "--rpc", ",".join(s.endpoint for s in servers), timeout=120)
    assert r.returncode == 0, r.stderr
    rows = {line.split()[0]: line for line in r.stdout.splitlines() if line.startswith("RPC")}
    assert set(rows) == {"RPC0", "RPC1"}, r.stdout
    assert rows["RPC0"].rstrip().endswith(servers[0].endpoint) and rows["RPC1"].rstrip().endswith(servers[1].endpoint)


def test_delay_proxy_adds_the_round_trip_time_and_counts_round_trips():
    """The benchmark's network stand-in: each request/answer pays rtt, and is counted."""
    from localspec.bench.netdelay import DelayProxy

    with socket.socket() as echo:
        echo.bind(("127.0.0.1", 0))
        echo.listen(1)

        def serve():
            conn, _ = echo.accept()
            with conn:
                while data := conn.recv(64):
                    conn.sendall(data)

        threading.Thread(target=serve, daemon=True).start()
        with DelayProxy(f"127.0.0.1:{echo.getsockname()[1]}", rtt_ms=20) as proxy:
            host, port = proxy.endpoint.rsplit(":", 1)
            with socket.create_connection((host, int(port)), timeout=5) as c:
                t = time.perf_counter()
                for i in range(5):
                    c.sendall(b"ping%d" % i)
                    assert c.recv(64) == b"ping%d" % i
                elapsed = time.perf_counter() - t
            assert 0.1 <= elapsed < 2.0
            assert proxy.round_trips == 5
