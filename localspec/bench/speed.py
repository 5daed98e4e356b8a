"""`localspec bench speed`: AR vs speculative methods vs llama.cpp's own speculative loop.

Every configuration runs on every prompt, interleaved (AR, m1, m2, ..., peer, then the next
prompt), in one process, so machine drift hits all columns alike; figures are medians over
prompts and speedups are medians of per-prompt ratios to the AR run of the same prompt.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field

from localspec.bench.common import load_prompts, machine_info, median, write_json
from localspec.config import GenConfig, SamplingConfig
from localspec.events import Done


@dataclass
class Config:
    """One column of the table."""

    label: str
    method: str
    K: int = 1
    L: int = 8
    free: bool = True  # auto: may choose K and L (else K fixed, L a cap for the dynamic length)

    def gen(self, a: argparse.Namespace, seed: int) -> GenConfig:
        return GenConfig(
            method=self.method,
            K=self.K,
            L=self.L,
            n_predict=a.n_predict,
            seed=seed,
            draft_temp=a.draft_temp,
            sampling=SamplingConfig(temp=a.temp),
            auto_K=self.method == "auto" and a.auto_free and self.free,
            auto_L=self.method == "auto" and a.auto_free and self.free,
        )


@dataclass
class Result:
    label: str
    prompt: str
    tok_per_s: float
    block_efficiency: float = 1.0
    mean_accepted: float = 0.0
    draft_s: float = 0.0
    verify_s: float = 0.0
    overhead_s: float = 0.0
    iterations: int = 0
    n_tokens: int = 0
    text: str = ""
    extra: dict = field(default_factory=dict)


def parse_grid(methods: list[str], grid: list[str]) -> list[Config]:
    """Methods x "K:L" grid -> columns (AR first; K is 1 for single-draft methods).

    "dyn" is `auto` held to the grid's K with L as the cap of its dynamic length (the cost
    model still picks the verifier, stops each draft where one more token stops paying, and
    may fall back to AR): how K drafts with a dynamic length compare with fixed blocks.
    """
    out = [Config("ar", "ar")]
    for m in methods:
        if m == "ar":
            continue
        if m == "auto":
            out.append(Config("auto", "auto"))
            continue
        for g in grid:
            K, L = (int(v) for v in g.split(":"))
            if m == "dyn":
                label = f"auto K={K} L<={L}"
                if label not in [c.label for c in out]:
                    out.append(Config(label, "auto", K, L, free=False))
                continue
            if m in ("sd", "gbv"):
                K = 1
            label = f"{m} K={K} L={L}"
            if label not in [c.label for c in out]:
                out.append(Config(label, m, K, L))
    return out


def run_one(sess, prompt: str, cfg: Config, a: argparse.Namespace, seed: int) -> Result:
    done: Done | None = None
    for ev in sess.complete(prompt, cfg.gen(a, seed)):
        if isinstance(ev, Done):
            done = ev
    assert done is not None
    st = done.stats
    return Result(
        cfg.label, prompt, st.tok_per_s, st.block_efficiency,
        (sum(st.accepted_lengths) / len(st.accepted_lengths)) if st.accepted_lengths else 0.0,
        st.draft_seconds, st.verify_seconds, st.overhead_seconds, st.iterations, st.n_tokens, done.text,
        {"choice": st.choice_note, "method": st.method},
    )  # fmt: skip


def run_peer(sess, prompt: str, a: argparse.Namespace, target_path, draft_path) -> Result | None:
    from localspec.bench import peer

    if peer.peer_binaries() is None:
        return None
    text = sess.template.render([{"role": "user", "content": prompt}])
    tm = sess.target_model
    r = peer.run_speculative_simple(
        target_path, draft_path, peer.to_peer_prompt(text, add_bos=tm.add_bos, bos_text=sess.template.bos_text),
        n_predict=a.n_predict, threads=a.threads or 2, draft_max=a.peer_draft_max, draft_min=0,
        p_min=a.peer_p_min, temp=a.temp, seed=0,
    )  # fmt: skip
    acc = r.acceptance
    return Result("llama.cpp spec", prompt, r.tok_per_s, extra={"acceptance": acc, "command": r.command})


def table(results: list[Result], labels: list[str], prompts: list[str]) -> tuple[str, dict]:
    """Markdown table: medians over prompts, speedups as medians of per-prompt ratios."""
    by = {(r.label, r.prompt): r for r in results}
    rows = [
        "| config | tok/s (median) | speedup vs AR | vs llama.cpp spec | block eff. | mean τ | draft / verify / overhead s | overhead ms/iter |",
        "|---|---|---|---|---|---|---|---|",
    ]
    summary = {}
    for lab in labels:
        rs = [by[(lab, p)] for p in prompts if (lab, p) in by]
        if not rs:
            continue
        sp = [r.tok_per_s / by[("ar", r.prompt)].tok_per_s for r in rs if ("ar", r.prompt) in by]
        vp = [r.tok_per_s / by[("llama.cpp spec", r.prompt)].tok_per_s for r in rs if ("llama.cpp spec", r.prompt) in by]
        its = sum(r.iterations for r in rs)
        s = {
            "tok_per_s": median([r.tok_per_s for r in rs]),
            "speedup_vs_ar": median(sp),
            "vs_peer": median(vp) if vp else None,
            "block_efficiency": median([r.block_efficiency for r in rs]),
            "mean_tau": median([r.mean_accepted for r in rs]),
            "draft_s": sum(r.draft_s for r in rs),
            "verify_s": sum(r.verify_s for r in rs),
            "overhead_s": sum(r.overhead_s for r in rs),
            "overhead_ms_per_iter": 1e3 * sum(r.overhead_s for r in rs) / its if its else 0.0,
        }
        summary[lab] = s
        peer_col = "" if s["vs_peer"] is None else f"{s['vs_peer']:.2f}x"
        rows.append(
            f"| {lab} | {s['tok_per_s']:.1f} | {s['speedup_vs_ar']:.2f}x | "
            f"{peer_col} | {s['block_efficiency']:.2f} | "
            f"{s['mean_tau']:.2f} | {s['draft_s']:.1f} / {s['verify_s']:.1f} / {s['overhead_s']:.2f} | "
            f"{s['overhead_ms_per_iter']:.2f} |"
        )
    return "\n".join(rows), summary


def multi_vs_single(results: list[Result], configs: list[Config]) -> tuple[str, dict]:
    """Each K >= 2 column against `sd` with the same L (a `dyn` column against `dyn` K=1 with
    the same cap), pooled over prompts.

    tok/s = tokens per target call (block efficiency) / seconds per iteration, so the speed
    ratio splits exactly into a block-efficiency ratio and an iteration-cost ratio. K drafts
    never cost less per iteration than one (the draft batch and the verified trie contain the
    single draft's), so the block-efficiency ratio is the most K drafts could gain over `sd`
    at that L even if drafting and verifying them were free: the ceiling that says whether a
    multi-draft goal is reachable on this machine at all.
    """
    def pooled(label: str) -> tuple[float, float] | None:
        rs = [r for r in results if r.label == label and r.iterations > 0 and r.tok_per_s > 0]
        its = sum(r.iterations for r in rs)
        if not its:
            return None
        toks = sum(r.n_tokens for r in rs)
        secs = sum(r.n_tokens / r.tok_per_s for r in rs)
        return toks / its, secs / its

    rows = ["| config | vs | block-eff. ratio (ceiling) | iteration-cost ratio | tok/s ratio |",
            "|---|---|---|---|---|"]
    out: dict = {}
    for c in configs:
        if c.K < 2 or c.method == "ar" or (c.method == "auto" and c.free):
            continue
        base = f"auto K=1 L<={c.L}" if c.method == "auto" else f"sd K=1 L={c.L}"
        m, b = pooled(c.label), pooled(base)
        if m is None or b is None:
            continue
        be, cost = m[0] / b[0], b[1] / m[1]
        out[c.label] = {"vs": base, "be_ratio": be, "cost_ratio": cost, "speed_ratio": be * cost}
        rows.append(f"| {c.label} | {base} | {be:.3f} | {cost:.3f} | {be * cost:.3f} |")
    return ("\n".join(rows) if out else ""), out


def main(a: argparse.Namespace) -> int:
    from tqdm import tqdm

    from localspec.models import default_pair, resolve_model
    from localspec.session import SessionOptions, open_session

    target, draft = a.target, a.draft
    if target is None:
        target, draft0 = default_pair()
        draft = draft or draft0
    prompts = load_prompts(a.prompts, a.kinds, 3 if a.quick and not a.limit else a.limit)
    if a.quick:
        a.n_predict = min(a.n_predict, 64)
    configs = parse_grid(a.methods, a.grid)
    sess = open_session(target, draft, SessionOptions(n_ctx=a.ctx, threads=a.threads))
    tpath, dpath = resolve_model(target), resolve_model(draft)
    results: list[Result] = []
    peer_on = a.peer
    labels = [c.label for c in configs] + (["llama.cpp spec"] if peer_on else [])
    total = len(prompts) * a.repeats * len(labels)
    bar = tqdm(total=total, desc="bench speed", unit="run", file=sys.stderr)
    texts: dict = {}
    for rep in range(a.repeats):
        for pi, p in enumerate(prompts):
            for c in configs:
                bar.set_postfix_str(f"{p['id']} {c.label}")
                r = run_one(sess, p["prompt"], c, a, seed=1000 * rep + pi)
                r.prompt = f"{p['id']}#{rep}"
                results.append(r)
                texts.setdefault(p["id"], {})[c.label] = r.text
                bar.update(1)
            if peer_on:
                bar.set_postfix_str(f"{p['id']} llama.cpp")
                r = run_peer(sess, p["prompt"], a, tpath, dpath)
                if r is None:
                    peer_on = False
                    labels.remove("llama.cpp spec")
                    print("llama.cpp peer not built: run scripts/build_llama_cpp_peer.sh", file=sys.stderr)
                else:
                    r.prompt = f"{p['id']}#{rep}"
                    results.append(r)
                bar.update(1)
    bar.close()
    keys = [f"{p['id']}#{rep}" for rep in range(a.repeats) for p in prompts]
    md, summary = table(results, labels, keys)
    greedy_same = None
    if a.temp == 0:
        greedy_same = {pid: len(set(v.values())) == 1 for pid, v in texts.items()}
    head = (
        f"target {target} <- draft {draft}; {len(prompts)} prompts x {a.repeats}; n={a.n_predict}; "
        f"T={a.temp}; threads={a.threads or 'auto'}"
    )
    print(head)
    print(md)
    if greedy_same is not None:
        print(f"greedy outputs identical across localspec methods: {sum(greedy_same.values())}/{len(greedy_same)} prompts")
    multi_md, multi = multi_vs_single(results, configs)
    if multi_md:
        print("\nK drafts vs one (sd) at the same L, pooled over prompts; the block-efficiency "
              "ratio is the most K drafts could gain if they cost nothing extra:")
        print(multi_md)
    payload = {
        "machine": machine_info(a.threads),
        "target": target,
        "draft": draft,
        "settings": {k: v for k, v in vars(a).items() if k != "func"},
        "summary": summary,
        "runs": [r.__dict__ for r in results],
        "greedy_identical": greedy_same,
        "table_markdown": md,
        "multi_vs_single": multi,
    }
    if a.out:
        write_json(a.out, payload)
        print(f"wrote {a.out}", file=sys.stderr)
    if a.json:
        print(json.dumps(payload["summary"]))
    return 0


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-m", "--target", default=None, help="target (registry name or path; default pair if omitted)")
    p.add_argument("-md", "--draft", default=None, help="draft (registry name or path)")
    p.add_argument("--methods", nargs="+", default=["auto", "sd", "mdbv"],
                   help="methods to compare with AR: auto, sd, gbv, spectr, spectr-gbv, mdbv, and dyn "
                        "(auto held to each grid K, L the cap of its dynamic length)")
    p.add_argument("--grid", nargs="+", default=["1:8", "3:6"], help="K:L settings for explicit methods")
    p.add_argument("--prompts", default=None, help="JSONL prompts file (default: shipped code/chat/math set)")
    p.add_argument("--kinds", nargs="*", default=None, help="prompt kinds to keep (code, chat, math)")
    p.add_argument("--limit", type=int, default=None, help="first N prompts only")
    p.add_argument("-n", "--n-predict", dest="n_predict", type=int, default=200)
    p.add_argument("--temp", type=float, default=0.0)
    p.add_argument("--draft-temp", type=float, default=None)
    p.add_argument("--threads", "-t", type=int, default=2)
    p.add_argument("--ctx", type=int, default=4096)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--auto-free", action=argparse.BooleanOptionalAction, default=True,
                   help="let auto choose K and L (default) instead of the grid's")
    p.add_argument("--peer", action=argparse.BooleanOptionalAction, default=True,
                   help="include llama.cpp's llama-speculative-simple when built")
    p.add_argument("--peer-draft-max", type=int, default=16, help="peer --spec-draft-n-max (its default 16)")
    p.add_argument("--peer-p-min", type=float, default=0.75, help="peer --spec-draft-p-min (its default 0.75)")
    p.add_argument("--quick", action="store_true", help="3 prompts x 64 tokens smoke run")
    p.add_argument("--out", default=None, help="write JSON results here")
    p.add_argument("--json", action="store_true", help="print the summary as JSON last")
