"""One resolution step: what was asked (flags, a request) + the model's card -> the settings
a generation runs with.

Why one step: before it, the sampling flags were parsed with a greedy default (while
`--help` promised the model's), overwritten in place once the model loaded, and validated
three times; the batch rules lived in the CLI and the server reached into the CLI for them.
Now every frontend goes down the same three stairs and never climbs back:

1. `Asked` - the user's values, numbers checked, nothing loaded (`check` refuses what the
   models could not run with, before a context exists: llama.cpp aborts on some of it);
2. the session loads (loading.open_session);
3. `resolve(asked, session, target)` -> `Settings`: the model's card fills every sampling
   field the user left open (localspec.sampling_defaults: typed flag > registry set for the
   thinking mode > GGUF metadata > llama.cpp's defaults), the thinking switch becomes the
   template's kwargs, and the final GenConfig is validated once. A server request then
   overrides fields of `Settings.cfg` (server/schema.py); the TUI keeps `Settings.cfg`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from localspec.config import AUTO_MAX_K, AUTO_MAX_L, SPECULATIVE, GenConfig
from localspec.errors import ConfigError
from localspec.sampling_defaults import FIELDS, ResolvedSampling, resolve_for
from localspec.session import Session, SessionOptions

# What `--method auto` may ask of one target batch: the cost model times target calls of up
# to COST_TIMING_TOKENS tokens (after as many context tokens, in one batch), and may choose
# up to config.AUTO_MAX_K drafts of up to AUTO_MAX_L tokens.
COST_TIMING_TOKENS = 64  # max(costmodel.curves.BATCH_SIZES); tests/test_settings.py holds them equal
# The prompt/hybrid PARSE judges append the judge's question (rendered with the target's
# chat template) after each cut, in the same batch: 23-28 tokens for the default phrasing
# on Qwen2.5 and SmolLM2; the exact length is known only once the target is loaded.
JUDGE_QUESTION_TOKENS = 48
MAX_TOKENS = 2**31 - 1  # llama.cpp keeps n_ctx / n_batch in 32-bit integers
MAX_THREADS = 512  # GGML_MAX_N_THREADS


@dataclass
class Asked:
    """What the user asked for, before any model loads.

    `cfg.sampling` holds the typed values over llama.cpp's defaults (what llama.cpp itself
    would run); it is provisional until `resolve`, which lets the model's card fill the
    fields in `typed` that are None."""

    cfg: GenConfig
    typed: dict[str, float | None] = field(default_factory=lambda: dict.fromkeys(FIELDS))
    reasoning: str = "auto"  # the thinking switch: on | off | auto (the template's default)
    budget: int | None = None  # thinking tokens before the close is forced; None: no limit

    @property
    def greedy(self) -> bool | None:
        """Known greedy (True), known sampled (False), or the model's to say (None)."""
        temp = self.typed.get("temp")
        return None if temp is None else temp <= 0.0


@dataclass(frozen=True)
class Settings:
    """The final settings of a generation: every frontend reads these, nothing re-decides."""

    cfg: GenConfig
    sampling: ResolvedSampling  # where each sampling value came from (--explain, the TUI)
    template_kwargs: dict[str, object] | None  # the thinking switch for the chat template
    budget: int | None

    def sampling_line(self) -> str:
        """`--explain`'s line: the sampling in force and where each value came from."""
        return "in force: " + self.sampling.describe()


def resolve(asked: Asked, session: Session, target: str | None) -> Settings:
    """Asked + the loaded target's card -> Settings (the one place sampling is decided)."""
    from localspec.thinking.split import markers_of, thinking_kwargs

    thinking = None if markers_of(session) is None else asked.reasoning != "off"
    rec = resolve_for(session, target, asked.typed, thinking)
    cfg = replace(asked.cfg, sampling=rec.sampling, stop=list(asked.cfg.stop))
    cfg.sampling.validate()  # the card's values (a GGUF may carry any number); the rest was checked in Asked
    kwargs = thinking_kwargs(session, asked.reasoning) or None
    return Settings(cfg, rec, kwargs, asked.budget)


def batch_minimum(cfg: GenConfig, n_seq_max: int, has_draft: bool = True,
                  greedy: bool | None = None) -> tuple[int, str]:
    """(the smallest --batch this config can run with, why), the largest need winning.

    Every context holds n_seq_max sequences and llama.cpp reserves an output row per
    sequence in a buffer of --batch rows; each method then puts more in one target batch.
    Without a draft, auto is plain AR. `greedy` None (the model's card decides later) takes
    the larger need of sampling; default: cfg.sampling's.
    """
    needs = [(n_seq_max, f"llama.cpp reserves one output row per sequence and each context holds {n_seq_max}")]
    K, L, pcfg = cfg.K + cfg.stacked, cfg.L, cfg.parse  # a stack adds the lookup's draft
    spec_finish = cfg.method == "parse" and pcfg.resume == "spec"
    if cfg.method in SPECULATIVE or (spec_finish and not cfg.auto_L):
        needs.append((K * L + 2, f"-K {K} x -L {L} draft tokens + 2 are verified in one target batch"))
    if (cfg.method == "auto" and has_draft) or (spec_finish and cfg.auto_L):
        greedy = cfg.sampling.greedy if greedy is None and cfg.sampling is not None else greedy
        sampled = not greedy or (cfg.draft_temp or 0.0) > 0
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


def check(opts: SessionOptions, asked: Asked, *, has_draft: bool) -> tuple[SessionOptions, list[str]]:
    """Refuse (ConfigError, naming the flag) what the models cannot be run with, before any
    context exists; return the options to open with and notes to print."""
    cfg = asked.cfg
    notes: list[str] = []
    if cfg.needs_draft_model and not has_draft:
        raise ConfigError(f"--method {cfg.method} needs a draft model (--draft / -md), "
                          "or --spec-type ngram (prompt lookup, no model)")
    if cfg.method in SPECULATIVE and cfg.K + cfg.stacked + 1 > opts.n_seq_max:
        raise ConfigError(f"-K/--drafts {cfg.K} is too many: at most {opts.n_seq_max - 1 - cfg.stacked} drafts "
                          f"(each needs its own sequence besides the main one)")
    need, why = batch_minimum(cfg, opts.n_seq_max, has_draft, greedy=asked.greedy)
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
        opts = replace(opts, threads=None)  # llama.cpp's "choose for me": all cores, at most 8
    if cfg.seed is not None and not 0 <= cfg.seed < 2**64:
        raise ConfigError(f"--seed must be in 0..2**64-1 (got {cfg.seed})")
    if any(not s for s in cfg.stop):
        raise ConfigError("--stop '' is empty: it would end every answer before it starts")
    return opts, notes


def typed_of(values: Mapping[str, float | None]) -> dict[str, float | None]:
    """The sampling fields a frontend was given (None: left to the model)."""
    return {f: values.get(f) for f in FIELDS}
