"""Shared argparse flags (llama.cpp-compatible aliases) -> GenConfig / SessionOptions."""

from __future__ import annotations

import argparse

from localspec.config import METHODS, GenConfig, ParseConfig, SamplingConfig, drafter_name
from localspec.errors import ConfigError
from localspec.flags.constrain import add_constraint_args, constraint_of
from localspec.flags.offload import add_offload_args, load_options
from localspec.flags.reasoning import add_reasoning_args
from localspec.flags.rpc import add_rpc_arg
from localspec.flags.text import arg_text
from localspec.sampling_defaults import LLAMA_CPP_DEFAULTS
from localspec.session import SessionOptions
from localspec.settings import Asked, typed_of


def add_model_args(p: argparse.ArgumentParser, *, default_pair: bool) -> None:
    g = p.add_argument_group("models")
    g.add_argument("-m", "--target", "--model", dest="target", default=None,
                   help="target model: registry name (see `localspec models list`) or a .gguf path"
                   + (" (default: the default pair's target)" if default_pair else ""))
    g.add_argument("-md", "--draft", "--model-draft", dest="draft", default=None,
                   help="draft model: registry name or .gguf path (same tokenizer as the target)"
                   + (" (default: the default pair's draft)" if default_pair else ""))
    g.add_argument("--ctx", "-c", type=int, default=4096, help="context size in tokens (default 4096; 0 = the model's training context)")
    g.add_argument("--batch", "-b", type=int, default=512, help="max tokens per llama_decode (default 512; at least 16, and what the method "
                   "puts in one target batch: K x L + 2, 64 for auto)")
    g.add_argument("--threads", "-t", type=int, default=None, help="CPU threads (default and 0: all cores, max 8)")
    g.add_argument("-v", "--verbose", action="store_true", help="show llama.cpp's own logs (as llama.cpp's -v: where the layers went, buffer sizes)")
    g.add_argument("--recalibrate", action="store_true",
                   help="re-time the cost model's curves at every batch size before deciding (they are "
                   "otherwise timed once, quickly, and healed from live timings; see `localspec costs`)")
    g.add_argument("--rs-snapshots", type=int, default=16, metavar="N",
                   help="hybrid/recurrent models (Qwen3.5, Mamba, LFM2...): recurrent-state snapshots per "
                   "sequence (llama.cpp's n_rs_seq) that roll a rejected draft of up to N tokens back in "
                   "place; 0 = a branch copy instead (less memory, one catch-up decode per partly "
                   "accepted draft). Ignored for attention-only models (default 16)")
    add_rpc_arg(g)
    add_offload_args(p)


def add_gen_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("generation")
    g.add_argument("--method", default="auto", choices=METHODS,
                   help="auto (cost model picks, falls back to AR), ar, sd (token-level), gbv (block), "
                   "spectr (multi-draft), spectr-gbv (published; NOT lossless for K>=2), "
                   "mdbv (lossless multi-draft block), parse (lossy: judge whole answers)")
    g.add_argument("--spec-type", default=None, metavar="TYPE[,TYPE]",
                   type=lambda v: tuple(t.strip() for t in v.split(",") if t.strip()),
                   help="who drafts, tried in this order each iteration (llama.cpp's flag): draft (the draft "
                   "model, -md), ngram (a lookup in the prompt and the answer so far: no model call, pays "
                   "on edits and quotes), suffix (the most frequent continuation in everything the session "
                   "saw: every turn, every served request; no model call), mtp (the target's own MTP head: "
                   "Qwen3.5/3.6, GLM-4.5+, DeepSeek-V3, MiMo GGUFs with nextn layers; one draft, -L 3 by "
                   "default), or several: ngram,draft (the first that drafts), ngram+draft (stacked: the "
                   "lookup's draft beside -K model drafts in ONE target pass, verified by rrs). "
                   "Default: the draft model; auto also uses the lookups where the cost model says they "
                   "pay, and with no -md the target's MTP head when it has one, else the lookups alone")
    g.add_argument("--spec-ngram-min", type=int, default=2, metavar="N", help="shortest n-gram a lookup matches")
    g.add_argument("--spec-ngram-max", type=int, default=8, metavar="N",
                   help="longest n-gram a lookup matches (the longest match wins)")
    g.add_argument("--spec-suffix-depth", type=int, default=24, metavar="N",
                   help="suffix: longest suffix of the history it matches")
    g.add_argument("--spec-suffix-min-prob", type=float, default=0.1, metavar="P",
                   help="suffix: draft a token while its estimated chance (from the counts) stays >= P")
    g.add_argument("--spec-suffix-factor", type=float, default=1.0, metavar="F",
                   help="suffix: draft at most F x the matched suffix's length")
    g.add_argument("--spec-suffix-max-tokens", type=int, default=500_000, metavar="N",
                   help="suffix: tokens the session's store keeps (the oldest documents go first)")
    g.add_argument("--draft-hint", action="store_true",
                   help="auto: also evaluate a lookup's continuation in the draft model's first decode "
                        "(the same draft, fewer draft decodes; off: it measured slower on a 2-core CPU)")
    g.add_argument("-K", "--drafts", dest="K", type=int, default=None, help="drafts per iteration (default: auto/1)")
    g.add_argument("-L", "--draft-len", "--spec-draft-n-max", "--draft-max", dest="L", type=int, default=None,
                   help="max draft tokens per iteration (default: auto/8)")
    g.add_argument("-n", "--n-predict", dest="n_predict", type=int, default=256, help="max tokens to generate")
    g.add_argument("--temp", type=float, default=None,
                   help="target temperature; 0 = greedy. Default: the model's recommended sampling (registry "
                   "entry, then the GGUF's general.sampling.* keys), else llama.cpp's T 0.8 / top-k 40 / "
                   "top-p 0.95 / min-p 0.05; --explain says which set is in force")
    g.add_argument("--draft-temp", type=float, default=None,
                   help="draft sampling temperature (default: same as --temp); >0 keeps K>1 useful at T=0")
    g.add_argument("--top-k", type=int, default=None, help="top-k (0 = off; default: the model's, else 40)")
    g.add_argument("--top-p", type=float, default=None, help="top-p (1 = off; default: the model's, else 0.95)")
    g.add_argument("--min-p", type=float, default=None, help="min-p (0 = off; default: the model's, else 0.05)")
    g.add_argument("--seed", type=int, default=None, help="random seed (default: random)")
    g.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    g.add_argument("--no-dynamic-draft", action="store_true", help="auto: always draft L tokens (no calibrated per-token stop rule)")
    add_constraint_args(p)  # --grammar, --grammar-file, -j/--json-schema, --json-schema-file
    pa = p.add_argument_group("PARSE (--method parse)")
    pa.add_argument("--parse-judge", default="likelihood", choices=["prompt", "likelihood", "hybrid"])
    pa.add_argument("--parse-cuts", type=int, default=8, help="max cut points judged per pass")
    pa.add_argument("--parse-min-seg", type=int, default=8, help="min tokens between cut points")
    pa.add_argument("--parse-threshold", type=float, default=None, help="prompt/hybrid judge bar tau (defaults 0.82 / 0.8)")
    pa.add_argument("--parse-gamma", type=float, default=None,
                    help="likelihood judge: a prefix passes while its segment gap sum stays "
                    "under gamma nats (default 4, calibrated on HumanEval 0-39; lower = stricter)")
    pa.add_argument("--parse-two-stage", action="store_true", help="judge the whole answer alone first")
    pa.add_argument("--parse-resume", default="iterative", choices=["iterative", "target", "spec"],
                    help="after a cut: re-draft (iterative), let the target finish alone (target), or "
                    "finish with lossless speculative decoding (spec: PARSE composed with sd/mdbv)")
    add_reasoning_args(p)  # --reasoning, --reasoning-budget (thinking models)


def asked_of(a: argparse.Namespace) -> Asked:
    """The flags as asked (numbers checked, nothing loaded): localspec.settings' first step.

    Sampling flags default to None, "the model's" (as --help says); until the model loads,
    cfg.sampling holds the typed values over llama.cpp's defaults."""
    parse = ParseConfig(judge=a.parse_judge, cuts=a.parse_cuts, min_seg=a.parse_min_seg,
                        two_stage=a.parse_two_stage, resume=a.parse_resume)
    if a.parse_threshold is not None:
        parse.threshold = a.parse_threshold
    if a.parse_gamma is not None:
        parse.gamma = a.parse_gamma
    for flag, value in (("--n-indent", getattr(a, "n_indent", 0)), ("--max-lines", getattr(a, "max_lines", 0))):
        if value is not None and value < 0:  # run's FIM line rules (cli/fim.py)
            raise ConfigError(f"{flag} must be >= 0 (got {value})")
    typed = typed_of(vars(a))
    given = {f: (v if v is not None else LLAMA_CPP_DEFAULTS[f]) for f, v in typed.items()}
    cfg = GenConfig(
        method=a.method,
        K=a.K if a.K is not None else 1,
        L=a.L if a.L is not None else 8,
        n_predict=a.n_predict,
        seed=a.seed,
        draft_temp=a.draft_temp,
        stop=[arg_text(s, f"--stop {s!r}") for s in a.stop],  # argv bytes that are not UTF-8
        sampling=SamplingConfig(temp=given["temp"], top_k=int(given["top_k"]), top_p=given["top_p"],
                                min_p=given["min_p"]),
        parse=parse,
        dynamic_draft=not a.no_dynamic_draft,
        auto_K=a.K is None,
        auto_L=a.L is None,
        spec_type=a.spec_type,
        ngram_min=a.spec_ngram_min,
        ngram_max=a.spec_ngram_max,
        suffix_depth=a.spec_suffix_depth,
        suffix_min_prob=a.spec_suffix_min_prob,
        suffix_factor=a.spec_suffix_factor,
        suffix_max_tokens=a.spec_suffix_max_tokens,
        draft_hint=getattr(a, "draft_hint", False),
        constraint=constraint_of(a),  # compiled once here: a bad grammar is refused before any load
        n_indent=getattr(a, "n_indent", 0) or 0,  # run's FIM line rules (cli/fim.py); serve has none
        max_lines=getattr(a, "max_lines", 0) or 0,
    )
    cfg.validate()
    budget = getattr(a, "reasoning_budget", -1)
    return Asked(cfg, typed, getattr(a, "reasoning", "auto"), None if budget in (None, -1) else budget)


def session_options(a: argparse.Namespace) -> SessionOptions:
    target_load, draft_load = load_options(a)
    return SessionOptions(n_ctx=a.ctx, n_batch=a.batch, threads=a.threads, verbose=a.verbose,
                          rpc=list(getattr(a, "rpc", [])), target_load=target_load, draft_load=draft_load,
                          recalibrate=getattr(a, "recalibrate", False),
                          rs_snapshots=getattr(a, "rs_snapshots", 16),
                          # the head's layers are loaded with the model: when asked for, or
                          # (None) for auto on a target that has one and no -md
                          mtp=mtp_option(a))


def mtp_option(a: argparse.Namespace) -> bool | None:
    """--spec-type naming mtp: True; auto with nothing else named: None (the runtime loads
    the head when the target has one and no draft is given); otherwise False."""
    types = getattr(a, "spec_type", None) or ()
    if any(drafter_name(t) == "mtp" for t in types):
        return True
    return None if getattr(a, "method", "auto") == "auto" and not types else False
