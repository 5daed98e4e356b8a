"""Generation settings shared by every loop and frontend.

One dataclass so the CLI, the TUI and the bench build the same thing, and so validation
(with messages naming the flag) lives in one place.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from localspec.decode.drafters import registry as drafters
from localspec.decode.drafters.registry import canonical as drafter_name  # noqa: F401 - for frontends
from localspec.errors import ConfigError

if TYPE_CHECKING:
    from localspec.constrain.spec import ConstraintSpec


@dataclass(frozen=True)
class Method:
    """What a method is and needs: the one table the CLI's choices, the server schema, the
    TUI's method picker, the runtime's checks, the cost model and the bench read."""

    name: str
    needs_draft: bool  # a draft model (auto without one runs AR)
    lossless: bool  # passes the exact-enumeration tests (tests/test_verify_exact.py)
    verifier: bool  # a verifier over K drafts of L tokens (localspec.verify)
    min_K: int = 1  # the fewest drafts it is defined for
    one_state: bool = True  # runs on a recurrent memory with one draft (-K 1): docs/memory.md
    summary: str = ""


METHOD_TABLE: dict[str, Method] = {m.name: m for m in (
    Method("auto", False, True, False, summary="the cost model's fastest lossless setting, or plain AR"),
    Method("ar", False, True, False, summary="plain decoding"),
    Method("sd", True, True, True, summary="token-level speculative sampling"),
    Method("gbv", True, True, True, summary="block verification (optimal for one draft)"),
    Method("spectr", True, True, True, summary="SpecTr K-SEQ over the draft tree"),
    Method("spectr-gbv", True, False, True, min_K=2, one_state=False,
           summary="SpecTr-GBV as published (not lossless; for reproduction)"),
    Method("mdbv", True, True, True, summary="multi-draft block verification"),
    Method("rrs", True, True, True, summary="recursive rejection, each draft its own q (stacked proposers)"),
    Method("parse", True, False, False, one_state=False, summary="the target judges a drafted answer in one pass"),
)}
METHODS = tuple(METHOD_TABLE)
def one_draft_verifier(greedy: bool) -> str:
    """The lossless verifier of one draft for this sampling: sd at T = 0 (the longest
    greedy match; every rule is that walk there, sd is the cheapest), gbv when sampling
    (block verification: optimal for one draft)."""
    return "sd" if greedy else "gbv"


# what auto may choose when -K / -L are not given: up to AUTO_MAX_K drafts (sampled drafts
# only; 1 when greedy) of up to AUTO_MAX_L tokens (the cost model's candidates, and the
# batch they need: localspec.settings.batch_minimum)
AUTO_MAX_K = 4
AUTO_MAX_L = 16
DRAFT_LOOKAHEAD = 8  # tokens ahead the dynamic draft length prices as one extension (GenConfig.draft_lookahead)
SPECULATIVE = tuple(m.name for m in METHOD_TABLE.values() if m.verifier)  # K x L drafts + a verifier

# who writes the drafts (`--spec-type`, llama.cpp's flag; its names are accepted too): the
# drafter registry (decode/drafters/registry.py) names them, their kinds and aliases


# the most alternatives a log-probability entry lists (OpenAI's top_logprobs limit)
MAX_TOP_LOGPROBS = 20


# The smallest temperature that samples: below it 1/temp times a logit overflows a double
# and the distribution is NaN (use 0, greedy, instead).
MIN_TEMP = 1e-6


@dataclass
class SamplingConfig:
    """The transform applied to target AND draft logits (must match for losslessness)."""

    temp: float = 0.0
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05

    @property
    def greedy(self) -> bool:
        """Temperature 0: the target's argmax (every loop's fast path, and exact for any draft)."""
        return self.temp <= 0.0

    def validate(self) -> None:
        # written as `not ok` so that NaN (which fails every comparison) is refused too
        if not 0.0 <= self.temp < math.inf:
            raise ConfigError(f"--temp must be a number >= 0 (got {self.temp})")
        if 0.0 < self.temp < MIN_TEMP:
            raise ConfigError(f"--temp {self.temp:g} is too small to sample with (the logits overflow "
                              f"below {MIN_TEMP:g}): use 0 for greedy decoding")
        if self.top_k < 0:
            raise ConfigError(f"--top-k must be >= 0, 0 = off (got {self.top_k})")
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"--top-p must be in (0, 1] (got {self.top_p})")
        if not 0.0 <= self.min_p < 1.0:
            raise ConfigError(f"--min-p must be in [0, 1) (got {self.min_p})")


@dataclass
class ParseConfig:
    """PARSE options (see docs/algorithms.md#parse)."""

    judge: str = "likelihood"
    cuts: int = 8
    min_seg: int = 8
    threshold: float | None = None  # None: the judge's calibrated default (decode/parse/judges.py)
    gamma: float | None = None  # None: the judge's calibrated default (decode/parse/judges.py)
    two_stage: bool = False
    resume: str = "iterative"

    def validate(self) -> None:
        if self.cuts < 1:
            raise ConfigError(f"--parse-cuts must be >= 1 (got {self.cuts})")
        if self.min_seg < 1:
            raise ConfigError(f"--parse-min-seg must be >= 1 (got {self.min_seg})")
        if self.threshold is not None and not 0.0 <= self.threshold < math.inf:
            raise ConfigError(f"--parse-threshold must be a number >= 0; judge scores are in "
                              f"[0, 1] (got {self.threshold})")
        if self.gamma is not None and not 0.0 <= self.gamma < math.inf:
            raise ConfigError(f"--parse-gamma must be a number >= 0 (got {self.gamma})")


@dataclass
class GenConfig:
    """Everything one generation needs besides the models and the prompt."""

    method: str = "auto"
    K: int = 1
    L: int = 8
    n_predict: int = 256
    seed: int | None = None
    draft_temp: float | None = None
    stop: list[str] = field(default_factory=list)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    parse: ParseConfig = field(default_factory=ParseConfig)
    dynamic_draft: bool = True
    # how many tokens ahead the dynamic draft length may price as one extension
    # (costmodel/predict.CalibratedStop); 1 = the next token alone, the rule before stop 52
    draft_lookahead: int = DRAFT_LOOKAHEAD
    auto_K: bool = False  # K / L not given by the user: the cost model may choose them
    auto_L: bool = False
    # proposers in the order they are tried each iteration (None: the draft model when there
    # is one; auto adds the lookup where it pays)
    spec_type: tuple[str, ...] | None = None
    ngram_min: int = 2  # shortest history n-gram a lookup matches
    ngram_max: int = 8  # longest (tried first)
    suffix_depth: int = 24  # longest suffix the suffix proposer matches (SuffixDecoding's tree depth)
    suffix_min_prob: float = 0.1  # it drafts a token while its estimated chance stays >= this
    suffix_factor: float = 1.0  # and at most factor x the matched length
    suffix_max_tokens: int = 500_000  # tokens the session's suffix store keeps (oldest documents go)
    # auto: a lookup's continuation evaluated in the draft's first decode (--draft-hint; off by
    # default: measured slower on the 2-core F16 edit run, docs/performance.md#draft-hint)
    draft_hint: bool = False
    # the answer must match this grammar / regex / JSON schema (--grammar, --json-schema, the
    # server's response_format): decode/constrained.py; None: unconstrained
    constraint: ConstraintSpec | None = None
    # the target's log-probability of each emitted token and of its N most likely
    # alternatives (None: off, nothing computed); prompt_logprobs: the same for every prompt
    # token (a full prompt pass with logits at every position), n_predict may then be 0
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    # code completion's line rules (decode/lines.py, llama-server's names): end at a new line
    # indented by fewer than n_indent characters, after max_lines lines, or at a new line
    # once t_max_predict_ms have passed; 0 = off
    n_indent: int = 0
    max_lines: int = 0
    t_max_predict_ms: float = 0.0
    # what the client predicts the answer will mostly be (OpenAI's `prediction`; run's
    # --prediction-file): drafted by decode/drafters/prediction.py; None: none
    prediction: str | None = None

    @property
    def proposers(self) -> tuple[str, ...]:
        """Who drafts, in the order tried (--spec-type): as given, else `auto` uses the
        lookup and the draft model, every other method the draft model."""
        if self.spec_type:
            return self.spec_type
        return ("ngram", "draft") if self.method == "auto" else ("draft",)

    @property
    def parts(self) -> tuple[str, ...]:
        """Every proposer named, in order, stacked ones ("ngram+draft") split into their parts."""
        return tuple(dict.fromkeys(k for t in self.proposers for k in t.split("+")))

    @property
    def kinds(self) -> frozenset[str]:
        """The set of `parts`."""
        return frozenset(self.parts)

    @property
    def stacked(self) -> bool:
        """A lookup and the draft model drafting into ONE trie (`--spec-type ngram+draft`):
        one more draft per iteration than -K, verified by rrs (each draft its own q)."""
        return any("+" in t for t in self.proposers)

    @property
    def needs_draft_model(self) -> bool:
        """Whether this config cannot run without -md (auto never needs one)."""
        return self.method != "auto" and METHOD_TABLE[self.method].needs_draft and "draft" in self.kinds

    def draft_sampling(self) -> SamplingConfig:
        """The draft's transform: the target's, at --draft-temp when given.

        With a greedy target and no --draft-temp, K > 1 drafts are identical greedy drafts
        (measured: a greedy + sampled-alternatives tree gained nothing on the F16 pair and
        changes verification batch shapes, hence batch-size numerics); --draft-temp turns
        the alternatives on.
        """
        return self.sampling if self.draft_temp is None else replace(self.sampling, temp=self.draft_temp)

    def validate(self) -> None:
        """Raise ConfigError naming the flag at fault."""
        if self.method not in METHODS:
            raise ConfigError(f"--method must be one of {', '.join(METHODS)} (got {self.method!r})")
        if self.K < 1:
            raise ConfigError(f"-K/--drafts must be >= 1 (got {self.K})")
        if self.K < METHOD_TABLE[self.method].min_K:  # spectr-gbv
            raise ConfigError(
                "--method spectr-gbv needs -K >= 2: with one draft the published rule is exact only "
                "with its Algorithm 2 correction, which the engine does not run; use --method gbv "
                "(exact, and more tokens per target call)"
            )
        if self.L < 1:
            raise ConfigError(f"-L/--draft-len must be >= 1 (got {self.L})")
        if self.spec_type is not None:
            self.spec_type = drafters.parse_spec_types(self.spec_type)
            if self.stacked and not METHOD_TABLE[self.method].lossless:
                raise ConfigError(f"--spec-type {'+'.join(sorted(self.kinds))} stacks drafts from different "
                                  f"proposers, which only rrs verifies exactly; --method {self.method} cannot")
            lookup = next((t for t in self.spec_type if drafters.one_chain(t)), None)
            if lookup and self.K > 1 and not self.auto_K:
                raise ConfigError(f"--spec-type {lookup} drafts one continuation: use -K 1 (got -K {self.K}), "
                                  f"or stack it beside K model drafts: --spec-type {lookup}+draft")
        if not 1 <= self.ngram_min <= self.ngram_max <= 64:
            raise ConfigError(f"--spec-ngram-min/--spec-ngram-max must satisfy 1 <= min <= max <= 64 "
                              f"(got {self.ngram_min}, {self.ngram_max})")
        if not 2 <= self.suffix_depth <= 64:
            raise ConfigError(f"--spec-suffix-depth must be in 2..64 (got {self.suffix_depth})")
        if not 0.0 <= self.suffix_min_prob <= 1.0:
            raise ConfigError(f"--spec-suffix-min-prob must be in [0, 1] (got {self.suffix_min_prob})")
        if not 0.0 < self.suffix_factor < math.inf:
            raise ConfigError(f"--spec-suffix-factor must be a number > 0 (got {self.suffix_factor})")
        if self.suffix_max_tokens < 1024:
            raise ConfigError(f"--spec-suffix-max-tokens must be >= 1024 (got {self.suffix_max_tokens})")
        for name, value in (("n_indent", self.n_indent), ("max_lines", self.max_lines),
                            ("t_max_predict_ms", self.t_max_predict_ms)):
            if not 0 <= value < math.inf:
                raise ConfigError(f"{name} must be >= 0 (got {value})")
        if self.n_predict < (0 if self.prompt_logprobs is not None else 1):
            raise ConfigError(f"-n/--n-predict must be >= 1 (got {self.n_predict})")
        for name, n in (("logprobs", self.logprobs), ("prompt_logprobs", self.prompt_logprobs)):
            if n is not None and not 0 <= n <= MAX_TOP_LOGPROBS:
                raise ConfigError(f"{name} must be in 0..{MAX_TOP_LOGPROBS} alternatives (got {n})")
        if self.method == "parse" and (self.logprobs is not None or self.prompt_logprobs is not None):
            raise ConfigError("--method parse does not return log-probabilities (the target judges a "
                              "drafted answer, it does not score each token): use another method")
        if self.draft_temp is not None and not 0.0 <= self.draft_temp < math.inf:
            raise ConfigError(f"--draft-temp must be a number >= 0 (got {self.draft_temp})")
        self.sampling.validate()
        self.parse.validate()
