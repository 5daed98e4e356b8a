"""What the user typed, checked before any model loads: prompt text and numeric flags.

Why here and not in the backend: a bad value that reaches llama.cpp does not fail, it
aborts the process (`--batch 4`: GGML_ASSERT(n_outputs_max <= cparams.n_outputs_max),
exit 134 and a backtrace) or is silently reinterpreted. Every rule below fails with one
line naming the flag (a ConfigError: exit 2), before a context exists.

The text rule (also in `localspec run --help`): prompts are UTF-8. A `-p` argument or a
`-f` file with bytes that are not valid UTF-8 is refused, naming the offset of the first
bad byte; it is never silently replaced, because a replaced byte changes the prompt the
model sees. A UTF-8 byte-order mark at the start of a file is dropped. An empty (or
whitespace-only) prompt is refused too.
"""

from __future__ import annotations

import argparse
import os
import sys

from localspec.config import SPECULATIVE, GenConfig
from localspec.errors import ConfigError
from localspec.session import SessionOptions

# What `--method auto` may ask of one target batch (mirrors localspec/costmodel.py): it
# times target calls of up to COST_TIMING_TOKENS tokens (after as many context tokens, in
# one batch) and may choose up to AUTO_MAX_K drafts (sampled drafts; 1 when greedy) of up
# to AUTO_MAX_L tokens.
COST_TIMING_TOKENS = 64
AUTO_MAX_K = 4
AUTO_MAX_L = 16
# The prompt/hybrid PARSE judges append the judge's question (rendered with the target's
# chat template) after each cut, in the same batch: 23-28 tokens for the default phrasing
# on Qwen2.5 and SmolLM2; the exact length is known only once the target is loaded.
JUDGE_QUESTION_TOKENS = 48
MAX_TOKENS = 2**31 - 1  # llama.cpp keeps n_ctx / n_batch in 32-bit integers
MAX_THREADS = 512  # GGML_MAX_N_THREADS
BOM = "\ufeff"


def _not_utf8(raw: bytes, what: str, e: UnicodeDecodeError) -> ConfigError:
    line = raw.count(b"\n", 0, e.start) + 1
    return ConfigError(
        f"{what} is not UTF-8: byte 0x{raw[e.start]:02x} at byte offset {e.start} (line {line}); "
        "prompts must be UTF-8 (convert it, e.g. `iconv -f latin1 -t utf-8`)"
    )


def decode_utf8(raw: bytes, what: str) -> str:
    """bytes -> str under the prompt rule (strict UTF-8, a leading BOM dropped)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _not_utf8(raw, what, e) from None
    return text[1:] if text.startswith(BOM) else text


def arg_text(value: str, what: str) -> str:
    """A text argument under the prompt rule.

    Python decodes argv with surrogateescape, so bytes that are not UTF-8 arrive as lone
    surrogates (which fail later, deep inside tokenization, as a UnicodeEncodeError); the
    original bytes are recovered with os.fsencode to name the offset.
    """
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        pass
    try:
        raw = os.fsencode(value)
    except UnicodeEncodeError:  # surrogates that did not come from argv bytes
        raise ConfigError(f"{what} contains characters that are not valid Unicode text") from None
    return decode_utf8(raw, what)


def read_prompt(a: argparse.Namespace) -> str:
    """The prompt of `localspec run` (-p TEXT, -f PATH, or -f - for stdin) under the rule."""
    if a.file is not None:
        what = "the prompt on stdin" if a.file == "-" else f"prompt file {a.file}"
        try:
            if a.file == "-":
                raw = sys.stdin.buffer.read()
            else:
                with open(a.file, "rb") as fh:
                    raw = fh.read()
        except OSError as e:
            raise ConfigError(f"cannot read prompt file {a.file}: {e.strerror}") from None
        text = decode_utf8(raw, what)
        if not text.strip():
            raise ConfigError(f"{what} is empty{' (only whitespace)' if text else ''}: nothing to answer")
        return text
    if a.prompt is None:
        raise ConfigError("no prompt: pass -p/--prompt TEXT or -f/--file PATH")
    text = arg_text(a.prompt, "-p/--prompt")
    if not text.strip():
        raise ConfigError(f"empty prompt: -p/--prompt is {'only whitespace' if text else 'empty'}")
    return text


def batch_minimum(cfg: GenConfig, n_seq_max: int, has_draft: bool = True) -> tuple[int, str]:
    """(the smallest --batch this config can run with, why), the largest need winning.

    Every context holds n_seq_max sequences and llama.cpp reserves an output row per
    sequence in a buffer of --batch rows; each method then puts more in one target batch.
    Without a draft, auto is plain AR.
    """
    needs = [(n_seq_max, f"llama.cpp reserves one output row per sequence and each context holds {n_seq_max}")]
    K, L, pcfg = cfg.K, cfg.L, cfg.parse
    spec_finish = cfg.method == "parse" and pcfg.resume == "spec"
    if cfg.method in SPECULATIVE or (spec_finish and not cfg.auto_L):
        needs.append((K * L + 2, f"-K {K} x -L {L} draft tokens + 2 are verified in one target batch"))
    if (cfg.method == "auto" and has_draft) or (spec_finish and cfg.auto_L):
        sampled = not cfg.sampling.greedy or (cfg.draft_temp or 0.0) > 0
        k = K if not cfg.auto_K else (AUTO_MAX_K if sampled else 1)
        lmax = L if not cfg.auto_L else AUTO_MAX_L
        need = max(COST_TIMING_TOKENS, k * lmax + 2)
        needs.append((need, f"the cost model times target batches of up to {COST_TIMING_TOKENS} tokens and "
                      f"may verify -K {k} x -L {lmax} draft tokens + 2 (--method ar needs only {n_seq_max})"))
    if cfg.method == "parse":
        copies = pcfg.judge in ("prompt", "hybrid")
        need = 2 * pcfg.min_seg + 2 + (JUDGE_QUESTION_TOKENS if copies else 0)
        question = f" plus one copy of the judge's question (~{JUDGE_QUESTION_TOKENS} tokens)" if copies else ""
        needs.append((need, f"PARSE judges a drafted answer of at least 2 x --parse-min-seg {pcfg.min_seg} "
                      f"tokens + 2{question} in one target batch"))
    return max(needs, key=lambda n: n[0])


def check_options(opts: SessionOptions, cfg: GenConfig, *, has_draft: bool) -> list[str]:
    """Raise ConfigError for flags the models cannot be run with; return notes to print."""
    notes: list[str] = []
    if cfg.needs_draft_model and not has_draft:
        raise ConfigError(f"--method {cfg.method} needs a draft model (--draft / -md), "
                          "or --spec-type ngram (prompt lookup, no model)")
    if cfg.method in SPECULATIVE and cfg.K + 1 > opts.n_seq_max:
        raise ConfigError(f"-K/--drafts {cfg.K} is too many: at most {opts.n_seq_max - 1} drafts "
                          f"(each needs its own sequence besides the main one)")
    need, why = batch_minimum(cfg, opts.n_seq_max, has_draft)
    method = f"--method {cfg.method}"
    if not 0 <= opts.n_ctx <= MAX_TOKENS:
        raise ConfigError(f"--ctx must be in 0..{MAX_TOKENS}, 0 = the model's training context (got {opts.n_ctx})")
    if not need <= opts.n_batch <= MAX_TOKENS:
        if opts.n_batch > MAX_TOKENS:
            raise ConfigError(f"--batch must be at most {MAX_TOKENS} (got {opts.n_batch})")
        fix = "raise --batch" + (" or lower -K/-L" if "-K" in why and "cost model" not in why else "")
        raise ConfigError(f"--batch {opts.n_batch} is below {need}, the minimum for {method}: {why}; {fix}")
    if 0 < opts.n_ctx < need:
        raise ConfigError(f"--ctx {opts.n_ctx} is below {need}, the minimum for {method}: llama.cpp caps the "
                          f"batch at the context size, and {why}; raise --ctx (0 = the model's training context)")
    if opts.n_ctx == 0:
        notes.append("--ctx 0: each context takes the model's training length (llama.cpp's meaning of 0; "
                     "it can need much more memory than the default 4096)")
    if opts.threads is not None and not 0 <= opts.threads <= MAX_THREADS:
        raise ConfigError(f"-t/--threads must be in 0..{MAX_THREADS}, 0 = automatic (got {opts.threads})")
    if not 0 <= opts.rs_snapshots <= 64:
        raise ConfigError(f"--rs-snapshots must be in 0..64, 0 = branch copies (got {opts.rs_snapshots})")
    if opts.threads == 0:
        opts.threads = None  # llama.cpp's "choose for me": all cores, at most 8
    if cfg.seed is not None and not 0 <= cfg.seed < 2**64:
        raise ConfigError(f"--seed must be in 0..2**64-1 (got {cfg.seed})")
    for i, s in enumerate(cfg.stop):
        cfg.stop[i] = arg_text(s, f"--stop {s!r}")
        if not s:
            raise ConfigError("--stop '' is empty: it would end every answer before it starts")
    return notes
