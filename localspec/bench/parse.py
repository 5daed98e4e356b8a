"""`localspec bench parse`: PARSE on HumanEval -- judge discrimination, accuracy, speed.

Three steps, each resumable (results are appended to JSON-lines files under --out):

  calibrate  problems 0-39: target-only greedy, draft-only greedy (pass/fail), and ONE
             target pass over each draft answer that records every judge's raw material
             (per-token gaps / nll / entropy of target and draft, the yes-share of every
             judge phrasing on the whole answer and of the default phrasing at each cut);
  auroc      from those records: AUROC of every candidate whole-answer score against the
             draft's pass/fail -- a judge is only as good as its discrimination;
  report     problems 40-99 (or a subset): pass@1 and time of target-only AR and of PARSE
             per judge / setting, in the same run, interleaved problem by problem so that
             load from other processes hits every method alike; `--sweep` gives the tau/gamma
             table. The draft-alone pass@1 comes with it (PARSE's first draft IS the
             draft-alone greedy answer).

Problems 100-163 are refused (localspec.bench.humaneval).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from localspec.bench import humaneval as he
from localspec.config import GenConfig, ParseConfig
from localspec.events import Done, Event

DEFAULT_OUT = "bench-parse"
N_PREDICT = 400


# ---------------------------------------------------------------- sessions and prompts


def open_pair(target: str, draft: str | None, threads: int | None, n_ctx: int = 2048, n_batch: int = 512):
    """A RuntimeSession on the pair (the bench drives loops with its own prompt tokens)."""
    from localspec.runtime import load_session
    from localspec.session import SessionOptions

    return load_session(target, draft, SessionOptions(n_ctx=n_ctx, n_batch=n_batch, threads=threads), None)


def prompt_tokens(sess, p: he.Problem) -> list[int]:
    """Chat-templated user turn + the assistant turn prefilled with an opening code fence."""
    tm = sess.target_model
    text = sess.template.render(he.chat_messages(p), add_generation_prompt=True) + he.PREFILL
    toks = tm.tokenize(text, add_special=False, parse_special=True)
    if tm.add_bos and tm.bos >= 0 and not text.startswith(sess.template.bos_text or "\0"):
        toks = [tm.bos, *toks]
    return toks


def generate(sess, tokens: list[int], cfg: GenConfig) -> tuple[Done, list[Event]]:
    """Run one generation from explicit prompt tokens; returns Done and every event."""
    sess.messages = []
    events = list(sess._generate(tokens, cfg, None))
    done = events[-1]
    assert isinstance(done, Done)
    return done, events


def base_cfg(**parse_kw) -> GenConfig:
    return GenConfig(method="ar", n_predict=N_PREDICT, seed=0, stop=list(he.STOP), parse=ParseConfig(**parse_kw))


def _append(path: Path, rec: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(rec) + "\n")


def _load(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [json.loads(ln) for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- calibrate


def calibrate(args: argparse.Namespace) -> int:
    """Record draft/target answers and every judge's raw scores on the calibration split."""
    from localspec.decode.judges import PHRASINGS, render_suffix, verdict_tokens
    from localspec.decode.parse_pass import Copy, judge_pass
    from localspec.decode.segment import boundaries, choose_cuts

    idx = he.parse_range(args.problems)
    probs = he.problems(idx)
    out = Path(args.out) / f"calibrate-{args.tag}.jsonl"
    done_ids = {(r["index"], r.get("sample", 0)) for r in _load(out)}
    pair = open_pair(args.target, args.draft, args.threads, n_batch=2048)
    dmodel = pair.draft_model
    tm = pair.target_model
    phr = list(PHRASINGS.values())
    suffixes = [tm.tokenize(render_suffix(pair.template, ph.question), add_special=False, parse_special=True) for ph in phr]
    verdicts = [verdict_tokens(tm, ph) for ph in phr]
    reduce_ids = np.unique(np.concatenate([v.ids for v in verdicts]))
    jobs = [(p, k) for k in range(args.samples + 1) for p in probs]
    for p, k in jobs:
        if (p.index, k) in done_ids:
            continue
        toks = prompt_tokens(pair, p)
        # sample 0: the greedy draft (= PARSE's first draft); samples >= 1: drafts sampled at
        # --draft-temp, which add failing answers so the AUROC rests on more than a handful
        cfg = replace(base_cfg(), seed=k, draft_temp=args.draft_temp if k else None)
        t_done = generate(pair, toks, replace(cfg, method="ar"))[0] if args.target_ar and not k else None
        target_ok = he.passes(p, t_done.text) if t_done else None
        # draft alone, greedy: the draft context plays target for one AR generation
        d_ans, d_feats, d_secs = _draft_alone(pair, toks, cfg)
        d_text = dmodel.detokenize(d_ans)
        d_text_vis = _visible(d_text)
        draft_ok = he.passes(p, d_text_vis)
        pieces = [tm.piece(t) for t in d_ans]
        cuts = choose_cuts(boundaries(pieces), len(d_ans), 8, 8)
        # one target pass: every phrasing on the whole answer + the default phrasing at each cut
        default = list(PHRASINGS).index("code")
        copies = [Copy(len(d_ans), s) for s in suffixes] + [Copy(c, suffixes[default]) for c in cuts[:-1]]
        tgt = pair.target
        tgt.sync(toks)
        t0 = time.perf_counter()
        res = judge_pass(tgt, d_ans, copies, reduce_ids, want_nll=True, want_entropy=True)
        judge_secs = time.perf_counter() - t0
        tgt.repair()
        whole = {}
        for c, (ph, v) in enumerate(zip(phr, verdicts, strict=True)):
            if c in res.copy_logits:
                whole[ph.name] = v.score(res.copy_logits[c][np.searchsorted(reduce_ids, v.ids)])
        vd = verdicts[default]
        prefix = []
        for i in range(len(cuts) - 1):
            lg = res.copy_logits.get(len(phr) + i)
            prefix.append(vd.score(lg[np.searchsorted(reduce_ids, vd.ids)]) if lg is not None else 1.0)
        prefix.append(whole.get("code", 1.0))
        a = res.answer
        rec = {
            "index": p.index, "sample": k, "prompt_tokens": len(toks),
            "target": {"text": t_done.text, "pass": target_ok, "seconds": t_done.stats.seconds,
                       "n_tokens": t_done.stats.n_tokens} if t_done else None,
            "draft": {"text": d_text_vis, "pass": draft_ok, "seconds": d_secs, "n_tokens": len(d_ans)},
            "judge_seconds": judge_secs,
            "tokens": d_ans, "cuts": cuts,
            "gaps": _r(a.gaps), "nll": _r(a.nll), "ent": _r(a.entropy),
            "agree": [int(x == y) for x, y in zip(a.argmax[: len(d_ans)].tolist(), d_ans, strict=True)],
            "dgaps": _r(d_feats[0]), "dnll": _r(d_feats[1]),
            "prompt_whole": whole, "prompt_prefix": prefix,
        }
        _append(out, rec)
        _say(f"[calibrate] {p.task_id}#{k}: target {target_ok}, draft "
             f"{'pass' if draft_ok else 'FAIL'} ({len(d_ans)} tok {d_secs:.1f}s), judge {judge_secs:.1f}s, max gap {max(rec['gaps'], default=0):.2f}, "
             f"prompt(code) {whole.get('code', float('nan')):.3f}")
    return 0


def _r(x) -> list[float]:
    return [] if x is None else [round(float(v), 4) for v in x]


def _visible(text: str) -> str:
    """The answer as the emitter shows it: cut at the first stop string."""
    for s in he.STOP:
        i = text.find(s)
        if i >= 0:
            text = text[:i]
    return text


def _draft_alone(pair, toks: list[int], cfg: GenConfig) -> tuple[list[int], tuple[np.ndarray, np.ndarray], float]:
    """Greedy draft answer as PARSE's first round drafts it, plus the draft's own gaps/nll."""
    from localspec.decode.emitter import Emitter
    from localspec.decode.parse import draft_answer
    from localspec.decode.parse_pass import answer_features
    from localspec.decode.state import MAIN
    from localspec.decode.turn import Turn
    from localspec.events import Stats
    from localspec.session import StopFlag

    tgt, dft = pair.target, pair.draft
    tgt.sync(toks)
    em = Emitter(pair.target_model, cfg.n_predict, cfg.stop)
    turn = Turn(pair.target_model, tgt, cfg, em, Stats(), np.random.default_rng(cfg.seed), StopFlag(),
                pair.draft_model, dft)
    t0 = time.perf_counter()
    gen = draft_answer(turn, cfg.n_predict)
    while True:
        try:
            next(gen)
        except StopIteration as stop:
            d = stop.value
            break
    secs = time.perf_counter() - t0
    # the draft's own view of its tokens: one batch over the answer on the draft context
    ctx = dft.ctx
    dft.sync(toks)
    b = ctx.batch.clear()
    row0 = b.add_sequence(dft.pending, dft.n_past, MAIN, True)
    for j, t in enumerate(d.tokens):
        b.add(t, dft.n_past + 1 + j, MAIN, True)
    ctx.decode()
    f = answer_features(ctx.logits_all()[row0 : row0 + len(d.tokens) + 1], d.tokens, want_nll=True, sampling=None) \
        if len(d.tokens) else None
    dft.repair()
    return d.tokens, (f.gaps if f else np.zeros(0), f.nll if f else np.zeros(0)), secs


# ---------------------------------------------------------------- AUROC


def auroc(scores: Sequence[float], labels: Sequence[bool]) -> float:
    """P(score of a passing draft > score of a failing one), ties count half."""
    pos = [s for s, y in zip(scores, labels, strict=True) if y]
    neg = [s for s, y in zip(scores, labels, strict=True) if not y]
    if not pos or not neg:
        return float("nan")
    wins = sum((a > b) + 0.5 * (a == b) for a in pos for b in neg)
    return wins / (len(pos) * len(neg))


def candidate_scores(rec: dict) -> dict[str, float]:
    """Every whole-answer score tried (higher = more trusted)."""
    g = np.asarray(rec["gaps"])
    nll = np.asarray(rec["nll"])
    ent = np.asarray(rec["ent"])
    dn = np.asarray(rec["dnll"])
    out: dict[str, float] = {}
    for name, v in rec["prompt_whole"].items():
        out[f"prompt:{name}"] = v
    out["prompt:code:min-prefix"] = min(rec["prompt_prefix"])
    if g.size == 0:
        return out
    out["lik:max-gap"] = -g.max()
    out["lik:mean-gap"] = -g.mean()
    out["lik:sum-gap"] = -g.sum()
    out["lik:max-nll"] = -nll.max()
    out["lik:mean-nll"] = -nll.mean()
    out["lik:top3-gap"] = -np.sort(g)[-3:].mean()
    for f in (1.0, 2.0, 3.0):
        out[f"lik:sum-gap>{f:g}"] = -np.maximum(g - f, 0).sum()
        out[f"lik:count-gap>{f:g}"] = -float((g > f).sum())
    for e in (0.5, 1.0):
        sel = ent < e
        out[f"lik:max-gap(ent<{e:g})"] = -(g[sel].max() if sel.any() else 0.0)
    out["lik:max(gap-ent)"] = -(g - ent).max()
    agree = np.asarray(rec["agree"])
    out["lik:agree-rate"] = float(agree.mean())
    out["lik:disagreements"] = -float((agree == 0).sum())
    out["lik:max-gap-minus-draft-nll"] = -(g - dn).max() if dn.size == g.size else 0.0
    cuts = rec["cuts"]
    seg = []
    prev = 0
    for c in cuts:
        seg.append(g[prev:c])
        prev = c
    for f in (1.0, 2.0, 3.0):
        out[f"seg:max-sum-gap>{f:g}"] = -max(float(np.maximum(s - f, 0).sum()) for s in seg if s.size)
    out["seg:max-mean-gap"] = -max(float(s.mean()) for s in seg if s.size)
    # hybrids: prompt log-odds minus a multiple of a likelihood statistic (the shipped
    # hybrid uses the segment statistic: seg:max-sum-gap>1)
    for ph in ("tests", "code", "generic"):
        if ph not in rec["prompt_whole"]:
            continue
        pv = min(max(rec["prompt_whole"][ph], 1e-6), 1 - 1e-6)
        lo = math.log(pv / (1 - pv))
        for a in (0.1, 0.25, 0.5, 1.0):
            out[f"hyb:{ph}-{a:g}*seg-sum-gap>1"] = lo + a * out["seg:max-sum-gap>1"]
            out[f"hyb:{ph}-{a:g}*max-gap"] = lo + a * out["lik:max-gap"]
    return out


def auroc_table(records: list[dict]) -> list[tuple[str, float]]:
    labels = [r["draft"]["pass"] for r in records]
    cands = [candidate_scores(r) for r in records]
    names = sorted(set().union(*cands))
    rows = []
    for n in names:
        vals = [c.get(n, float("nan")) for c in cands]
        if any(math.isnan(v) for v in vals):
            continue
        rows.append((n, auroc(vals, labels)))
    rows.sort(key=lambda x: -x[1])
    return rows


def cmd_auroc(args: argparse.Namespace) -> int:
    idx = set(he.parse_range(args.problems))
    recs = [r for r in _load(Path(args.out) / f"calibrate-{args.tag}.jsonl") if r["index"] in idx]
    if not recs:
        _say("no calibration records: run `localspec bench parse calibrate` first")
        return 2
    greedy = [r for r in recs if r.get("sample", 0) == 0]
    for name, rs in (("greedy drafts", greedy), ("greedy + sampled drafts", recs)):
        npass = sum(r["draft"]["pass"] for r in rs)
        print(f"{name}: {len(rs)} answers, {npass} pass, {len(rs) - npass} fail")
    g_tab = dict(auroc_table(greedy))
    print("| score | AUROC greedy | AUROC all |\n|---|---|---|")
    for n, a in auroc_table(recs):
        print(f"| {n} | {g_tab.get(n, float('nan')):.3f} | {a:.3f} |")
    return 0


# ---------------------------------------------------------------- report


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
    out = Path(args.out) / f"report-{args.tag}.jsonl"
    seen = {(r["index"], r["method"]) for r in _load(out)}
    pair = open_pair(args.target, args.draft, args.threads)
    for p in probs:
        toks = prompt_tokens(pair, p)
        runs: list[tuple[str, GenConfig]] = []
        if not args.no_ar:
            runs.append(("ar", base_cfg()))
        for s in settings:
            runs.append((f"parse:{s}", replace(base_cfg(), method="parse", auto_K=True, auto_L=True, parse=_parse_cfg(_setting(s)))))
        for name, cfg in runs:
            if (p.index, name) in seen:
                continue
            d, events = generate(pair, toks, cfg)
            st = d.stats
            rec = {"index": p.index, "method": name, "pass": he.passes(p, d.text), "seconds": st.seconds,
                   "n_tokens": st.n_tokens, "target_calls": st.target_calls, "draft_calls": st.draft_calls,
                   "draft_seconds": st.draft_seconds, "verify_seconds": st.verify_seconds,
                   "text": d.text, "parse": getattr(st, "parse", None)}
            _append(out, rec)
            if rec["parse"] and rec["parse"]["rounds"] and (p.index, "draft") not in seen:
                # PARSE's first draft is the draft model's own greedy answer: grade it as "draft"
                first = _first_draft(events)
                r0 = rec["parse"]["rounds"][0]
                _append(out, {"index": p.index, "method": "draft", "pass": he.passes(p, first),
                              "seconds": r0["draft_seconds"], "n_tokens": r0["draft_tokens"], "text": first})
                seen.add((p.index, "draft"))
            _say(f"[report] {p.task_id} {name}: {'pass' if rec['pass'] else 'FAIL'} {st.n_tokens} tok "
                 f"{st.seconds:.2f}s ({st.tok_per_s:.1f} tok/s)")
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
    return _visible(text)


def _by_method(recs: list[dict], problems: set[int]) -> dict[str, list[dict]]:
    by: dict[str, list[dict]] = {}
    for r in recs:
        if r["index"] in problems:
            by.setdefault(r["method"], []).append(r)
    return by


def summary_rows(recs: list[dict], problems: Iterable[int]) -> tuple[set[int], list[dict]]:
    """Per method over the problems every method finished: pass@1, time, speedup vs AR."""
    by = _by_method(recs, set(problems))
    common = set.intersection(*[{r["index"] for r in v} for v in by.values()]) if by else set()
    ar = {r["index"]: r for r in by.get("ar", [])}
    ar_secs = sum(ar[i]["seconds"] for i in common if i in ar)
    rows = []
    for m, rs in by.items():
        rs = [r for r in rs if r["index"] in common]
        if not rs:
            continue
        secs = sum(r["seconds"] for r in rs)
        parse_rounds = [x for r in rs if r.get("parse") for x in r["parse"]["rounds"]]
        drafted = sum(x["draft_tokens"] for x in parse_rounds)
        rows.append({
            "method": m, "n": len(rs), "pass_at_1": sum(r["pass"] for r in rs) / len(rs), "seconds": secs,
            "tokens": sum(r["n_tokens"] for r in rs),
            "speedup": ar_secs / secs if secs and ar_secs else float("nan"),
            "rounds": float(np.mean([len(r["parse"]["rounds"]) for r in rs if r.get("parse")])) if drafted else None,
            "accepted_share": sum(x["accepted_tokens"] for x in parse_rounds) / drafted if drafted else None,
        })
    return common, rows


def summarize(args: argparse.Namespace) -> int:
    recs = _load(Path(args.out) / f"report-{args.tag}.jsonl")
    common, rows = summary_rows(recs, he.parse_range(args.problems))
    print(f"{len(common)} problems ({min(common, default=0)}-{max(common, default=0)}) run by every method")
    print("| method | pass@1 | tokens | seconds | tok/s | speedup vs AR (time) | rounds/answer | accepted/drafted |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        rr = "-" if r["rounds"] is None else f"{r['rounds']:.2f}"
        ad = "-" if r["accepted_share"] is None else f"{r['accepted_share']:.2f}"
        print(f"| {r['method']} | {100 * r['pass_at_1']:.1f}% | {r['tokens']} | {r['seconds']:.1f} | "
              f"{r['tokens'] / r['seconds']:.1f} | {r['speedup']:.2f}x | {rr} | {ad} |")
    by = _by_method(recs, common)
    judge_auroc_table(by, common)
    print_perfect_judge_bound(by, common)
    if getattr(args, "plot", None):
        path = plot_tradeoff(rows, Path(args.plot), f"PARSE {args.tag}: HumanEval {args.problems}")
        if path is not None:
            print(f"\nplot: {path}")
    return 0


def plot_tradeoff(rows: list[dict], path: Path, title: str) -> Path | None:
    """pass@1 vs speedup, one labelled point per method: the tau/gamma sweep at a glance."""
    from localspec.bench.plots import _pyplot

    plt = _pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, r in enumerate(sorted(rows, key=lambda r: r["speedup"])):
        ax.scatter(r["speedup"], 100 * r["pass_at_1"], color="tab:red" if r["method"] == "ar" else "tab:blue")
        # neighbours often share a pass@1 (a few problems decide it): stagger their labels
        ax.annotate(r["method"].removeprefix("parse:"), (r["speedup"], 100 * r["pass_at_1"]), fontsize=7,
                    xytext=(4, (4, -10, 14)[i % 3]), textcoords="offset points")
    ax.set_xlabel("speedup vs target alone (wall clock)")
    ax.set_ylabel("pass@1 (%)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def judge_auroc_table(by: dict[str, list[dict]], common: set[int]) -> None:
    """Each PARSE setting's first-round score of the whole draft vs that draft's pass/fail.

    The same discrimination measure as `auroc` on the calibration split, but read from the
    judge that actually ran in the report (an evaluation, not a choice: nothing is tuned on
    it)."""
    draft_pass = {r["index"]: r["pass"] for r in by.get("draft", []) if r["index"] in common}
    rows = []
    for m, rs in by.items():
        scores, labels = [], []
        for r in rs:
            if not r.get("parse") or r["index"] not in draft_pass or not r["parse"]["rounds"]:
                continue
            r0 = r["parse"]["rounds"][0]
            if r0["cuts"] and r0["cuts"][-1] == r0["draft_tokens"]:
                scores.append(r0["scores"][-1])
                labels.append(draft_pass[r["index"]])
        if scores:
            rows.append((m, auroc(scores, labels), sum(labels), len(labels) - sum(labels)))
    if rows:
        print("\n| judge (as run) | AUROC of the whole-draft score | drafts passing | failing |")
        print("|---|---|---|---|")
        for m, a, npos, nneg in rows:
            print(f"| {m} | {a:.3f} | {npos} | {nneg} |")


def perfect_judge_bound(
    by: dict[str, list[dict]], common: set[int], regen_speedup: float, slack: float = 0.02
) -> tuple[float, float] | None:
    """The best any judge could do with THIS draft: (pass@1, speedup vs AR).

    Per problem, from measured times: the draft's answer (the `draft` run) plus the
    cheapest judge pass any PARSE setting ran on it (first round); a perfect judge keeps
    every draft that passes or whose target answer fails anyway, and has the target rewrite
    the rest at `regen_speedup` x AR. Then, within `slack` of the target's pass@1, it also
    keeps the failing drafts that save the most time. If even this misses a speed goal, no
    judge can reach it: the draft's accuracy and cost are the limit, not the judge.
    """
    ar = {r["index"]: r for r in by.get("ar", [])}
    dr = {r["index"]: r for r in by.get("draft", [])}
    judge: dict[int, float] = {}
    for m, rs in by.items():
        for r in rs:
            if m.startswith("parse") and r.get("parse") and r["parse"]["rounds"]:
                j = r["parse"]["rounds"][0].get("judge_seconds")
                if j is not None:
                    judge[r["index"]] = min(j, judge.get(r["index"], float("inf")))
    idx = [i for i in sorted(common) if i in ar and i in dr and i in judge]
    if not idx:
        return None
    n = len(idx)
    floor = sum(ar[i]["pass"] for i in idx) / n - slack
    t_ar = sum(ar[i]["seconds"] for i in idx)
    total, passed, savings = 0.0, 0, []
    for i in idx:
        keep = dr[i]["seconds"] + judge[i]
        redo = ar[i]["seconds"] / regen_speedup
        if dr[i]["pass"] or not ar[i]["pass"]:
            total, passed = total + keep, passed + dr[i]["pass"]
        else:
            total, passed = total + keep + redo, passed + 1
            savings.append(redo)
    for save in sorted(savings, reverse=True):
        if (passed - 1) / n < floor - 1e-12:
            break
        total, passed = total - save, passed - 1
    return passed / n, t_ar / total


def print_perfect_judge_bound(by: dict[str, list[dict]], common: set[int]) -> None:
    rows = [(g, perfect_judge_bound(by, common, g)) for g in (1.5, 2.0, 3.0, float("inf"))]
    if all(b is None for _, b in rows):
        return
    print("\n| perfect judge, target rewrites at | pass@1 (within 2 points of AR) | speedup vs AR |")
    print("|---|---|---|")
    for g, b in rows:
        if b is not None:
            print(f"| {'no cost' if g == float('inf') else f'{g:.1f}x AR'} | {100 * b[0]:.1f}% | {b[1]:.2f}x |")


# ---------------------------------------------------------------- entry point


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="localspec bench parse", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="step", required=True)

    def common(p: argparse.ArgumentParser, problems: str) -> None:
        p.add_argument("-m", "--target", default="qwen2.5-coder-1.5b")
        p.add_argument("-md", "--draft", default="qwen2.5-coder-0.5b")
        p.add_argument("--problems", default=problems, help="HumanEval indices, e.g. 0-39 or 40-99 (100-163 refused)")
        p.add_argument("--out", default=DEFAULT_OUT, help="directory of the JSON-lines results (resumable)")
        p.add_argument("--tag", default="q4", help="name of this pair's result files")
        p.add_argument("-t", "--threads", type=int, default=None)

    c = sub.add_parser("calibrate", help="record judge raw scores on 0-39")
    common(c, "0-39")
    c.add_argument("--target-ar", action="store_true", help="also run target-only greedy (slow)")
    c.add_argument("--samples", type=int, default=0, help="extra sampled drafts per problem")
    c.add_argument("--draft-temp", type=float, default=0.8, help="temperature of the extra drafts")
    a = sub.add_parser("auroc", help="AUROC of every candidate judge score from the calibration records")
    common(a, "0-39")
    r = sub.add_parser("report", help="pass@1 and speed of AR and PARSE settings")
    common(r, "40-99")
    r.add_argument("--settings", default="", help="';'-separated judge[:k=v,...] settings "
                   "(e.g. 'likelihood;likelihood:gamma=6;prompt:threshold=0.8')")
    r.add_argument("--no-ar", action="store_true", help="skip the AR baseline (already in the file)")
    s = sub.add_parser("summary", help="print the table of a finished report")
    common(s, "40-99")
    s.add_argument("--plot", default=None, help="also draw pass@1 vs speedup per setting into this PNG")
    return ap


def main(argv: Iterable[str] | None = None) -> int:
    args = build_parser().parse_args(list(argv) if argv is not None else None)
    if args.step == "calibrate":
        return calibrate(args)
    if args.step == "auroc":
        return cmd_auroc(args)
    if args.step == "report":
        return report(args)
    return summarize(args)


if __name__ == "__main__":
    sys.exit(main())
