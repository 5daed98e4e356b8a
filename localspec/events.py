"""Events: the only thing decoding loops hand to the outside world.

Loops never print; the CLI, the TUI, the bench and tests consume these. Every piece of text
the user sees arrives in exactly one of `Accepted.text` or `Written.text`, in order, so a
frontend reconstructs the answer by concatenating those two kinds. `Drafted`, `Rejected`,
`Judged` and `Cut` are for display and analysis only.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Literal

from localspec.decode.drafters import registry

# Who wrote a token the user sees.
#   "draft":      proposed by the draft model and accepted by the verifier / judge
#   "correction": sampled by the target after a rejection (residual distribution)
#   "bonus":      sampled by the target after a fully accepted block
#   "target":     plain target decoding (AR, or PARSE regeneration)
Provenance = Literal["draft", "correction", "bonus", "target"]
# Which proposer wrote a draft (DraftTrie.source): the draft model ("draft"; PARSE's drafted
# answer too) or a lookup that calls no model (the drafter registry's lookups: "ngram", "suffix"). Drafted,
# Accepted and Rejected carry it so a frontend can say who wrote each accepted span; it
# defaults to "draft" so code that builds these events by hand (tests, replays) keeps working.
Source = str


@dataclass(frozen=True)
class TokenLogprob:
    """The target's log-probability of one token, and its `top` most likely alternatives
    as (token, piece, logprob), most likely first (docs/server.md#logprobs).

    The distribution is the target's raw one (log-softmax of its logits, before
    temperature, top-k/p, min-p and any grammar): what a lossless method's answer is
    sampled from, before the sampling settings reshape it. `piece` is the token's bytes in
    the text (a UTF-8 character may be split across tokens). `logprob` is None only for a
    prompt's first token, which nothing predicts."""

    token: int
    piece: bytes
    logprob: float | None
    top: tuple[tuple[int, bytes, float], ...] = ()


@dataclass(frozen=True)
class Drafted:
    """Drafts proposed in one iteration (K drafts of up to L tokens; PARSE: one answer)."""

    drafts: tuple[tuple[int, ...], ...]
    texts: tuple[str, ...]
    source: Source = "draft"


@dataclass(frozen=True)
class Accepted:
    """Draft tokens kept: x[k][:tau]. `text` is what this adds to the visible answer."""

    k: int
    tau: int
    tokens: tuple[int, ...]
    text: str
    source: Source = "draft"
    logprobs: tuple[TokenLogprob, ...] = ()  # one per token, when the config asks (GenConfig.logprobs)


@dataclass(frozen=True)
class Rejected:
    """Draft tokens thrown away after the accepted prefix (shown struck through)."""

    k: int
    tokens: tuple[int, ...]
    text: str
    source: Source = "draft"


@dataclass(frozen=True)
class Written:
    """Tokens written by the target (correction, bonus, AR or PARSE regeneration)."""

    tokens: tuple[int, ...]
    text: str
    kind: Provenance
    # one per token of `tokens` the answer took (not a closing end-of-turn token), when asked
    logprobs: tuple[TokenLogprob, ...] = ()


@dataclass(frozen=True)
class Judged:
    """PARSE: the target's scores for the cut points of a drafted answer.

    cuts[i] is a prefix length in tokens of the drafted answer, cut_chars[i] the same prefix
    length in characters of the drafted text; scores[i] in [0, 1] (higher = more trusted);
    the last cut is always the whole answer.
    """

    judge: str
    cuts: tuple[int, ...]
    cut_chars: tuple[int, ...]
    scores: tuple[float, ...]
    threshold: float


@dataclass(frozen=True)
class Cut:
    """PARSE: the chosen prefix length t* (tokens) of the drafted answer, out of n_draft."""

    t_star: int
    n_draft: int
    char_star: int


@dataclass
class Stats:
    """Running statistics of one generation (a snapshot is emitted after each iteration)."""

    method: str = "ar"
    K: int = 1
    L: int = 0
    prompt_tokens: int = 0
    prompt_evaluated: int = 0  # prompt tokens actually evaluated (the rest came from the KV cache)
    n_tokens: int = 0
    iterations: int = 0
    target_calls: int = 0
    draft_calls: int = 0
    drafted: int = 0  # draft tokens proposed to the target (llama-server's draft_n)
    accepted_lengths: list[int] = field(default_factory=list)
    position_accepts: list[int] = field(default_factory=list)
    position_trials: list[int] = field(default_factory=list)
    draft_seconds: float = 0.0
    verify_seconds: float = 0.0
    overhead_seconds: float = 0.0
    prompt_seconds: float = 0.0
    seconds: float = 0.0
    # waited for the cost model's timing before this turn began: a background step in flight,
    # or a first timing in the foreground (`run`); not in `seconds` nor `prompt_seconds`
    timing_seconds: float = 0.0
    choice_note: str = ""
    ran: str = ""  # what actually ran ("ar", "sd K=1 L<=16", "auto: ar then sd"); set by the loop
    ar_estimate: float = 0.0  # the cost model's AR tok/s on this machine (0 = unknown)
    # where auto's prices came from at its last decision: "" a quiet machine's curves, else
    # which were a busy machine's (contended) or timed far off (stale): CostModel.prices
    prices: str = ""
    # auto: what the cost model predicted at each decision, (speedup over AR, tokens per
    # target pass, seconds per pass); (1.0, 1.0, an AR step) when it chose AR. A bench sets
    # this promise beside what it measured.
    predicted: list[tuple[float, float, float]] = field(default_factory=list)
    # auto: the tokens and seconds the cost model expected of the iterations it ran, each
    # priced before the target verified it (costmodel/forecast.py); [] when nothing was priced
    forecast: list[float] = field(default_factory=list)
    # of `drafted`, per proposer other than the draft model ("ngram", "suffix": no model call;
    # "mtp": the target's own head): (tokens it drafted, tokens the target accepted); the
    # draft model's are the rest
    proposed: dict[str, tuple[int, int]] = field(default_factory=dict)
    # iterations whose trie held a lookup's draft beside the draft model's (a stack: every
    # one of --spec-type X+draft, the ones auto chose to stack)
    stacked: int = 0
    # the turn's constraint (its kind: json_schema, gbnf, ...; "" = none); the tokens the
    # grammar forced are the `grammar` drafter's in `proposed`
    constraint: str = ""

    @property
    def forecast_tok_per_s(self) -> float | None:
        """What the cost model expected of the iterations auto ran (costmodel/forecast.py),
        as tok/s beside the measured `tok_per_s`; None when it priced none."""
        if len(self.forecast) < 2 or self.forecast[1] <= 0.0:
            return None
        return self.forecast[0] / self.forecast[1]

    @property
    def lookup_drafted(self) -> int:
        """Tokens the proposers other than the draft model drafted (lookups, the MTP head)."""
        return sum(d for d, _ in self.proposed.values())

    @property
    def lookup_accepted(self) -> int:
        """... and how many of them the target accepted."""
        return sum(a for _, a in self.proposed.values())

    def by_proposer(self) -> dict[str, tuple[int, int]]:
        """(drafted, accepted) tokens of every proposer, each lookup and the draft model
        ("draft": what the lookups did not draft), zeros included: one shape for `run --json`,
        the TUI's panel and the stats line."""
        names = (*registry.lookups(), *(k for k in self.proposed if not registry.is_lookup(k)))
        out = {k: self.proposed.get(k, (0, 0)) for k in names}
        out["draft"] = (self.drafted - self.lookup_drafted, sum(self.accepted_lengths) - self.lookup_accepted)
        return out

    def record_proposed(self, source: str, drafted: int, accepted: int) -> None:
        """Account a verification of a draft that is not the draft model's."""
        d, a = self.proposed.get(source, (0, 0))
        self.proposed[source] = (d + drafted, a + accepted)

    @property
    def tok_per_s(self) -> float:
        """Generated tokens per second, prompt processing excluded."""
        return self.n_tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def block_efficiency(self) -> float:
        """Tokens emitted per target call (= E[tau] + 1 for block methods; 1 for AR)."""
        return self.n_tokens / self.target_calls if self.target_calls else 0.0

    def histogram(self) -> list[int]:
        """Counts of accepted lengths 0..L."""
        size = max([self.L, *self.accepted_lengths], default=0) + 1
        hist = [0] * size
        for t in self.accepted_lengths:
            hist[t] += 1
        return hist

    def position_acceptance(self) -> list[float]:
        """P(draft position i accepted | reached), i = 0..L-1."""
        return [a / t if t else 0.0 for a, t in zip(self.position_accepts, self.position_trials, strict=True)]

    def record(self, tau: int, L: int) -> None:
        """Account one verification that accepted tau of L draft tokens."""
        self.accepted_lengths.append(tau)
        self.drafted += L
        if len(self.position_trials) < L:
            grow = L - len(self.position_trials)
            self.position_trials += [0] * grow
            self.position_accepts += [0] * grow
        for i in range(min(tau + 1, L)):
            self.position_trials[i] += 1
        for i in range(tau):
            self.position_accepts[i] += 1

    def merged(self, other: Stats) -> Stats:
        """This generation followed by `other` as one (a thinking budget's phases): each field
        by its rule in MERGE, which names every field (tests/test_thinking.py checks)."""
        out = self.copy()
        for f in fields(Stats):
            mine, theirs = getattr(out, f.name), getattr(other, f.name)
            rule = MERGE[f.name]
            if rule == "add":  # counts, seconds; lists concatenate
                setattr(out, f.name, mine + (list(theirs) if isinstance(theirs, list) else theirs))
            elif rule == "per-position":
                n = max(len(mine), len(theirs))
                setattr(out, f.name, [(mine[i] if i < len(mine) else 0) + (theirs[i] if i < len(theirs) else 0)
                                      for i in range(n)])
            elif rule == "join" and theirs not in ("", mine):
                setattr(out, f.name, f"{mine}; {theirs}")
            elif rule == "per-key":  # {name: (count, count)}: element-wise sums per key
                setattr(out, f.name, {k: tuple(x + y for x, y in zip(mine.get(k, (0, 0)), theirs.get(k, (0, 0)),
                                                                    strict=True))
                                      for k in {**mine, **theirs}})
        return out

    def copy(self) -> Stats:
        """A snapshot safe to hand to another thread."""
        s = Stats(**{k: v for k, v in self.__dict__.items()})
        s.accepted_lengths = list(self.accepted_lengths)
        s.position_accepts = list(self.position_accepts)
        s.position_trials = list(self.position_trials)
        s.predicted = list(self.predicted)
        s.forecast = list(self.forecast)
        s.proposed = dict(self.proposed)
        return s

    def to_json(self) -> dict:
        """Fields of `run --json`."""
        return {
            "method": self.method,
            "ran": self.ran or self.method,
            "K": self.K,
            "L": self.L,
            "prompt_tokens": self.prompt_tokens,
            "prompt_evaluated": self.prompt_evaluated,
            "n_tokens": self.n_tokens,
            "iterations": self.iterations,
            "target_calls": self.target_calls,
            "draft_calls": self.draft_calls,
            "block_efficiency": self.block_efficiency,
            "drafted": self.drafted,
            "stacked": self.stacked,
            "constraint": self.constraint or None,
            "forced": self.proposed.get("grammar", (0, 0))[0],
            "accepted_lengths": list(self.accepted_lengths),
            # per proposer: the lookups' drafts (no model call) and the draft model's
            "proposers": {k: {"drafted": d, "accepted": a, "acceptance": a / d if d else None}
                          for k, (d, a) in self.by_proposer().items()},
            "draft_seconds": self.draft_seconds,
            "verify_seconds": self.verify_seconds,
            "overhead_seconds": self.overhead_seconds,
            "prompt_seconds": self.prompt_seconds,
            "seconds": self.seconds,
            "timing_seconds": self.timing_seconds,
            "tok_per_s": self.tok_per_s,
            # auto: [expected tokens, seconds] of the iterations it ran (costmodel/forecast.py)
            "forecast": list(self.forecast) or None,
        }



# How Stats.merged joins two generations of one answer, per field: "first" keeps the first
# generation's (what was asked: method, K, L, the prompt; the cost model's notes), "add"
# sums counts and times and concatenates per-iteration lists, "per-position" adds the
# per-draft-position counts, "join" lists each distinct `ran` once, "per-key" adds the
# per-proposer counts.
MERGE: dict[str, str] = {
    "method": "first", "K": "first", "L": "first", "prompt_tokens": "first", "prompt_evaluated": "add",
    "n_tokens": "add", "iterations": "add", "target_calls": "add", "draft_calls": "add", "drafted": "add",
    "accepted_lengths": "add", "position_accepts": "per-position", "position_trials": "per-position",
    "draft_seconds": "add", "verify_seconds": "add", "overhead_seconds": "add", "prompt_seconds": "add",
    "seconds": "add", "timing_seconds": "add", "choice_note": "first", "ran": "join", "ar_estimate": "first",
    "prices": "first",
    "predicted": "add", "forecast": "per-position", "proposed": "per-key", "stacked": "add", "constraint": "first",
}

@dataclass(frozen=True)
class PromptLogprobs:
    """The target's log-probability of every prompt token given the ones before it
    (GenConfig.prompt_logprobs; the first entry's logprob is None): the first event of
    such a generation, before any generated token. How log-likelihood evaluations score."""

    entries: tuple[TokenLogprob, ...]


@dataclass(frozen=True)
class Progress:
    """A long step before the first token (timing the models on this machine, once):
    frontends show `message` and `fraction` in [0, 1]; nothing is generated yet."""

    message: str
    fraction: float


@dataclass(frozen=True)
class StatsUpdate:
    """A snapshot of Stats after an iteration."""

    stats: Stats


# "limit": a line rule of code completion (decode/lines.py; Done.message names it)
DoneReason = Literal["eog", "max_tokens", "stop", "context_full", "interrupted", "limit"]


@dataclass(frozen=True)
class Done:
    """Generation ended. `text` is the whole visible answer of this turn."""

    reason: DoneReason
    text: str
    stats: Stats
    message: str = ""
    stop_word: str = ""  # reason "stop": which stop string matched (the server's Messages API says it)


Event = Drafted | Accepted | Rejected | Written | Judged | Cut | Progress | StatsUpdate | Done | PromptLogprobs
