"""`localspec bench agent`'s own parts, without models: the shipped traces, the steps cut from
them, the streamed tool-call assembly (against a stub server that streams what an OpenAI
server streams) and the validity check of each call."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from localspec.bench.agent import TRACES, load_steps, table
from localspec.bench.agent_client import Call, StepResult, check_calls, stream_step


def test_traces_are_humaneval_0_to_99_in_two_fixed_halves() -> None:
    sessions = [json.loads(x) for x in TRACES.read_text().splitlines()]
    assert len(sessions) >= 60
    assert all(s["problem"] < 100 for s in sessions)  # 100-163 are reserved
    halves = {s["half"] for s in sessions}
    assert halves == {"tune", "report"}
    assert all((s["problem"] % 2 == 0) == (s["half"] == "tune") for s in sessions)


def test_steps_are_each_assistant_message_with_the_history_before_it() -> None:
    steps = load_steps(TRACES, "report", 2)
    assert len(steps) == 8 and len({s.session for s in steps}) == 2
    first, write = steps[0], steps[1]
    assert first.messages[-1]["role"] == "user" and first.expected_tool == "read_file"
    assert write.expected_tool == "write_file"
    # the write re-quotes the fixed file: the buggy one is the tool result just before it
    buggy = write.messages[-1]["content"]
    fixed = write.expected_arguments["content"]
    assert write.messages[-1]["role"] == "tool" and buggy != fixed
    assert steps[3].expected_tool is None  # the last step is a text answer
    assert load_steps(TRACES, "tune", 1)[0].session != first.session


def _chunks(calls: list[tuple[str, str]], text: str = "") -> list[dict]:
    out = [{"choices": [{"index": 0, "delta": {"role": "assistant"}}]}]
    if text:
        out.append({"choices": [{"index": 0, "delta": {"content": text}}]})
    for i, (name, args) in enumerate(calls):
        out.append({"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": i, "id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": ""}}]}}]})
        for piece in (args[: len(args) // 2], args[len(args) // 2:]):
            out.append({"choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": i, "function": {"arguments": piece}}]}}]})
    out.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls" if calls else "stop"}]})
    out.append({"choices": [], "usage": {"completion_tokens": 17, "prompt_tokens": 3}})
    return out


@pytest.fixture
def stub():
    """A server streaming whatever `stub.chunks` holds, recording the request bodies."""
    state = {"chunks": [], "bodies": []}

    class H(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's name
            state["bodies"].append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for c in state["chunks"]:
                self.wfile.write(f"data: {json.dumps(c)}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")

        def log_message(self, *a):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    state["port"] = srv.server_address[1]
    yield state
    srv.shutdown()


def test_stream_assembles_calls_and_checks_them(stub) -> None:
    step = load_steps(TRACES, "report", 1)[1]  # the write_file step
    good = json.dumps(step.expected_arguments)
    stub["chunks"] = _chunks([("write_file", good), ("read_file", '{"path": 3}'), ("rm", "{}")])
    r = stream_step(stub["port"], step, 64)
    assert not r.error and r.tokens == 17 and r.finish == "tool_calls" and r.ttft > 0
    body = stub["bodies"][-1]
    assert body["tools"] == step.tools and body["stream"] and body["temperature"] == 0
    check_calls(r)
    assert [c.name for c in r.calls] == ["write_file", "read_file", "rm"]
    assert [c.valid for c in r.calls] == [True, False, False]
    assert "unknown tool" in r.calls[2].why
    assert r.exact and r.called("write_file")


def test_text_instead_of_a_call_is_no_call(stub) -> None:
    step = load_steps(TRACES, "report", 1)[0]
    stub["chunks"] = _chunks([], text='{"name": "read_file"}')
    r = stream_step(stub["port"], step, 64)
    check_calls(r)
    assert r.calls == [] and not r.exact and r.content.startswith("{")


def test_an_unparsable_call_is_invalid_not_an_error() -> None:
    step = load_steps(TRACES, "report", 1)[0]
    r = StepResult(step, calls=[Call("read_file", '{"path": ')])
    check_calls(r)
    assert not r.calls[0].valid and "not JSON" in r.calls[0].why


def test_an_unreachable_server_is_a_recorded_error() -> None:
    step = load_steps(TRACES, "report", 1)[0]
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = stream_step(port, step, 8, timeout=5)
    assert r.error and "Connection" in r.error


def test_table_ratios_to_ar_and_the_best_llama_server() -> None:
    rows = [{"server": "localspec", "skipped": None, "tok_per_s": 30.0, "ttft_p50_s": 0.5, "calls": 4,
             "calls_valid": 4, "steps_with_expected_tool": 3, "steps_expecting_call": 3,
             "steps_exact_arguments": 2, "errors": []},
            {"server": "localspec-ar", "skipped": None, "tok_per_s": 15.0, "ttft_p50_s": 0.5, "calls": 3,
             "calls_valid": 3, "steps_with_expected_tool": 3, "steps_expecting_call": 3,
             "steps_exact_arguments": 2, "errors": []},
            {"server": "llama-server:ngram-mod", "skipped": None, "tok_per_s": 20.0, "ttft_p50_s": 0.4,
             "calls": 0, "calls_valid": 0, "steps_with_expected_tool": 0, "steps_expecting_call": 3,
             "steps_exact_arguments": 0, "errors": []},
            {"server": "llama-server:none", "skipped": "not built", "tok_per_s": 0.0}]
    t = table(rows)
    assert "| localspec | 30.0 | 2.00 | 1.50 |" in t
    assert "skipped: not built" in t
