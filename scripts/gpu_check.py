#!/usr/bin/env python3
"""The GPU check's measurements (scripts/gpu_check.sh runs this on a machine with a GPU).

Reports, as JSON and as a short text summary:
  1. the devices, and the layers placed on the GPU (localspec's plan and llama.cpp's own
     "offloaded N/M layers" line) with the device memory before and after loading;
  2. greedy output of speculative methods vs AR on the GPU (token ids compared);
  3. the target's decode cost for batches of 1..64 tokens on the GPU vs the CPU;
  4. the speedup the cost model predicts for the default pair's measured acceptance
     (bench/results/speed-q4-greedy.json, sd L=8) on the GPU curves and on the CPU curves;
  5. greedy under a JSON schema (the engine's constraint, llguidance): sd and mdbv
     vs AR on the GPU, with the tokens the grammar forced (issue 39's placement check);
  6. the recurrent-memory paths and the target's MTP head (`--spec-type mtp`) on tiny
     random models: greedy equality with AR, and for the head its drafted/accepted tokens
     and ms per draft call. Its speedup is "not measured": random weights say nothing
     about a real head's acceptance (no real MTP weights were reachable when it was written).

Models are random-weight GGUFs of Qwen2.5 shapes (scripts/gpu_check_gguf.py): the default
pair's shapes (1.5B <- 0.5B) and a 7B target. --allow-cpu runs it all without a GPU
(a smoke test of this script: the figures are then CPU figures).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import sys
import time
from contextlib import redirect_stderr
from dataclasses import asdict
from pathlib import Path

import numpy as np

from localspec import costmodel
from localspec.backend import Context, Model
from localspec.backend import devices as devs
from localspec.backend.logs import configure_logging
from localspec.config import GenConfig
from localspec.constrain.spec import ConstraintSpec
from localspec.events import Accepted, Written
from localspec.loading import load_session
from localspec.placement.load import LoadOptions
from localspec.session import SessionOptions

CPU_SIZES = (1, 2, 4, 8, 16, 32, 64)
ROOT = Path(__file__).resolve().parent.parent


def bench_alpha(path: Path) -> tuple[float, str]:
    """Per-token acceptance alpha of the default pair, from the greedy bench's sd L=8 run:
    block efficiency E = 1 + sum_{i=1..L} alpha^i, solved by bisection."""
    d = json.loads(path.read_text())
    row = next(v for k, v in d["summary"].items() if k.startswith("sd ") and "L=8" in k)
    eff, L = float(row["block_efficiency"]), 8
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if 1 + sum(mid**i for i in range(1, L + 1)) < eff else (lo, mid)
    return lo, f"{path.name}: {d['target']} <- {d['draft']}, sd L=8 block efficiency {eff:.2f}"


def free_memory() -> dict[str, int]:
    return {d.name: d.free for d in devs.devices() if d.kind != "cpu"}


def load_logged(target: Path, draft: Path | None, opts: SessionOptions):
    """Open a session with llama.cpp's log captured: its 'offloaded N/M layers' lines."""
    buf = io.StringIO()
    before = free_memory()
    opts.verbose = True
    with redirect_stderr(buf):
        sess = load_session(str(target), str(draft) if draft else None, opts, None)
    configure_logging(False)
    after = free_memory()
    lines = [ln.strip() for ln in buf.getvalue().splitlines() if re.search(r"offloaded \d+/\d+ layers", ln)]
    return sess, {"llama_cpp": lines, "free_before": before, "free_after": after,
                  "used": {k: before[k] - after.get(k, 0) for k in before}}


def run_tokens(sess, prompt: list[int], cfg: GenConfig) -> list[int]:
    out: list[int] = []
    for ev in sess.generate(prompt, cfg):
        if isinstance(ev, Accepted | Written):
            out.extend(ev.tokens)
    return out


def greedy_equal(sess, n_vocab: int, n: int) -> dict:
    rng = np.random.default_rng(1)
    prompt = [1] + [int(t) for t in rng.integers(259, n_vocab, size=31)]
    ar = run_tokens(sess, prompt, GenConfig(method="ar", n_predict=n))
    out = {"n_tokens": len(ar)}
    for name, cfg in {
        "sd K=1 L=6": GenConfig(method="sd", K=1, L=6, n_predict=n),
        "mdbv K=2 L=4 draft-temp 0.8": GenConfig(method="mdbv", K=2, L=4, n_predict=n, draft_temp=0.8, seed=3),
    }.items():
        got = run_tokens(sess, prompt, cfg)
        first = next((i for i, (a, b) in enumerate(zip(ar, got, strict=False)) if a != b), None)
        if first is None and len(got) != len(ar):
            first = min(len(got), len(ar))
        out[name] = {"equal": got == ar, "first_difference": first}
    return out


def constrained_equal(sess, n: int) -> dict:
    """Greedy under a small JSON schema on the GPU: every method's tokens equal AR's under the
    same grammar (masked rows read from device logits), and how many tokens the grammar forced.
    Errors are reported, not raised: the rest of the check still runs."""
    try:
        schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 24},
                                                   "tags": {"type": "array", "items": {"enum": ["a", "bb", "ccc"]}},
                                                   "n": {"type": "integer"}},
                  "required": ["name", "tags", "n"], "additionalProperties": False}
        spec = ConstraintSpec("json_schema", json.dumps(schema), origin="gpu_check")
        prompt = [1, 2, 3, 4, 5, 6, 7, 8]
        base = {"n_predict": n, "constraint": spec}
        t0 = time.time()
        list(sess.generate(prompt, GenConfig(method="ar", **base)))
        ar = sess.last_tokens  # what the emitter kept (an end-of-turn token is not text)
        out: dict = {"n_tokens": len(ar), "ar_seconds": round(time.time() - t0, 2)}
        for name, cfg in {"sd K=1 L=6": GenConfig(method="sd", K=1, L=6, **base),
                          "mdbv K=2 L=4 draft-temp 0.8": GenConfig(method="mdbv", K=2, L=4, draft_temp=0.8,
                                                                   seed=3, **base)}.items():
            t0 = time.time()
            done = list(sess.generate(prompt, cfg))[-1]
            st = getattr(done, "stats", None)
            out[name] = {"equal": sess.last_tokens == ar, "seconds": round(time.time() - t0, 2),
                         "forced": st.proposed.get("grammar", (0, 0))[0] if st else None}
        return out
    except Exception as e:  # noqa: BLE001 - a report line, not a crash
        return {"error": f"{type(e).__name__}: {e}"}


def curve(ctx: Context, sizes=costmodel.BATCH_SIZES, reps: int = 5) -> dict:
    c = costmodel.measure(ctx, sizes=sizes, reps=reps)
    return {"sizes": c.sizes, "ms": [round(s * 1e3, 3) for s in c.seconds]}


def predict(target: dict, draft: dict, alpha: float) -> dict:
    """The cost model's best greedy setting and its speedup over AR for this alpha."""
    to = costmodel.CostCurve(target["sizes"], [m / 1e3 for m in target["ms"]])
    dr = costmodel.CostCurve(draft["sizes"], [m / 1e3 for m in draft["ms"]])
    acc = costmodel.Acceptance(accepted=alpha * 1000, trials=1000.0, prior_weight=0.0)
    cm = costmodel.CostModel(to, dr, acceptance=acc)
    out = {}
    for label, cfg in {"greedy": GenConfig(auto_K=True, auto_L=True),
                       "greedy, sampled drafts (K up to 4)": GenConfig(auto_K=True, auto_L=True, draft_temp=0.8)}.items():
        best = max(cm.candidates(cfg), key=lambda p: p.tok_per_s)
        out[label] = {"method": best.method, "K": best.K, "L": best.L,
                      "tok_per_s": round(best.tok_per_s, 1), "ar_tok_per_s": round(cm.ar(), 1),
                      "speedup_vs_ar": round(best.tok_per_s / cm.ar(), 2)}
    return out


def cpu_context(path: Path, n_ctx: int, threads: int | None) -> Context:
    threads = threads or min(os.cpu_count() or 4, 16)
    m = Model(path, load=LoadOptions(gpu_layers=0, devices=["none"], threads=threads))
    return Context(m, n_ctx=n_ctx, n_batch=512, n_seq_max=4)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="localspec GPU check (measurements)")
    p.add_argument("--models", type=Path, default=None, help="folder with t1.5b.gguf, d0.5b.gguf, t7b.gguf")
    p.add_argument("--out", type=Path, default=None, help="JSON report path")
    p.add_argument("--alpha-from", type=Path, default=ROOT / "bench/results/speed-q4-greedy.json")
    p.add_argument("--n", type=int, default=64, help="tokens generated per greedy comparison")
    p.add_argument("--allow-cpu", action="store_true", help="smoke test without a GPU")
    p.add_argument("--ctx", type=int, default=2048)
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: all cores, max 16)")
    p.add_argument("--write-tiny", type=Path, default=None, metavar="DIR",
                   help="only write the tiny hybrid/recurrent pairs (tests/support/tiny_gguf, byte vocabulary) into DIR")
    a = p.parse_args(argv)
    if a.write_tiny is not None:
        return write_tiny_pairs(a.write_tiny)
    if a.models is None or a.out is None:
        p.error("--models and --out are required")
    t0 = time.time()
    report: dict = {"backends": devs.backends(),
                    "devices": [asdict(d) for d in devs.devices()]}
    if not [d for d in devs.devices() if d.kind in ("gpu", "igpu")]:
        if not a.allow_cpu:
            print(f"no GPU device (backends: {', '.join(devs.backends())})", file=sys.stderr)
            return 1
        report["smoke"] = "no GPU device: every 'GPU' figure below was measured on the CPU"
    alpha, source = bench_alpha(a.alpha_from)
    report["alpha"] = {"value": round(alpha, 4), "source": source}
    t15, d05, t7 = a.models / "t1.5b.gguf", a.models / "d0.5b.gguf", a.models / "t7b.gguf"
    opts = SessionOptions(n_ctx=a.ctx, n_batch=512, n_seq_max=8, threads=a.threads)
    sess, loaded = load_logged(t15, d05, opts)
    report["default_pair_shapes"] = {
        "target": sess.target_model.placement.summary(), "draft": sess.draft_model.placement.summary(),
        **loaded,
    }
    report["greedy_vs_ar"] = greedy_equal(sess, sess.target_model.n_vocab, a.n)
    report["constrained_vs_ar"] = constrained_equal(sess, a.n)
    gpu = {"t1.5b": curve(sess.target.ctx), "d0.5b": curve(sess.draft.ctx)}
    sess.close()
    big = [t7] if t7.exists() else []
    for path in big:
        s7, loaded7 = load_logged(path, None, SessionOptions(n_ctx=a.ctx, n_batch=512, n_seq_max=8, threads=a.threads))
        report["t7b"] = {"placement": s7.target_model.placement.summary(), **loaded7}
        gpu["t7b"] = curve(s7.target.ctx)
        s7.close()
    cpu = {}
    for name, path in (("t1.5b", t15), ("d0.5b", d05)):
        ctx = cpu_context(path, a.ctx, a.threads)
        cpu[name] = curve(ctx, sizes=CPU_SIZES, reps=2)
        ctx.close()
    report["curves_gpu"] = gpu
    report["curves_cpu"] = cpu
    report["predicted"] = {
        "default pair shapes on the GPU": predict(gpu["t1.5b"], gpu["d0.5b"], alpha),
        "default pair shapes on the CPU": predict(cpu["t1.5b"], cpu["d0.5b"], alpha),
    }
    if "t7b" in gpu:
        report["predicted"]["7B <- 1.5B shapes on the GPU"] = predict(gpu["t7b"], gpu["t1.5b"], alpha)
    report["recurrent_memories"] = memory_paths(a.models, a.n, a.ctx, a.threads)
    report["mtp_head"] = mtp_head(a.models, a.n, a.ctx, a.threads)
    report["seconds"] = round(time.time() - t0, 1)
    a.out.write_text(json.dumps(report, indent=1, default=str))
    print(summary(report))
    return 0


def write_tiny_pairs(d: Path) -> int:
    """Tiny qwen35 (hybrid, snapshots) and mamba2 (recurrent) targets and near-copy drafts,
    and a qwen35 with an MTP block the target partly agrees with (tiny_gguf's echo)."""
    sys.path.insert(0, str(ROOT))
    from tests.support.tiny_gguf import byte_tokenizer, write_memory_kinds

    write_memory_kinds(d, byte_tokenizer(), ("qwen35", "mamba2"), mtp_echo=0.1)
    return 0


def memory_paths(models: Path, n: int, n_ctx: int, threads: int | None) -> dict:
    """Greedy sd == AR on the GPU for each recurrent-state path (docs/memory.md): snapshot
    rollback (qwen35), branch copies (qwen35 --rs-snapshots 0, mamba2)."""
    out: dict = {}
    for label, arch, snaps in (("hybrid snapshots", "qwen35", 16), ("hybrid branch", "qwen35", 0),
                               ("recurrent branch", "mamba2", 0)):
        t, d = models / f"{arch}.gguf", models / f"{arch}-draft.gguf"
        if not t.exists():
            continue
        sess, loaded = load_logged(t, d, SessionOptions(n_ctx=n_ctx, threads=threads, rs_snapshots=snaps))
        prompt = [int(x) for x in np.random.default_rng(2).integers(0, 256, size=16)]
        list(sess.generate(prompt, GenConfig(method="ar", n_predict=n)))
        ar = sess.last_tokens  # what the emitter kept (an end-of-turn token is not text)
        list(sess.generate(prompt, GenConfig(method="sd", K=1, L=4, n_predict=n, dynamic_draft=False)))
        sd = sess.last_tokens
        out[label] = {"equal": sd == ar, "n_tokens": len(ar), "placement": sess.target_model.placement.summary()}
        sess.close()
    return out


def mtp_head(models: Path, n: int, n_ctx: int, threads: int | None) -> dict:
    """The target's MTP head on the GPU: greedy sd --spec-type mtp == AR on the tiny qwen35
    with a nextn block, its drafted and accepted tokens, ms per head decode. The speedup is
    not measured: a random head's acceptance says nothing about a real one's."""
    t = models / "qwen35-mtp.gguf"
    if not t.exists():
        return {}
    sess, loaded = load_logged(t, None, SessionOptions(n_ctx=n_ctx, threads=threads, mtp=True))
    prompt = [int(x) for x in np.random.default_rng(3).integers(0, 256, size=16)]
    list(sess.generate(prompt, GenConfig(method="ar", n_predict=n)))
    ar = sess.last_tokens
    done = list(sess.generate(prompt, GenConfig(method="sd", K=1, L=3, n_predict=n, spec_type=("mtp",),
                                                dynamic_draft=False)))[-1]
    st = done.stats
    drafted, accepted = st.proposed.get("mtp", (0, 0))
    out = {"equal": sess.last_tokens == ar, "n_tokens": len(ar), "drafted": drafted, "accepted": accepted,
           "head_ms_per_call": round(1e3 * st.draft_seconds / max(st.draft_calls, 1), 3),
           "speedup": "not measured (random weights: no real MTP head was reachable)",
           "placement": sess.target_model.placement.summary(), "llama_cpp": loaded["llama_cpp"]}
    sess.close()
    return out


def summary(r: dict) -> str:
    lines = [f"backends: {', '.join(r['backends'])}"] + ([f"SMOKE TEST, {r['smoke']}"] if "smoke" in r else [])
    dp = r["default_pair_shapes"]
    lines.append(f"placement (1.5B <- 0.5B shapes): target {dp['target']}, draft {dp['draft']}")
    lines += [f"  llama.cpp: {ln}" for ln in dp["llama_cpp"]]
    if "t7b" in r:
        lines.append(f"placement (7B shape): {r['t7b']['placement']}; " + "; ".join(r["t7b"]["llama_cpp"]))
    g = r["greedy_vs_ar"]
    for k, v in g.items():
        if k != "n_tokens":
            lines.append(f"greedy {k} vs AR over {g['n_tokens']} tokens: "
                         + ("equal" if v["equal"] else f"DIFFERENT from token {v['first_difference']}"))
    c = r.get("constrained_vs_ar", {})
    if "error" in c:
        lines.append(f"constrained (JSON schema): ERROR {c['error']}")
    for k, v in c.items():
        if isinstance(v, dict):
            lines.append(f"greedy {k} under a JSON schema vs AR over {c['n_tokens']} tokens: "
                         + ("equal" if v["equal"] else "DIFFERENT") + f", {v['forced']} tokens forced")
    for where in ("gpu", "cpu"):
        for name, c in r[f"curves_{where}"].items():
            pts = dict(zip(c["sizes"], c["ms"], strict=True))
            lines.append(f"{where.upper()} {name} ms per decode of n tokens: "
                         + ", ".join(f"{n}:{pts[n]:.2f}" for n in (1, 2, 4, 8, 16, 32, 64) if n in pts))
    lines.append(f"alpha {r['alpha']['value']} ({r['alpha']['source']})")
    for k, v in r["predicted"].items():
        for label, b in v.items():
            lines.append(f"predicted, {k}, {label}: {b['method']} K={b['K']} L={b['L']} "
                         f"{b['speedup_vs_ar']}x AR ({b['tok_per_s']} vs {b['ar_tok_per_s']} tok/s)")
    for label, v in r.get("recurrent_memories", {}).items():
        lines.append(f"greedy sd vs AR, {label} ({v['placement']}), {v['n_tokens']} tokens: "
                     + ("equal" if v["equal"] else "DIFFERENT"))
    m = r.get("mtp_head")
    if m:
        lines.append(f"greedy sd --spec-type mtp vs AR ({m['placement']}), {m['n_tokens']} tokens: "
                     + ("equal" if m["equal"] else "DIFFERENT")
                     + f"; head drafted {m['drafted']}, accepted {m['accepted']}, {m['head_ms_per_call']} ms per "
                     f"head call; speedup {m['speedup']}")
    lines.append(f"measured in {r['seconds']} s")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
