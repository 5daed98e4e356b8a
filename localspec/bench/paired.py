"""`localspec bench paired`: two settings, A and B, on the same prompts, alternated A B B A
(every other prompt B A A B).

Why its own bench: on a 2-core VM the same decode runs ±15 % minute to minute, so two
`bench speed` runs minutes apart cannot tell a 3 % change from the machine. A tuning
decision (a prior, a gate, a draft model, a length rule) is judged here instead: each prompt
runs A, B, B, A in one process (the next B, A, A, B), so a drift over the four runs cancels
to first order and no side always runs first; the figure is the per-prompt ratio of B's
summed tok/s to A's, its median over the prompts.
`--b` equal to `--a` is an A/A run: the spread it prints is the noise floor a B/A must beat.

Every run is a fresh first turn (the session forgets its lookups and what auto learned,
back to the shipped priors), as `bench speed --first-turn`. The tuning half is the default:
this is where settings are chosen; `--half report` is for the figure a note gives.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import statistics
import sys
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from localspec.bench.common import HALVES, load_prompts, machine_info, write_json
from localspec.bench.runner import drain, session_prompt
from localspec.errors import ConfigError

if TYPE_CHECKING:
    from localspec.bench.common import Prompt
    from localspec.config import GenConfig
    from localspec.session import Session, SessionOptions
    from localspec.settings import Asked

SIDES = ("A", "B")
# A B B A: a linear drift over a prompt's four runs weighs on both sides alike; every other
# prompt B A A B, because the position itself weighs: in A/A runs a prompt's inner two runs
# were faster than its outer two on 12 of 16 prompts, by a median 2.4 % (docs/bench.md#paired)
ORDERS = ((0, 1, 1, 0), (1, 0, 0, 1))


def order(i: int) -> tuple[int, ...]:
    """The sides' order on the i-th prompt (0: A, 1: B)."""
    return ORDERS[i % 2]


@dataclass
class Side:
    """One setting: `localspec run` flags over the bench's common ones, parsed and checked."""

    name: str
    flags: str
    target: str
    draft: str | None
    asked: Asked
    options: SessionOptions

    @property
    def key(self) -> tuple:
        """Sides with the same key share one loaded session (the same models and options)."""
        return (self.target, self.draft, repr(self.options))


@dataclass
class PromptResult:
    prompt: str
    tok_per_s: dict[str, list[float]] = field(default_factory=lambda: {"A": [], "B": []})
    same_text: bool = True

    @property
    def ratio(self) -> float:
        """B's summed tok/s over A's (each side ran as often); NaN where A wrote nothing
        (an answer that ended at once has no speed to compare)."""
        a = sum(self.tok_per_s["A"])
        return sum(self.tok_per_s["B"]) / a if a > 0 else math.nan


class _SideParser(argparse.ArgumentParser):
    """Raises the parse error (the bench names the side it came from, in one line)."""

    def error(self, message: str):  # type: ignore[override]
        raise ConfigError(" ".join(message.split()))


def side_parser() -> argparse.ArgumentParser:
    """`run`'s model and generation flags: what one side may set."""
    from localspec.flags.args import add_gen_args, add_model_args

    p = _SideParser(prog="localspec bench paired --a/--b", add_help=False)
    add_model_args(p, default_pair=False)
    add_gen_args(p)
    return p


def make_side(name: str, flags: str, a: argparse.Namespace, target: str, draft: str | None) -> Side:
    """The bench's common flags, then the side's own (a later flag wins, as on any command line)."""
    from localspec.flags.args import asked_of, session_options

    common = ["-m", target, "-n", str(a.n_predict), "--temp", str(a.temp), "--ctx", str(a.ctx)]
    common += ["-md", draft] if draft else []
    common += ["-t", str(a.threads)] if a.threads else []
    try:
        own = shlex.split(flags)
    except ValueError as e:
        raise ConfigError(f"--{name.lower()} {flags!r}: {e}") from None
    try:
        ns = side_parser().parse_args(common + own)
        ns.draft = ns.draft or None  # -md '': no draft model (the bench's convention, as `bench fim`)
        return Side(name, flags, ns.target, ns.draft, asked_of(ns), session_options(ns))
    except ConfigError as e:
        raise ConfigError(f"--{name.lower()} {flags!r}: {e} (`localspec run` flags)") from None


def for_prompt(cfg: GenConfig, p: Prompt) -> GenConfig:
    """A side's config for one prompt: a structured prompt is answered under its own schema
    (as `bench speed` does), unless the side gave one (-j / --grammar)."""
    if p.constraint is None or cfg.constraint is not None:
        return cfg
    return replace(cfg, constraint=p.constraint)


def run_pairs(sides: list[Side], prompts: list[Prompt], progress=None) -> tuple[list[PromptResult], bool]:
    """A B B A (every other prompt B A A B); returns the results and whether Ctrl-C cut them short."""
    from localspec.loading import open_session
    from localspec.settings import resolve

    sessions: dict[tuple, Session] = {}
    cfgs = []
    try:
        for s in sides:
            if s.key not in sessions:
                sessions[s.key] = open_session(s.target, s.draft, s.options)
            cfgs.append(resolve(s.asked, sessions[s.key], s.target).cfg)
        results: list[PromptResult] = []
        try:
            for n, p in enumerate(prompts):
                r = PromptResult(p.id)
                texts: dict[str, str] = {}
                for i in order(n):
                    sess = sessions[sides[i].key]
                    sess.forget_lookups()
                    sess.forget_learning(priors=True)
                    done = drain(sess.generate(session_prompt(p), for_prompt(cfgs[i], p)))
                    r.tok_per_s[SIDES[i]].append(done.stats.tok_per_s)
                    if texts.setdefault(SIDES[i], done.text) != done.text:
                        r.same_text = False  # a sampled side: its two runs differ
                    if progress is not None:
                        progress(p.id, SIDES[i])
                r.same_text = r.same_text and texts["A"] == texts["B"]
                results.append(r)
        except KeyboardInterrupt:
            return results, True
        return results, False
    finally:
        for sess in sessions.values():
            sess.close()


def summary(results: list[PromptResult]) -> dict:
    """Median and spread of the per-prompt B/A ratios; how many prompts B won."""
    kept = [r for r in results if math.isfinite(r.ratio)]
    rs = [r.ratio for r in kept]
    if not rs:
        return {"prompts": 0}
    return {
        "prompts": len(rs),  # those with a ratio
        "median": statistics.median(rs),
        "mean": statistics.fmean(rs),
        "min": min(rs),
        "max": max(rs),
        "b_faster": sum(x > 1.0 for x in rs),
        "same_text": sum(r.same_text for r in kept),
    }


def table(results: list[PromptResult]) -> str:
    lines = ["| prompt | A tok/s (its two runs) | B tok/s | B/A | same text |", "|---|---|---|---|---|"]
    for r in results:
        a, b = r.tok_per_s["A"], r.tok_per_s["B"]
        lines.append(f"| {r.prompt} | {' / '.join(f'{x:.1f}' for x in a)} | {' / '.join(f'{x:.1f}' for x in b)} "
                     f"| {r.ratio:.3f} | {'yes' if r.same_text else 'no'} |")
    return "\n".join(lines)


def main(a: argparse.Namespace) -> int:
    from localspec.models import default_pair

    target, draft = a.target, a.draft
    if target is None:
        target, d0 = default_pair()
        draft = draft or d0
    sides = [make_side(n, f, a, target, draft) for n, f in zip(SIDES, (a.a, a.b), strict=True)]
    prompts = load_prompts(a.prompts, a.kinds, a.limit, a.half)
    if not prompts:
        kinds = f"--kinds {' '.join(a.kinds)} " if a.kinds else ""
        raise ConfigError(f"no prompts match {kinds}--half {a.half}")
    from tqdm import tqdm

    started = time.perf_counter()
    bar = tqdm(total=4 * len(prompts), desc="bench paired", unit="run", file=sys.stderr, dynamic_ncols=True)

    def progress(pid: str, side: str) -> None:
        bar.set_postfix_str(f"{pid} {side}", refresh=False)
        bar.update(1)

    try:
        results, interrupted = run_pairs(sides, prompts, progress)
    finally:
        bar.close()
    s = summary(results)
    print(f"A: {sides[0].flags or '(the common flags)'}  [{sides[0].target} <- {sides[0].draft}]")
    print(f"B: {sides[1].flags or '(the common flags)'}  [{sides[1].target} <- {sides[1].draft}]")
    print(f"{len(results)} prompts ({', '.join(a.kinds or ['all'])}, half {a.half}), n={a.n_predict}, T={a.temp}, "
          f"each A B B A or B A A B, first turns" + (" — INTERRUPTED, partial results" if interrupted else ""))
    print(table(results))
    if s["prompts"]:
        print(f"B/A per prompt: median {s['median']:.3f}, mean {s['mean']:.3f}, range {s['min']:.3f}-{s['max']:.3f}; "
              f"B faster on {s['b_faster']}/{s['prompts']}; same text on {s['same_text']}/{s['prompts']}")
    payload = {
        "machine": machine_info(a.threads),
        "sides": {sd.name: {"flags": sd.flags, "target": sd.target, "draft": sd.draft} for sd in sides},
        "settings": {k: v for k, v in vars(a).items() if k != "func"},
        "prompts": [{"id": r.prompt, "tok_per_s": r.tok_per_s, "ratio": r.ratio, "same_text": r.same_text}
                    for r in results],
        "order": ["".join(SIDES[i] for i in o) for o in ORDERS],  # per prompt, in turn
        "summary": s,
        "seconds": time.perf_counter() - started,
        "interrupted": interrupted,
    }
    if a.out:
        write_json(a.out, payload)
        print(f"wrote {a.out}", file=sys.stderr)
    if a.json:
        print(json.dumps(s))
    return 130 if interrupted else 0


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--a", required=True, metavar="FLAGS",
                   help="setting A: `localspec run` flags in one quoted string after =, over the common ones "
                        "below (e.g. --a=\"-md qwen2.5-coder-0.5b-q4_0\"; --a= : the common flags alone). "
                        "Why the =: a string that starts like one of this command's own flags (-m, -md) "
                        "would be read as that flag")
    p.add_argument("--b", required=True, metavar="FLAGS",
                   help="setting B, likewise (e.g. --b=\"-md qwen2.5-coder-0.5b-q4_0-pure\", --b=\"--method sd -L 8\", "
                        "--b=\"-md ''\" for no draft model); the same as --a: an A/A run, the noise floor")
    p.add_argument("-m", "--target", default=None, help="target both sides use unless they say (default: the default pair)")
    p.add_argument("-md", "--draft", default=None, help="draft both sides use unless they say")
    p.add_argument("--kinds", nargs="*", default=None, help="prompt kinds (edit, code, chat, structured...)")
    p.add_argument("--half", choices=HALVES, default="tune",
                   help="the split sets' half: tune (where settings are chosen; the default) or report (the figure a note gives)")
    p.add_argument("--prompts", default=None, help="JSONL prompts file (default: the shipped sets)")
    p.add_argument("--limit", type=int, default=8, help="first N prompts (default 8)")
    p.add_argument("-n", "--n-predict", dest="n_predict", type=int, default=128, help="tokens per answer (default 128)")
    p.add_argument("--temp", type=float, default=0.0, help="both sides' temperature unless they say (default 0: greedy)")
    p.add_argument("--threads", "-t", type=int, default=2, help="CPU threads (default 2)")
    p.add_argument("--ctx", type=int, default=4096, help="context size (default 4096)")
    p.add_argument("--out", default=None, help="write JSON results here")
    p.add_argument("--json", action="store_true", help="print the summary as JSON last")
