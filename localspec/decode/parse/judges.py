"""PARSE judges: how the target scores a drafted answer and its prefixes from one pass.

- prompt (paper-faithful): a yes/no question rendered with the TARGET's chat template after
  each prefix; score = P(ok-set) / (P(ok-set) + P(not-ok-set)) over single-token variants.
- likelihood: the target's own log-probabilities of the drafted tokens, read from the same
  pass with no suffix copies (a cheaper pass); a segment is scored by its gaps
  log p(argmax) - log p(token).
- hybrid: both from one pass: the verdict's log-odds minus a multiple of the likelihood
  evidence.

All scores are in [0, 1], higher = more trusted, so that one threshold and the rule "cut
before the first score under it" (segment.decide) apply to every judge. Why each choice
was made, with the measured AUROC, is in docs/parse.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from localspec.backend import Model
from localspec.backend.chat import ChatTemplate
from localspec.config import ParseConfig
from localspec.decode.parse.one_pass import Copy, PassResult
from localspec.errors import ConfigError

JUDGES = ("prompt", "likelihood", "hybrid")

YES_WORDS = ("Yes", " Yes", "yes", " yes", "YES")
NO_WORDS = ("No", " No", "no", " no", "NO")
_MARK = "\u2063@@ANSWER@@\u2063"


@dataclass(frozen=True)
class Phrasing:
    """A judge question. ok_word: which answer means "keep this prefix" (bug-finding
    questions invert it)."""

    name: str
    question: str
    ok_word: str = "Yes"


PHRASINGS: dict[str, Phrasing] = {
    p.name: p
    for p in (
        Phrasing("generic", "Is the response above correct so far? Answer Yes or No."),
        Phrasing("code", "Is the code above correct so far, with no bugs? Answer Yes or No."),
        Phrasing("bug", "Does the code above contain a bug? Answer Yes or No.", ok_word="No"),
        Phrasing("tests", "Will the code above pass all the tests of the task? Answer Yes or No."),
        Phrasing(
            "review",
            "You are a strict code reviewer. Does the code above correctly implement the function "
            "described in the task, including edge cases? Answer Yes or No.",
        ),
        Phrasing(
            "fewshot",
            "Answer Yes if the code is correct and No if it has a bug. Examples:\n"
            "def is_even(n): return n % 2 == 1  -> No\n"
            "def add(a, b): return a + b  -> Yes\n"
            "def last(xs): return xs[len(xs)]  -> No\n"
            "Is the code above correct so far? Answer Yes or No.",
        ),
    )
}


def render_suffix(template: ChatTemplate, question: str) -> str:
    """Text that closes the assistant turn, asks `question` as a user, opens a new assistant
    turn, derived from the target's own template (whatever its markers are)."""
    msgs = [{"role": "user", "content": "Q"}, {"role": "assistant", "content": _MARK}, {"role": "user", "content": question}]
    full = template.render(msgs, add_generation_prompt=True)
    at = full.find(_MARK)
    if at < 0:
        raise ConfigError("the target's chat template drops assistant messages; --parse-judge prompt cannot use it")
    return full[at + len(_MARK) :]


def single_token_ids(model: Model, words: Sequence[str]) -> list[int]:
    """Ids of the variants that are one token in this vocabulary (duplicates removed)."""
    ids: list[int] = []
    for w in words:
        t = model.tokenize(w, add_special=False, parse_special=False)
        if len(t) == 1 and t[0] not in ids:
            ids.append(t[0])
    return ids


@dataclass
class VerdictTokens:
    """The ok / not-ok token sets of a phrasing, as one id array (ok ids first)."""

    ids: np.ndarray
    n_ok: int

    def score(self, reduced: np.ndarray) -> float:
        """P(ok-set) / (P(ok-set) + P(not-ok-set)) from the logits of `ids` (normaliser cancels)."""
        ok, bad = reduced[: self.n_ok], reduced[self.n_ok :]
        m = max(float(ok.max()), float(bad.max()))
        a = float(np.exp(ok - m).sum())
        b = float(np.exp(bad - m).sum())
        return a / (a + b)


def verdict_tokens(model: Model, phrasing: Phrasing) -> VerdictTokens:
    yes, no = single_token_ids(model, YES_WORDS), single_token_ids(model, NO_WORDS)
    if not yes or not no:
        raise ConfigError(f"{model.name}: no single-token Yes/No in its vocabulary; use --parse-judge likelihood")
    ok, bad = (yes, no) if phrasing.ok_word == "Yes" else (no, yes)
    return VerdictTokens(np.array(ok + bad, dtype=np.int64), len(ok))


# ---------------------------------------------------------------- likelihood statistics


def segment_stat(gaps: np.ndarray, floor: float, kind: str = "sum") -> float:
    """Evidence that a segment went wrong, from its gaps log p(argmax) - log p(token).

    kind "max": the largest gap. kind "sum": the sum of the gaps above `floor` nats -- a
    single unlikely token is often a harmless synonym (another name, another loop form),
    while a wrong line tends to show several; the floor ignores the small disagreements
    that every passing draft has. Measured in docs/parse.md.
    """
    if gaps.size == 0:
        return 0.0
    if kind == "max":
        return float(gaps.max())
    return float(np.maximum(gaps - floor, 0.0).sum())


def prefix_evidence(gaps: np.ndarray, cuts: Sequence[int], floor: float, kind: str = "sum") -> list[float]:
    """Largest segment statistic among the segments of each prefix (non-decreasing)."""
    out: list[float] = []
    worst = 0.0
    prev = 0
    for c in cuts:
        worst = max(worst, segment_stat(gaps[prev:c], floor, kind))
        out.append(worst)
        prev = c
    return out


def _logit(p: float) -> float:
    p = min(max(p, 1e-6), 1.0 - 1e-6)
    return math.log(p / (1.0 - p))


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x > -700 else 0.0


# ---------------------------------------------------------------- the judge object

# Calibrated on HumanEval 0-39 with the Qwen2.5-Coder 1.5B/0.5B pair (docs/parse.md).
# ParseConfig values that are not None override them (threshold, gamma; and the optional
# attributes phrasing, stat, floor, weight that the bench sets).
JUDGE_DEFAULTS: dict[str, dict] = {
    "likelihood": {"threshold": None, "gamma": 4.0, "phrasing": None, "stat": "sum", "floor": 1.0, "weight": 0.0},
    "prompt": {"threshold": 0.82, "gamma": 0.0, "phrasing": "generic", "stat": "sum", "floor": 1.0, "weight": 0.0},
    "hybrid": {"threshold": 0.8, "gamma": 0.0, "phrasing": "tests", "stat": "sum", "floor": 1.0, "weight": 0.25},
}


def judge_options(cfg: ParseConfig) -> dict:
    """The judge's calibrated defaults, overridden by whatever the config sets."""
    if cfg.judge not in JUDGES:
        raise ConfigError(f"--parse-judge must be one of {', '.join(JUDGES)} (got {cfg.judge!r})")
    opt = dict(JUDGE_DEFAULTS[cfg.judge])
    for k in opt:
        v = getattr(cfg, k, None)
        if v is not None:
            opt[k] = v
    return opt


@dataclass
class Judge:
    """One judge, ready for the pass: which copies to add, and how to read the scores."""

    name: str
    threshold: float
    gamma: float
    stat: str
    floor: float
    weight: float
    suffix: list[int]
    verdict: VerdictTokens | None

    @property
    def uses_copies(self) -> bool:
        return self.name in ("prompt", "hybrid")

    @property
    def reduce_ids(self) -> np.ndarray:
        return self.verdict.ids if self.verdict is not None else np.zeros(0, dtype=np.int64)

    @property
    def copy_len(self) -> int:
        return len(self.suffix) if self.uses_copies else 0

    @property
    def score_threshold(self) -> float:
        """The threshold the scores are compared with (Judged.threshold)."""
        return self.threshold if self.uses_copies else math.exp(-self.gamma)

    def copies(self, cuts: Sequence[int]) -> list[Copy]:
        return [Copy(c, self.suffix) for c in cuts] if self.uses_copies else []

    def scores(self, cuts: Sequence[int], res: PassResult) -> list[float]:
        """Prefix scores in [0, 1], higher = more trusted.

        likelihood: exp(-evidence) with evidence = the worst segment statistic so far
        (non-increasing; valid while evidence <= gamma). prompt: the yes-share of each copy
        (a copy that was not decoded -- two-stage -- counts 1.0). hybrid: sigmoid(logit(yes
        share) - weight * evidence): the verdict, discounted by what the likelihoods saw.
        """
        ev = prefix_evidence(res.answer.gaps, cuts, self.floor, self.stat)
        if not self.uses_copies:
            return [math.exp(-e) for e in ev]
        assert self.verdict is not None
        raw = [self.verdict.score(res.copy_logits[i]) if i in res.copy_logits else 1.0 for i in range(len(cuts))]
        if self.name == "prompt":
            return raw
        return [_sigmoid(_logit(p) - self.weight * e) for p, e in zip(raw, ev, strict=True)]


def make_judge(model: Model, cfg: ParseConfig) -> Judge:
    """Build the configured judge for this target model (suffix rendered from its template)."""
    opt = judge_options(cfg)
    if opt["stat"] not in ("sum", "max"):
        raise ConfigError(f"likelihood statistic must be 'sum' or 'max' (got {opt['stat']!r})")
    common = dict(threshold=float(opt["threshold"] or 0.0), gamma=float(opt["gamma"]), stat=opt["stat"],
                  floor=float(opt["floor"]), weight=float(opt["weight"]))
    if cfg.judge == "likelihood":
        return Judge("likelihood", suffix=[], verdict=None, **common)
    if opt["phrasing"] not in PHRASINGS:
        raise ConfigError(f"unknown judge phrasing {opt['phrasing']!r}; one of {', '.join(PHRASINGS)}")
    ph = PHRASINGS[opt["phrasing"]]
    text = render_suffix(ChatTemplate(model), ph.question)
    suffix = model.tokenize(text, add_special=False, parse_special=True)
    return Judge(cfg.judge, suffix=suffix, verdict=verdict_tokens(model, ph), **common)
