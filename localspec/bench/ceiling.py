"""`localspec bench ceiling`: the most prompt lookups could give, before building any more of them.

A lookup draft costs no model call, but verifying it costs a target decode of 1 + L tokens.
How much it can pay is bounded by two things measured here, not guessed: how much of the
target's own greedy answer is a copy of text it already has (the prompt and what it wrote so
far), and the target's batch curve: decodes of n tokens with every row's logits, timed as the
cost model times them (`--curve engine`, the default). llama-bench's pp (`--curve llama-bench`)
reads one row's logits and so prices a 16-token verification ~20-45 % low on the Q4 target here:
a bound on its curve is one no engine reaches (stop 51 measured both). The
replay drafts with a perfect gate -- every drafted token is right, a lookup runs only where it
is -- so its speedup over AR is an upper bound for any gate on that proposer:

- `latest`: the `ngram` proposer's draft (decode/drafters/lookup.NgramIndex, through tools.ngram_index: the latest earlier
  occurrence of the longest matched tail), cut to its right prefix;
- `any`: every earlier occurrence of the tail at once, the longest right one kept (a
  zero-cost tree of all candidates: a bound for suffix trees and SuffixDecoding's tree mode).

With `-md` the draft model joins (mixed_replay): its greedy agreement with the answer, read
off one teacher-forced decode (decode/agreement.py), and its 1-token step bound what any
schedule of lookups, draft-model blocks and plain steps could give, chosen by an oracle;
and a second row bounds the draft model alone under a rule that stops on the draft's
confidence, as a live one must (bench/foresight.py): its share of the oracle is what
foresight, which no policy has, is worth.

When the bound is below a goal, no lookup gate, length rule, tree or chain reaches that goal
on this machine; only a cheaper batch curve (a GPU, an F16 target), a cheaper or better
draft, or longer copies can.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Container, Sequence

from localspec import tools
from localspec.bench.common import HALVES, load_prompts, machine_info, median, write_json
from localspec.bench.foresight import best_blind
from localspec.config import GenConfig
from localspec.costmodel.curves import CostCurve
from localspec.costmodel.priors import right_prefix

CostFn = Callable[[int], float]
LABELS = {"draft": "draft model alone", "draft-blind": "draft model alone, stopped on its confidence (no foresight)"}
SIZES = (1, 2, 4, 8, 16, 32, 64)


def curve_from_points(points: dict[int, float]) -> CostCurve:
    """The cost model's own curve over {n: seconds} (interpolated; proportional past the
    last size, as auto prices it)."""
    sizes = sorted(points)
    return CostCurve(sizes, [points[n] for n in sizes])


def _right(draft: Sequence[int], rest: Sequence[int], cap: int) -> int:
    """How many leading tokens of `draft` (at most cap) the answer goes on with."""
    return right_prefix(draft[:cap], rest)


def _any_right(history: list[int], rest: list[int], n_min: int, cap: int) -> int:
    """Longest right continuation over every earlier occurrence of the last n_min tokens."""
    tail = history[-n_min:]
    return max((_right(history[s + 1 :], rest, cap) for s in range(n_min - 1, len(history) - 1)
                if history[s - n_min + 1 : s + 1] == tail), default=0)


def lookup_rights(prompt: list[int], gen: list[int], l_max: int, n_min: int = GenConfig.ngram_min,
                  n_max: int = GenConfig.ngram_max, mode: str = "latest",
                  barrier: Container[int] = frozenset()) -> list[int]:
    """rights[i]: how many tokens of the lookup's draft at answer position i (history = prompt
    + gen[:i]) the answer goes on with, at most l_max (rights[0] is 0: the prompt's decode).

    A draft of fewer tokens is a prefix of this one (the same occurrence, cut), so the rights
    for a shorter l_max are these capped: compute them once at the longest length."""
    index = tools.ngram_index(n_min, n_max, barrier)  # the session's lookup, same defaults
    rights = [0] if gen else []
    for i in range(1, len(gen)):
        history, rest = prompt + gen[:i], gen[i:]
        if mode == "any":
            rights.append(_any_right(history, rest, n_min, l_max))
        else:
            index.extend(history)
            rights.append(_right(index.continuation(l_max)[0], rest, l_max))
    return rights


def with_forced(rights: list[int], forced: list[int] | None) -> list[int]:
    """Lookup rights with a grammar's forced runs added, as the engine drafts them: the
    forced tokens where the grammar forces some (the `grammar` drafter goes first), else
    the lookup's right part with the tokens forced after it appended (constrained.fit)."""
    if not forced:
        return rights
    n = len(rights)
    out = []
    for i, r in enumerate(rights):
        after = forced[i + r] if r and i + r < n else 0
        out.append(max(forced[i], r + after))
    return out


def _forced_share(runs: list[int]) -> float:
    """Share of an answer's tokens inside a forced run (drafting each run from its start)."""
    n, i, covered = len(runs), 0, 0
    while i < n:
        if runs[i]:
            covered += runs[i]
            i += runs[i]
        else:
            i += 1
    return covered / max(n, 1)


def replay_rights(rights: Sequence[int], cost: CostFn, l_max: int) -> tuple[float, float]:
    """(speedup over AR, tokens per target decode) of perfect-gated lookups with these rights.

    The first token comes from the prompt's decode in both AR and the replay; every later
    decode carries the last token plus the right part of the draft (none where there is none).
    """
    n = len(rights)
    if n < 2:
        return 1.0, 1.0
    i, spent, decodes = 1, cost(1), 1
    while i < n:
        right = min(rights[i], l_max, n - 1 - i)  # the decode's own token ends the answer
        spent += cost(1 + right)
        i += right + 1
        decodes += 1
    return n * cost(1) / spent, n / decodes


def replay(prompt: list[int], gen: list[int], cost: CostFn, l_max: int, n_min: int = GenConfig.ngram_min,
           n_max: int = GenConfig.ngram_max, mode: str = "latest") -> tuple[float, float]:
    """(speedup over AR, tokens per target decode) of perfect-gated lookups on `gen`."""
    return replay_rights(lookup_rights(prompt, gen, l_max, n_min, n_max, mode), cost, l_max)


def agreement_runs(agree: Sequence[bool]) -> list[int]:
    """runs[i]: how many answer tokens from position i on a greedy draft gets right in a row."""
    runs = [0] * (len(agree) + 1)
    for i in range(len(agree) - 1, -1, -1):
        runs[i] = runs[i + 1] + 1 if agree[i] else 0
    return runs[:-1]


def mixed_replay(rights: Sequence[int], runs: Sequence[int], cost: CostFn, draft_step: float,
                 l_max: int) -> tuple[float, float, float]:
    """(speedup over AR, tokens per target decode, share of the answer drafted by the model)
    of the best schedule a perfect gate could run with both proposers on one answer.

    At each position it may decode one token, verify a right lookup prefix (free to draft),
    or verify a right prefix of the greedy draft model's tokens (one draft step each, at the
    draft's 1-token cost: a lower bound, its first decode carries the pending token too); a
    dynamic program over positions finds the cheapest schedule. A stack is never better
    than the better of its two drafts alone with an oracle, so none is modelled. With the
    draft model's measured agreement and the lookup's own drafts this bounds any gate,
    length rule or chain over `ngram` + `draft` on this answer and batch curve."""
    n = len(rights)
    if n < 2:
        return 1.0, 1.0, 0.0
    best = [0.0] * (n + 1)
    choice: list[tuple[int, bool]] = [(0, False)] * (n + 1)
    for i in range(n - 1, 0, -1):
        top = n - 1 - i  # the decode's own token ends the answer
        best[i], choice[i] = cost(1) + best[i + 1], (0, False)
        for m in range(1, min(rights[i], l_max, top) + 1):
            c = cost(1 + m) + best[i + m + 1]
            if c < best[i]:
                best[i], choice[i] = c, (m, False)
        for m in range(1, min(runs[i], l_max, top) + 1):
            c = m * draft_step + cost(1 + m) + best[i + m + 1]
            if c < best[i]:
                best[i], choice[i] = c, (m, True)
    i, decodes, by_model = 1, 1, 0
    while i < n:
        m, model = choice[i]
        by_model += m if model else 0
        i += m + 1
        decodes += 1
    return n * cost(1) / (cost(1) + best[1]), n / decodes, by_model / n


def measured_curve(model: str, threads: int, sizes: Sequence[int] = SIZES) -> tuple[CostFn, dict[int, float]]:
    """A model's batch curve from llama-bench (pp at `sizes`), as seconds per batch."""
    from localspec.bench import llama_bench
    from localspec.models import resolve_model

    rows = llama_bench.run_llama_bench(resolve_model(model), threads, n_prompt=sizes, n_gen=(), repetitions=3)
    points = {r.n_prompt: r.n_prompt / r.avg_ts for r in rows if r.n_prompt}
    return curve_from_points(points), points


class Answers(list):
    """greedy_answers' rows, with what replaying them needs from the model: the tokens its
    lookups stop before (tools.lookup_barrier) and each constrained answer's forced runs
    (tools.forced_runs) by prompt id."""

    def __init__(self, rows: Sequence[tuple[str, list[int], list[int]]] = ()) -> None:
        super().__init__(rows)
        self.barrier: Container[int] = frozenset()
        self.forced: dict[str, list[int]] = {}


def greedy_answers(model: str, kinds: list[str] | None, n_predict: int, threads: int,
                   half: str | None = None, limit: int | None = None) -> Answers:
    """(prompt id, prompt tokens, the target's greedy answer tokens) per bench prompt (of
    the split sets' `half` when given, the first `limit`), each under its prompt's schema
    where it has one (the structured set): the answer `bench speed` measures."""
    from localspec.bench.runner import session_prompt
    from localspec.config import GenConfig
    from localspec.loading import open_session
    from localspec.session import SessionOptions

    sess = open_session(model, None, SessionOptions(threads=threads))
    out = Answers()
    try:
        out.barrier = tools.lookup_barrier(sess)
        for p in load_prompts(None, kinds, limit, half):
            sp = session_prompt(p)
            prompt = sess.tokenize(sp if isinstance(sp, str) else sess.render(sp))
            gen = answer_tokens(sess, sp, GenConfig(method="ar", n_predict=n_predict, constraint=p.constraint))
            out.append((p.id, prompt, gen))
            if p.constraint is not None:
                out.forced[p.id] = tools.forced_runs(sess, p.constraint, gen)
            print(f"  {p.id}: {len(prompt)} prompt + {len(gen)} answer tokens", file=sys.stderr)
    finally:
        sess.close()
    return out


def answer_tokens(sess, prompt, cfg) -> list[int]:
    """The tokens the target writes for `prompt` under `cfg` (an `ar` config: its Written events)."""
    from localspec.events import Written

    return [t for ev in sess.generate(prompt, cfg) if isinstance(ev, Written) for t in ev.tokens]


def parse_curve(spec: str) -> dict[int, float]:
    """`1:28,8:127,16:148` (tokens: milliseconds per batch, as `--explain` prints them) as
    {n: seconds}; a one-line ConfigError for anything else."""
    from localspec.errors import ConfigError

    points: dict[int, float] = {}
    try:
        for part in spec.split(","):
            n, ms = part.split(":")
            points[int(n)] = float(ms) / 1e3
    except ValueError:
        raise ConfigError(f"--curve wants tokens:ms pairs such as 1:28,16:148 (got {spec!r})") from None
    if 1 not in points or any(n < 1 or t <= 0 for n, t in points.items()):
        raise ConfigError(f"--curve needs a 1-token point and positive sizes and times (got {spec!r})")
    return points


def engine_curve(model: str, threads: int, sizes: Sequence[int] = SIZES) -> tuple[CostFn, dict[int, float]]:
    """A model's verification curve: decodes with every row's logits, timed as the cost
    model times them (tools.verify_curve). Dearer than llama-bench's pp at the same size
    (pp reads one row's logits; a verification reads every row through the output layer,
    ~15 % of a 1.5B model's work per row), so the bound it gives is the one auto can reach."""
    from localspec.models import resolve_model

    points = tools.verify_curve(resolve_model(model), threads, sizes)
    return curve_from_points(points), points


CURVE_SOURCES = {"engine": "every row's logits, as a verification", "llama-bench": "llama-bench pp"}


def main(a: argparse.Namespace) -> int:
    if a.curve in CURVE_SOURCES:
        cost, points = (engine_curve if a.curve == "engine" else measured_curve)(a.model, a.threads)
        source = CURVE_SOURCES[a.curve]
    else:
        points = parse_curve(a.curve)
        cost = curve_from_points(points)
        source = "--curve"
    answers = greedy_answers(a.model, a.kinds, a.n_predict, a.threads, a.half, a.limit)
    forced = answers.forced
    print(f"batch curve ({source}, ms): " + ", ".join(f"{n}: {1e3 * t:.0f}" for n, t in sorted(points.items())))
    # every length's rights are the longest one's, capped (lookup_rights): one pass per mode
    longest = max(a.lengths, default=0)
    rights = {mode: [with_forced(lookup_rights(pr, g, longest, a.n_min, a.n_max, mode, answers.barrier),
                                 forced.get(pid))
                     for pid, pr, g in answers]
              for mode in ("latest", "any")}
    if forced:
        share = median([_forced_share(runs) for runs in forced.values()])
        print(f"the grammar forces {100 * share:.0f} % of a constrained answer's tokens (median); "
              "the lookup rows draft them too", file=sys.stderr)
    rows = [_row(a, mode, l_max, answers, [replay_rights(r, cost, l_max) for r in rights[mode]])
            for mode in rights for l_max in a.lengths]
    draft_s = None
    if a.draft:
        draft_s, mixed = _draft_rows(a, answers, rights, cost)
        rows += mixed
    print("| lookup | max L | ceiling vs AR (median) | tokens per decode | per prompt |")
    print("|---|---|---|---|---|")
    for r in rows:
        per = " ".join(f"{s:.2f}" for s in r["per_prompt"].values())
        shared = f", {100 * r['model_share']:.0f} % by the model" if "model_share" in r else ""
        label = LABELS.get(r["mode"]) or f"{r['mode']} (n {r['n_min']}..{r['n_max']})"
        print(f"| {label} | {r['l_max']} | {r['median_speedup']:.2f}× | "
              f"{r['median_tokens_per_decode']:.2f}{shared} | {per} |")
    oracle = {r["l_max"]: r["median_speedup"] for r in rows if r["mode"] == "draft"}
    for r in rows:
        if r["mode"] == "draft-blind" and oracle.get(r["l_max"]):
            r["share_of_oracle"] = r["median_speedup"] / oracle[r["l_max"]]
            print(f"L <= {r['l_max']}: the best rule without foresight reaches {r['share_of_oracle']:.0%} of the "
                  "draft model's oracle (the rest is knowing where a draft goes wrong)")
    if a.out:
        write_json(a.out, {"machine": machine_info(a.threads), "model": a.model, "curve_s": points, "curve_source": source,
                           "draft": a.draft, "draft_step_s": draft_s, "rows": rows})
        print(f"wrote {a.out}", file=sys.stderr)
    return 0


def _row(a: argparse.Namespace, mode: str, l_max: int, answers: list[tuple[str, list[int], list[int]]],
         per: list[tuple[float, ...]]) -> dict:
    """One table row from per-prompt (speedup, tokens per decode[, share by the model])."""
    row = {"mode": mode, "l_max": l_max, "n_min": a.n_min, "n_max": a.n_max,
           "median_speedup": median([p[0] for p in per]),
           "median_tokens_per_decode": median([p[1] for p in per]),
           "per_prompt": {pid: p[0] for (pid, _, _), p in zip(answers, per, strict=True)}}
    if per and len(per[0]) > 2:
        row["model_share"] = median([p[2] for p in per])
    return row


def _draft_rows(a: argparse.Namespace, answers: list[tuple[str, list[int], list[int]]],
                rights: dict[str, list[list[int]]], cost: CostFn) -> tuple[float, list[dict]]:
    """The perfect-gate rows with the draft model beside the lookups (mixed_replay)."""
    from localspec.models import resolve_model

    if a.draft_ms is not None:
        step = a.draft_ms / 1e3
    elif a.curve == "llama-bench":  # only its 1-token step is priced
        step = measured_curve(a.draft, a.threads, sizes=(1,))[1][1]
    else:  # its 1-token step with logits, as a draft step pays
        step = engine_curve(a.draft, a.threads, sizes=(1,))[1][1]
    calib = tools.draft_calibration(resolve_model(a.draft), [(pr, g) for _, pr, g in answers], a.threads)
    agree = [[ok for ok, _ in x] for x in calib]
    print(f"draft step: {1e3 * step:.0f} ms; the draft's greedy token is the answer's at "
          f"{median([sum(x) / max(len(x), 1) for x in agree]):.0%} of positions (median)", file=sys.stderr)
    runs = [agreement_runs(ag) for ag in agree]
    none = [[0] * len(g) for _, _, g in answers]  # the draft model alone: no lookup anywhere
    rows = []
    for mode, lookups in (("draft", none), ("latest+draft", rights["latest"]), ("any+draft", rights["any"])):
        for l_max in a.lengths:
            per = [mixed_replay(r, run, cost, step, l_max) for r, run in zip(lookups, runs, strict=True)]
            rows.append(_row(a, mode, l_max, answers, per))
    for l_max in a.lengths:  # the draft model alone again, stopped on its confidence (bench/foresight.py)
        rate, per = best_blind(calib, cost, step, l_max)
        rows.append({**_row(a, "draft-blind", l_max, answers, per), "rate_tok_s": rate})
    return step, rows


def add_args(p: argparse.ArgumentParser, lengths: Sequence[int] = (16, 32, 64)) -> None:
    p.add_argument("-m", "--model", default="qwen2.5-coder-1.5b", help="target model (registry name or path)")
    p.add_argument("--kinds", nargs="*", default=["edit"], help="bench prompt kinds (code, chat, math, edit)")
    p.add_argument("-n", "--n-predict", dest="n_predict", type=int, default=200, help="answer tokens per prompt")
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("--half", choices=HALVES, default=None,
                   help="the split sets' half (as bench speed --half): the oracle beside a measured report run")
    p.add_argument("--limit", type=int, default=None, help="the first N prompts (after the kind and half filters)")
    p.add_argument("--lengths", nargs="*", type=int, default=list(lengths), help="longest lookup drafts to bound")
    p.add_argument("--spec-ngram-min", dest="n_min", type=int, default=GenConfig.ngram_min, metavar="N",
                   help="shortest matched tail (as in run/serve)")
    p.add_argument("--spec-ngram-max", dest="n_max", type=int, default=GenConfig.ngram_max, metavar="N",
                   help="longest matched tail, tried first (latest mode)")
    p.add_argument("--curve", default="engine",
                   help="the target's batch curve: `engine` (timed here with every row's logits, what a verification "
                        "pays), `llama-bench` (its pp: one row's logits, cheaper; needs scripts/build_llama_cpp_peer.sh) "
                        "or tokens:ms pairs (e.g. 1:28,8:127,16:148 from --explain)")
    p.add_argument("-md", "--model-draft", dest="draft", default=None,
                   help="also bound the draft model beside the lookups: its greedy agreement with each answer "
                   "(one teacher-forced decode) and its 1-token step (timed as --curve says unless --draft-ms)")
    p.add_argument("--draft-ms", type=float, default=None, metavar="MS",
                   help="the draft model's step in ms (e.g. from --explain) instead of timing it")
    p.add_argument("--out", default=None, help="write the rows as JSON")
