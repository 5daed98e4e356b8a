"""Ctrl-C at each moment of `localspec run` (issue 43, item 4), in a real subprocess.

Where SIGINT lands is made certain, not hoped for: the child's stderr is a one-page pipe
the test can fill (`Child.block_stderr`), so the child's next write to stderr waits until
the test reads again. With -v that write is llama.cpp's log callback inside a model load or
a free; with Python's -X importtime it is the line of a module being imported. The test
sends SIGINT while the child waits there, then reads everything.
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pipes sized and reopened via /proc")

COUNT = "1, 2, 3, 4, 5,"  # a raw prompt SmolLM2 keeps counting on


class Child:
    """`python [FLAGS] -m localspec.cli ARGS`, its stdout and stderr read by the test."""

    def __init__(self, args: list[str], flags: tuple[str, ...] = ()) -> None:
        self.err_r, err_w = os.pipe()
        fcntl.fcntl(err_w, fcntl.F_SETPIPE_SZ, 4096)  # one page: quick to fill
        self.p = subprocess.Popen([sys.executable, *flags, "-m", "localspec.cli", *args], stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=err_w, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        # the same pipe opened again, non-blocking on our side only (the child's end shares
        # nothing with this open file): filled until it refuses a byte
        self.filler: int | None = os.open(f"/proc/self/fd/{err_w}", os.O_WRONLY | os.O_NONBLOCK)
        os.close(err_w)
        self.out, self.err = b"", b""

    def _pump(self, done: Callable[[], bool], read_err: bool, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        fds = [self.p.stdout.fileno()] + ([self.err_r] if read_err else [])
        while not done():
            assert time.monotonic() < deadline, (self.out[-300:], self.err[-300:])
            for fd in select.select(fds, [], [], 0.2)[0]:
                data = os.read(fd, 1 << 16)
                assert data or self.p.poll() is None or done(), ("the child ended", self.out, self.err[-2000:])
                if fd == self.err_r:
                    self.err += data
                else:
                    self.out += data

    def wait_err(self, marker: bytes) -> None:
        """Read both streams until stderr shows `marker`."""
        self._pump(lambda: marker in self.err, read_err=True)

    def wait_out(self, done: Callable[[bytes], bool], read_err: bool = True) -> None:
        self._pump(lambda: done(self.out), read_err=read_err)

    def block_stderr(self) -> None:
        """Fill the stderr pipe: the child's next write to stderr waits inside its caller."""
        assert self.filler is not None
        for size in (4096, 1):
            try:
                while True:
                    os.write(self.filler, b"\0" * size)
            except BlockingIOError:
                pass

    def interrupt(self) -> None:
        time.sleep(0.2)  # the child is (still) waiting in the write: nothing moves until we read
        self.p.send_signal(signal.SIGINT)

    def finish(self, timeout: float = 120.0) -> tuple[int, str, str]:
        """Read both streams to their end; (exit code, stdout, stderr without the filler)."""
        if self.filler is not None:
            os.close(self.filler)
            self.filler = None
        deadline = time.monotonic() + timeout
        fds = [self.p.stdout.fileno(), self.err_r]
        try:
            while fds:
                assert time.monotonic() < deadline, self.err[-2000:]
                for fd in select.select(fds, [], [], 0.5)[0]:
                    data = os.read(fd, 1 << 16)
                    if not data:
                        fds.remove(fd)
                    elif fd == self.err_r:
                        self.err += data
                    else:
                        self.out += data
            rc = self.p.wait(timeout=max(1.0, deadline - time.monotonic()))
        finally:
            if self.p.poll() is None:
                self.p.kill()
            os.close(self.err_r)
            self.p.stdout.close()
        return rc, self.out.decode("utf-8", "replace"), self.err.replace(b"\0", b"").decode("utf-8", "replace")


def quiet_exit(rc: int, err: str) -> None:
    """Exit 130 with no Python traceback, whether raised or dropped inside a callback."""
    assert rc == 130, err[-3000:]
    assert "Traceback" not in err and "Exception ignored" not in err and "KeyboardInterrupt" not in err, err[-3000:]


def json_line(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def run_args(model, n: int) -> list[str]:
    return ["run", "-m", str(model), "--method", "ar", "--raw", "-p", COUNT, "-n", str(n), "-c", "2048",
            "-t", "1", "--json", "-v"]


def test_ctrl_c_during_the_model_load_stops_with_its_json_line(smollm2_path):
    """It was dropped inside llama.cpp's log callback: the load went on, the run answered
    and exited 0. Now nothing is generated, the --json line says so, exit 130."""
    c = Child(run_args(smollm2_path, 64))
    try:
        c.wait_err(b"llama_model_loader: ")  # inside llama_model_load_from_file, which logs on
        c.block_stderr()
        c.interrupt()
    finally:
        rc, out, err = c.finish()
    quiet_exit(rc, err)
    d = json_line(out)
    assert d["stop_reason"] == "interrupted" and d["n_tokens"] == 0 and d["text"] == ""
    assert err.rstrip().endswith("interrupted")


def test_a_second_ctrl_c_during_the_model_load_aborts_it(smollm2_path):
    """The second press inside the load raises KeyboardInterrupt inside the log callback,
    where ctypes dropped it; logs.py keeps it and the load raises it once llama.cpp
    returns: "interrupted", exit 130, no answer and no --json line."""
    c = Child(run_args(smollm2_path, 64))
    try:
        c.wait_err(b"llama_model_loader: ")
        c.block_stderr()
        c.interrupt()
        time.sleep(0.5)  # two signals at once would count as one
        c.interrupt()
    finally:
        rc, out, err = c.finish()
    quiet_exit(rc, err)
    assert out.strip() == "" and err.rstrip().endswith("interrupted")


@pytest.mark.parametrize("first", [False, True], ids=["one-press", "second-press"])
def test_ctrl_c_while_the_models_are_freed_is_quiet(smollm2_path, first):
    """After the answer (one-press: a whole one; second-press: one the first Ctrl-C ended),
    llama.cpp logs as it frees the contexts; a Ctrl-C there printed a KeyboardInterrupt
    traceback (one-press: and exited 0). Now: exit 130, the --json line kept."""
    c = Child(run_args(smollm2_path, 1500 if first else 24))
    try:
        # the context's last line: nothing more goes to stderr until the free logs
        c.wait_err(b"sched_reserve: reserve took")
        c.block_stderr()
        if first:
            c.wait_out(lambda out: len(out) >= 20, read_err=False)  # it is generating
            c.interrupt()
        c.wait_out(lambda out: out.rstrip().endswith(b"}"), read_err=False)  # the --json line: freeing next
        c.interrupt()
    finally:
        rc, out, err = c.finish()
    quiet_exit(rc, err)
    d = json_line(out)
    assert d["stop_reason"] == ("interrupted" if first else "max_tokens") and d["text"]
    assert "~llama_context" in err  # the free it waited in


@pytest.mark.parametrize("marker", [b"localspec.events", b"localspec.cli.main", b"llama_cpp.llama_cpp"],
                         ids=["importing-the-cli", "building-the-parser", "importing-llama-cpp"])
def test_ctrl_c_during_the_start_up_imports_is_quiet(tmp_path, marker):
    """Python's -X importtime writes a line as each import ends: blocked on one, the child
    is inside the imports of `python -m localspec.cli` (then those of every command's
    parser: the cost-model command's brings llama_cpp). No model is needed: none loads."""
    c = Child(["run", "-m", str(tmp_path / "none.gguf"), "-p", "hi"], flags=("-X", "importtime"))
    try:
        c.wait_err(b" " + marker + b"\n")
        c.block_stderr()
        c.interrupt()
    finally:
        rc, _, err = c.finish()
    quiet_exit(rc, err)


def test_a_ctrl_c_before_a_failed_load_is_the_answer(monkeypatch, tmp_path, capsys):
    """A press while the models load is only counted (the first stops a generation); when the
    load then fails anyway, the user asked to stop first: exit 130, not the load's error.
    (Under a loaded machine the start-up test above can land its SIGINT just there.)"""
    import localspec.loading
    from localspec.cli.main import main
    from localspec.errors import ModelNotFoundError

    def load(*a, **kw):
        if press:
            signal.getsignal(signal.SIGINT)(signal.SIGINT, None)  # the CLI's handler counts it
        raise ModelNotFoundError("model file x.gguf does not exist")

    monkeypatch.setattr(localspec.loading, "open_session", load)
    argv = ["run", "-m", str(tmp_path / "none.gguf"), "-p", "hi"]
    press = True
    assert main(argv) == 130
    assert "interrupted" in capsys.readouterr().err
    press = False
    assert main(argv) == 2
    assert "does not exist" in capsys.readouterr().err
