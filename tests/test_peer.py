"""The llama.cpp peer: output parsers on captured real output, command lines, and one real run.

The captured samples below are verbatim output of the binaries built by
scripts/build_llama_cpp_peer.sh (llama-cpp-python 0.3.36, llama.cpp 0.5.0-dev commit
0c1e570) on SmolLM2-135M-Instruct Q4_1, 2 threads: if a llama.cpp upgrade changes the
format, the real-run test fails and these samples are re-captured.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from localspec.bench import llama_bench, peer
from localspec.bench.llama_bench import parse_llama_bench_json
from localspec.bench.peer import (
    PeerNotBuiltError,
    PeerRunError,
    build_speculative_cmd,
    extract_generated_text,
    parse_speculative_output,
    to_peer_prompt,
)

PROMPT = (
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
    "<|im_end|>\n<|im_start|>user\nWrite a Python function that checks whether a number is "
    "prime.<|im_end|>\n<|im_start|>assistant\n"
)

# llama-speculative-simple -m smol -md smol --spec-type draft-simple -p PROMPT -n 128 -t 2
#   --temp 0 --spec-draft-n-max 8 --spec-draft-n-min 0 --spec-draft-p-min 0.75 --no-escape
CAPTURED_STDERR = """\
0.00.275.624 I cmn          init: llama threadpool init, n_threads = 2
0.00.289.176 I common_speculative_init_result: loading draft model '/tmp/peer_models/SmolLM2-135M-Instruct.Q4_1.gguf'
0.02.275.227 I encoded   42 tokens in    0.161 seconds, speed:  260.798 t/s
0.02.275.228 I decoded  129 tokens in    1.665 seconds, speed:   77.500 t/s
0.02.275.228 I 
0.02.275.228 I n_draft   = 8
0.02.275.228 I n_predict = 129
0.02.275.228 I n_drafted = 98
0.02.275.229 I n_accept  = 98
0.02.275.229 I accept    = 100.000%
0.02.275.229 I 
0.02.275.229 I draft:

0.02.275.268 I 
0.02.275.268 I target:

0.02.275.269 I common_perf_print:    sampling time =       6.28 ms
0.02.275.270 I common_perf_print:    samplers time =       2.75 ms /   129 tokens
0.02.275.271 I common_perf_print:        load time =     135.88 ms
0.02.275.272 I common_perf_print: prompt eval time =     993.54 ms /   164 tokens (    6.06 ms per token,   165.07 tokens per second)
0.02.275.273 I common_perf_print:        eval time =      96.27 ms /     8 runs   (   12.03 ms per token,    83.10 tokens per second)
0.02.275.273 I common_perf_print:       total time =    1986.12 ms /   172 tokens
0.02.275.274 I common_perf_print: unaccounted time =     890.04 ms /  44.8 %      (total - sampling - prompt eval - eval) / (total)
0.02.275.274 I common_perf_print:    graphs reused =          9
"""  # noqa: W291 - the tool prints trailing spaces

ANSWER = (
    "```python\ndef is_prime(n):\n    if n < 2:\n        return False\n"
    "    for i in range(2, int(n**0.5) + 1):\n        if n % i == 0:\n"
    "            return False\n    return True\n```\n\n"
    "This function works by checking divisibility up to the square root of n, which is a "
    "more efficient approach than checking divisibility up to the original number itself.\n\n"
    "Example usage:\n```python\nprint(is_prime(25))  # False\nprint(is_prime(23))  # True\n```"
)
CAPTURED_STDOUT = "\n\n" + PROMPT + ANSWER + "\n\n\n\n"

# llama-bench -m smol -t 2 -p 64 -n 128 -b 64 -ub 64 -r 3 -o json (two of its rows)
CAPTURED_BENCH_JSON = """[
 {"build_commit": "0c1e570", "build_number": 1, "cpu_info": "AMD EPYC", "gpu_info": "", "backends": "CPU", "model_filename": "/tmp/peer_models/SmolLM2-135M-Instruct.Q4_1.gguf", "model_type": "llama 256M Q4_1", "model_size": 96576768, "model_n_params": 134515008, "n_batch": 64, "n_ubatch": 64, "n_threads": 2, "cpu_mask": "0x0", "cpu_strict": false, "poll": 50, "type_k": "f16", "type_v": "f16", "n_gpu_layers": -1, "n_cpu_moe": 0, "split_mode": "layer", "main_gpu": 0, "no_kv_offload": false, "flash_attn": -1, "devices": "auto", "tensor_split": "0.00", "tensor_buft_overrides": "none", "load_mode": "auto", "lazy_mode": "auto", "embeddings": false, "no_op_offload": 0, "no_host": false, "repack": true, "fit_target": 0, "fit_min_ctx": 0, "n_prompt": 64, "n_gen": 0, "n_depth": 0, "test_time": "2026-11-30T04:53:38Z", "avg_ns": 141108638, "stddev_ns": 2559208, "avg_ts": 453.651785, "stddev_ts": 8.314591, "samples_ns": [142599097, 142573229, 138153589], "samples_ts": [448.811, 448.892, 463.253]},
 {"build_commit": "0c1e570", "build_number": 1, "cpu_info": "AMD EPYC", "gpu_info": "", "backends": "CPU", "model_filename": "/tmp/peer_models/SmolLM2-135M-Instruct.Q4_1.gguf", "model_type": "llama 256M Q4_1", "model_size": 96576768, "model_n_params": 134515008, "n_batch": 64, "n_ubatch": 64, "n_threads": 2, "cpu_mask": "0x0", "cpu_strict": false, "poll": 50, "type_k": "f16", "type_v": "f16", "n_gpu_layers": -1, "n_cpu_moe": 0, "split_mode": "layer", "main_gpu": 0, "no_kv_offload": false, "flash_attn": -1, "devices": "auto", "tensor_split": "0.00", "tensor_buft_overrides": "none", "load_mode": "auto", "lazy_mode": "auto", "embeddings": false, "no_op_offload": 0, "no_host": false, "repack": true, "fit_target": 0, "fit_min_ctx": 0, "n_prompt": 0, "n_gen": 128, "n_depth": 0, "test_time": "2026-11-30T04:53:38Z", "avg_ns": 759732272, "stddev_ns": 8587679, "avg_ts": 168.494774, "stddev_ts": 1.906994, "samples_ns": [760342456, 767998586, 750855774], "samples_ts": [168.345, 166.667, 170.472]}
]"""

NOT_BUILT = (
    f"llama.cpp peer not built: run `{peer.BUILD_SCRIPT}` (optional; a few minutes on 2 "
    "cores) to enable the peer tests"
)
needs_peer = pytest.mark.skipif(peer.peer_binaries() is None, reason=NOT_BUILT)


# --------------------------------------------------------------------------- parsers


def test_parse_speculative_output_on_captured_run() -> None:
    nums = parse_speculative_output(CAPTURED_STDERR)
    assert nums["tok_per_s"] == pytest.approx(77.5)
    assert nums["seconds"] == pytest.approx(1.665)
    assert nums["n_predict"] == 129
    assert (nums["n_drafted"], nums["n_accepted"], nums["draft_max"]) == (98, 98, 8)
    assert (nums["prompt_tokens"], nums["prompt_seconds"]) == (42, pytest.approx(0.161))


def test_parse_speculative_output_accepts_stdout_mixed_in() -> None:
    nums = parse_speculative_output(CAPTURED_STDOUT + CAPTURED_STDERR)
    assert nums["n_accepted"] == 98


def test_parse_speculative_output_missing_summary_names_the_problem() -> None:
    crashed = CAPTURED_STDERR.split("0.02.275.227")[0]  # died before the summary
    with pytest.raises(PeerRunError, match="decoded"):
        parse_speculative_output(crashed)
    no_counts = CAPTURED_STDERR.replace("n_accept  = 98", "")
    with pytest.raises(PeerRunError, match="n_accept"):
        parse_speculative_output(no_counts)


def test_extract_generated_text_strips_echo_and_trailer() -> None:
    assert extract_generated_text(CAPTURED_STDOUT, PROMPT) == ANSWER
    # an echo that does not match the prompt (e.g. altered by escape processing) -> None
    assert extract_generated_text(CAPTURED_STDOUT, PROMPT.replace("\n", "\\n")) is None


def test_parse_llama_bench_json_on_captured_run() -> None:
    pp, tg = parse_llama_bench_json(CAPTURED_BENCH_JSON)
    assert (pp.test, pp.n_prompt, pp.n_batch, pp.n_ubatch, pp.n_threads) == ("pp64", 64, 64, 64, 2)
    assert pp.avg_ts == pytest.approx(453.651785)
    assert (tg.test, tg.n_gen) == ("tg128", 128)
    assert tg.avg_ts == pytest.approx(168.494774)
    assert tg.samples_ts == [168.345, 166.667, 170.472]
    assert tg.raw["build_commit"] == "0c1e570"


def test_parse_llama_bench_json_rejects_non_json() -> None:
    with pytest.raises(PeerRunError, match="JSON"):
        parse_llama_bench_json("| model | size |\n")


# --------------------------------------------------------------------------- command lines


def test_speculative_cmd_is_fair_and_verbatim() -> None:
    prompt = 'say "\\n"\n'  # backslash and trailing newline must reach the tool unchanged
    cmd = build_speculative_cmd(
        "/bin/spec", Path("t.gguf"), Path("d.gguf"), prompt, n_predict=128, threads=2,
        draft_max=8, draft_min=0, p_min=0.75,
    )  # fmt: skip
    assert cmd[cmd.index("-p") + 1] == prompt  # one argv element, no shell quoting involved
    assert "--no-escape" in cmd  # llama.cpp unescapes \n in prompts by default
    assert cmd[cmd.index("--spec-type") + 1] == "draft-simple"
    for flag in ("-t", "-tb", "-td", "-tbd"):
        assert cmd[cmd.index(flag) + 1] == "2"
    assert cmd[cmd.index("--spec-draft-n-max") + 1] == "8"
    assert cmd[cmd.index("--spec-draft-p-min") + 1] == "0.75"
    assert cmd[cmd.index("--temp") + 1] == "0.0"


def test_to_peer_prompt_avoids_double_bos() -> None:
    llama3 = "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi"
    assert to_peer_prompt(llama3, add_bos=True, bos_text="<|begin_of_text|>") == llama3[17:]
    # model that does not add BOS (Qwen, SmolLM2): text untouched even if it starts with it
    assert to_peer_prompt(PROMPT, add_bos=False, bos_text="<|im_start|>") == PROMPT


# --------------------------------------------------------------------------- missing peer


def test_missing_binaries_give_none_and_an_error_naming_the_script(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOCALSPEC_PEER_DIR", str(tmp_path))
    assert peer.peer_binaries() is None
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    with pytest.raises(PeerNotBuiltError, match="build_llama_cpp_peer.sh"):
        peer.run_speculative_simple(model, model, "hi", 8, 2, 4, 0, 0.0)
    with pytest.raises(PeerNotBuiltError, match="build_llama_cpp_peer.sh"):
        llama_bench.run_llama_bench(model, 2)


def test_peer_dir_follows_localspec_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOCALSPEC_PEER_DIR", raising=False)
    monkeypatch.setenv("LOCALSPEC_HOME", str(tmp_path))
    assert peer.peer_dir("9.9.9") == tmp_path / "peer" / "9.9.9" / "bin"


# --------------------------------------------------------------------------- real binaries


@needs_peer
def test_real_speculative_simple_on_smollm2(smollm2_path: Path) -> None:
    """Same prompt tokens as localspec, summary parsed, answer echo found (prompt unaltered)."""
    from localspec.backend.chat import ChatTemplate
    from localspec.backend.model import Model

    model = Model(smollm2_path)
    try:
        tpl = ChatTemplate(model)
        user = 'Write a Python function that splits a string on "\\n" and counts the lines.'
        text = tpl.render([{"role": "user", "content": user}])
        ours = model.tokenize(text, add_special=False)  # SmolLM2 adds no BOS
        assert not model.add_bos
    finally:
        model.close()
    prompt = to_peer_prompt(text, add_bos=False, bos_text=tpl.bos_text)
    threads = min(2, os.cpu_count() or 1)
    r = peer.run_speculative_simple(smollm2_path, smollm2_path, prompt, 32, threads, 8, 0, 0.75)
    assert r.prompt_tokens == len(ours)
    assert r.tok_per_s > 0 and r.seconds > 0
    assert r.n_predict >= 1 and r.n_drafted >= r.n_accepted >= 0
    # target == draft at T = 0: the draft is used and (nearly) always right; a short answer
    # would be dominated by end-of-answer effects, so this prompt gets a long one
    assert r.n_drafted > 0 and r.acceptance >= 0.8
    assert r.text  # the echo matched: the prompt reached the tool byte for byte
    assert r.command.startswith(str(peer.peer_dir()))


@needs_peer
def test_real_llama_bench_on_smollm2(smollm2_path: Path) -> None:
    rows = llama_bench.run_llama_bench(smollm2_path, 2, n_prompt=(8,), n_gen=(8,), repetitions=1)
    assert [r.test for r in rows] == ["pp8", "tg8"]
    assert all(r.avg_ts > 0 and r.n_threads == 2 for r in rows)


@needs_peer
@pytest.mark.parametrize("arch", ["qwen35", "mamba2"])
def test_peer_on_a_recurrent_pair_writes_our_greedy_text(tiny, arch: str) -> None:
    """llama.cpp's own loop on the same tiny hybrid (qwen35: it uses checkpoints) and
    recurrent (mamba2) pairs writes the text localspec's sd writes (and AR's), so the
    rollback paths agree with an independent implementation. The peer may run past -n by a
    draft; its stdout is read in text mode (\\r\\n arrives as \\n)."""
    from localspec.config import GenConfig, SamplingConfig
    from tests.support.helpers import session

    prompt = "Write a story about a robot who learns to paint."
    t, d = tiny[arch], tiny[arch + "-draft"]
    r = peer.run_speculative_simple(t, d, prompt, 60, 2, 5, 0, 0.0)
    sess = session(t, d)
    cfg = GenConfig(method="sd", L=5, n_predict=60, sampling=SamplingConfig(temp=0.0), dynamic_draft=False)
    ours = list(sess.generate(prompt, cfg))[-1].text
    ar = list(sess.generate(prompt, GenConfig(method="ar", n_predict=60, sampling=SamplingConfig(temp=0.0))))[-1]
    assert ours == ar.text and r.n_drafted > 0
    assert r.text is not None and r.text.startswith(ours.replace("\r\n", "\n").replace("\r", "\n"))


def test_a_draftless_peer_gets_no_draft_model() -> None:
    cmd = build_speculative_cmd("llama-speculative-simple", Path("t.gguf"), Path("d.gguf"), "p", n_predict=8,
                                threads=2, draft_max=16, draft_min=0, p_min=0.0, spec_type="ngram-simple")
    assert "-md" not in cmd and cmd[cmd.index("--spec-type") + 1] == "ngram-simple"
    chained = build_speculative_cmd("x", Path("t.gguf"), Path("d.gguf"), "p", n_predict=8, threads=2,
                                    draft_max=16, draft_min=0, p_min=0.0, spec_type="draft-simple,ngram-mod")
    assert chained[chained.index("-md") + 1] == "d.gguf"


def test_none_is_llama_cpps_plain_loop_through_the_same_tool() -> None:
    """`none` cannot be asked of llama-speculative-simple (it fails to initialise), so it runs
    ngram-simple with an n-gram no prompt of the bench can match: the same loop, no drafts."""
    cmd = build_speculative_cmd("x", Path("t.gguf"), Path("d.gguf"), "p", n_predict=8, threads=2,
                                draft_max=16, draft_min=0, p_min=0.0, spec_type=peer.PLAIN)
    assert "-md" not in cmd and cmd[cmd.index("--spec-type") + 1] == "ngram-simple"
    assert int(cmd[cmd.index("--spec-ngram-simple-size-n") + 1]) + int(
        cmd[cmd.index("--spec-ngram-simple-size-m") + 1]) + 1 == peer.PLAIN_MAX_TOKENS


@needs_peer
def test_real_plain_loop_drafts_nothing_even_on_a_repetitive_prompt(smollm2_path: Path) -> None:
    """A prompt that repeats itself (where a short n-gram drafts at once) gets no draft from
    `none`; the run is timed like every other peer run."""
    threads = min(2, os.cpu_count() or 1)
    text = "one two three four five six seven eight nine ten " * 12
    r = peer.run_speculative_simple(smollm2_path, smollm2_path, text, 48, threads, 16, 0, 0.0, spec_type=peer.PLAIN)
    assert r.n_drafted == 0 and r.n_predict >= 1 and r.tok_per_s > 0
    short = peer.run_speculative_simple(smollm2_path, smollm2_path, text, 48, threads, 16, 0, 0.0,
                                        spec_type="ngram-simple", extra_args=[
                                            "--spec-ngram-simple-size-n", "2", "--spec-ngram-simple-size-m", "4"])
    assert short.n_drafted > 0  # the same tool and prompt with a 2-gram: drafts


@needs_peer
def test_real_peer_takes_a_prompt_longer_than_its_default_batch(smollm2_path: Path) -> None:
    """llama-speculative-simple decodes its prompt as one batch: a 2269-token edit (a long
    file re-quoted) failed at its default -b 2048, and the bench lost every peer column."""
    threads = min(2, os.cpu_count() or 1)
    text = "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(130))  # ~2200 tokens
    r = peer.run_speculative_simple(smollm2_path, smollm2_path, text, 8, threads, 4, 0, 0.0, spec_type=peer.PLAIN)
    assert r.prompt_tokens > 2048 and r.n_predict >= 1
