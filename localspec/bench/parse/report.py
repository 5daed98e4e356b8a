"""`bench parse report`: pass@1 and time of target-only AR and of PARSE per judge / setting
on the report split, interleaved problem by problem so that load from other processes hits
every method alike. The draft-alone pass@1 comes with it: PARSE's first draft IS the
draft-alone greedy answer."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import replace

from localspec.bench import humaneval as he
from localspec.bench.parse.common import append, base_cfg, load, open_pair, records, say, visible
from localspec.bench.parse.summary import summarize
from localspec.bench.runner import drain
from localspec.config import GenConfig, ParseConfig
from localspec.events import Event


def _setting(spec: str) -> dict:
    """'likelihood' or 'likelihood:gamma=6,resume=target' -> ParseConfig keyword arguments."""
    name, _, rest = spec.partition(":")
    kw: dict = {"judge": name}
    for part in filter(None, rest.split(",")):
        k, _, v = part.partition("=")
        conv: Callable = {"gamma": float, "threshold": float, "cuts": int, "min_seg": int, "floor": float,
                          "two_stage": lambda s: s in ("1", "true", "yes"), "resume": str, "phrasing": str,
                          "stat": str, "weight": float}[k]
        kw[k] = conv(v)
    return kw


def _parse_cfg(kw: dict) -> ParseConfig:
    pc = ParseConfig(**{k: v for k, v in kw.items() if k in ParseConfig.__dataclass_fields__})
    for k in ("floor", "phrasing", "stat", "weight"):
        if k in kw:
            setattr(pc, k, kw[k])
    return pc


def report(args: argparse.Namespace) -> int:
    """pass@1 + time per method on the report split, interleaved per problem."""
    idx = he.parse_range(args.problems)
    probs = he.problems(idx)
    settings = args.settings.split(";") if args.settings else ["likelihood", "prompt", "hybrid"]
    out = records(args, "report")
    seen = {(r["index"], r["method"]) for r in load(out)}
    sess = open_pair(args.target, args.draft, args.threads)
    for p in probs:
        runs: list[tuple[str, GenConfig]] = []
        if not args.no_ar:
            runs.append(("ar", base_cfg()))
        for s in settings:
            runs.append((f"parse:{s}", replace(base_cfg(), method="parse", auto_K=True, auto_L=True, parse=_parse_cfg(_setting(s)))))
        for name, cfg in runs:
            if (p.index, name) in seen:
                continue
            events: list[Event] = []
            d = drain(sess.generate(he.chat_messages(p), cfg, prefill=he.PREFILL), keep=events)
            st = d.stats
            rec = {"index": p.index, "method": name, "pass": he.passes(p, d.text), "seconds": st.seconds,
                   "n_tokens": st.n_tokens, "target_calls": st.target_calls, "draft_calls": st.draft_calls,
                   "draft_seconds": st.draft_seconds, "verify_seconds": st.verify_seconds,
                   "text": d.text, "parse": getattr(st, "parse", None)}
            append(out, rec)
            if rec["parse"] and rec["parse"]["rounds"] and (p.index, "draft") not in seen:
                # PARSE's first draft is the draft model's own greedy answer: grade it as "draft"
                first = _first_draft(events)
                r0 = rec["parse"]["rounds"][0]
                append(out, {"index": p.index, "method": "draft", "pass": he.passes(p, first),
                             "seconds": r0["draft_seconds"], "n_tokens": r0["draft_tokens"], "text": first})
                seen.add((p.index, "draft"))
            say(f"[report] {p.task_id} {name}: {'pass' if rec['pass'] else 'FAIL'} {st.n_tokens} tok "
                f"{st.seconds:.2f}s ({st.tok_per_s:.1f} tok/s)")
    sess.close()
    return summarize(args)


def _first_draft(events: list[Event]) -> str:
    """Visible text of the last Drafted event before the first Judged one."""
    from localspec.events import Drafted, Judged

    text = ""
    for ev in events:
        if isinstance(ev, Judged):
            break
        if isinstance(ev, Drafted):
            text = ev.texts[0]
    return visible(text)
