"""`bench parse calibrate`: record draft/target answers and every judge's raw scores.

Per calibration problem (0-39): optionally the target's own greedy answer, the draft's
answer as PARSE drafts it (sample 0 greedy, samples >= 1 at --draft-temp), whether each
passes, and one target pass over the draft answer (probe.py); one JSON line per answer.
"""

from __future__ import annotations

import argparse
from dataclasses import replace

from localspec.bench import humaneval as he
from localspec.bench.parse.common import append, base_cfg, load, open_pair, records, say, visible
from localspec.bench.runner import drain


def calibrate(args: argparse.Namespace) -> int:
    """Record draft/target answers and every judge's raw scores on the calibration split."""
    from localspec.tools import parse_probe

    probs = he.problems(he.parse_range(args.problems))
    out = records(args, "calibrate")
    done_ids = {(r["index"], r.get("sample", 0)) for r in load(out)}
    sess = open_pair(args.target, args.draft, args.threads, n_batch=2048)
    probe = parse_probe(sess)
    jobs = [(p, k) for k in range(args.samples + 1) for p in probs]
    for p, k in jobs:
        if (p.index, k) in done_ids:
            continue
        # sample 0: the greedy draft (= PARSE's first draft); samples >= 1: drafts sampled at
        # --draft-temp, which add failing answers so the AUROC rests on more than a handful
        cfg = replace(base_cfg(), seed=k, draft_temp=args.draft_temp if k else None)
        # the target's answer (one token of it when not asked for: the prompt tokens are
        # those the session evaluated, so the probe sees exactly PARSE's prompt)
        want_target = args.target_ar and not k
        ar = replace(cfg, method="ar", n_predict=cfg.n_predict if want_target else 1)
        t_done = drain(sess.generate(he.chat_messages(p), ar, prefill=he.PREFILL))
        toks = sess.last_prompt_tokens
        target_ok = he.passes(p, t_done.text) if want_target else None
        # draft alone, greedy: the draft context plays target for one AR generation
        d = probe.draft_alone(toks, cfg)
        d_text_vis = visible(d.text)
        draft_ok = he.passes(p, d_text_vis)
        j = probe.judge(toks, d.tokens)
        rec = {
            "index": p.index, "sample": k, "prompt_tokens": len(toks),
            "target": {"text": t_done.text, "pass": target_ok, "seconds": t_done.stats.seconds,
                       "n_tokens": t_done.stats.n_tokens} if want_target else None,
            "draft": {"text": d_text_vis, "pass": draft_ok, "seconds": d.seconds, "n_tokens": len(d.tokens)},
            "judge_seconds": j.seconds,
            "tokens": d.tokens, "cuts": j.cuts,
            "gaps": _r(j.gaps), "nll": _r(j.nll), "ent": _r(j.entropy),
            "agree": j.agree,
            "dgaps": _r(d.gaps), "dnll": _r(d.nll),
            "prompt_whole": j.whole, "prompt_prefix": j.prefix,
        }  # fmt: skip
        append(out, rec)
        say(f"[calibrate] {p.task_id}#{k}: target {target_ok}, draft "
            f"{'pass' if draft_ok else 'FAIL'} ({len(d.tokens)} tok {d.seconds:.1f}s), judge {j.seconds:.1f}s, "
            f"max gap {max(rec['gaps'], default=0):.2f}, prompt(code) {j.whole.get('code', float('nan')):.3f}")
    sess.close()
    return 0


def _r(x) -> list[float]:
    return [] if x is None else [round(float(v), 4) for v in x]
