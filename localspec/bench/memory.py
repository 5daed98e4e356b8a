"""`localspec bench memory`: what each memory kind's rollback path costs, beside llama.cpp.

A rejected draft is undone differently per memory (decode/state.py): attention drops its
cells; a hybrid/recurrent target with state snapshots rolls back in place; one without
(or --rs-snapshots 0) scores on a branch copy and pays a catch-up decode for a partly
accepted draft; a recurrent draft evaluates what it kept again. This bench runs AR and sd on
each pair given (tiny random-weight models from scripts/write_tiny_models.py by default),
medians over the prompts, and reports tok/s vs AR, ms per iteration in the target
(verification plus catch-up), in the draft, and in Python (the loop's own work), and whether
llama.cpp's llama-speculative-simple (same sources; it uses checkpoints on such models)
writes the same greedy text.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from localspec.bench.common import machine_info, median, write_json
from localspec.bench.runner import drain
from localspec.config import GenConfig, SamplingConfig

PROMPTS = ("Write a story about a robot who learns to paint.", "List the planets of the solar system.",
           "Explain how a hash map works.")
# (label, target file, draft file, --rs-snapshots) in a tiny-model folder
TINY = (("attention (qwen3moe)", "qwen3moe", 16), ("hybrid, snapshots (qwen35)", "qwen35", 16),
        ("hybrid, branch (qwen35, --rs-snapshots 0)", "qwen35", 0), ("recurrent, branch (mamba2)", "mamba2", 0))


def main(a: argparse.Namespace) -> int:
    from localspec.bench import peer
    from localspec.loading import open_session
    from localspec.session import SessionOptions

    d = Path(a.tiny)
    if not (d / "qwen35.gguf").is_file():
        print(f"no tiny models in {d}: write them with `python scripts/write_tiny_models.py {d}`", file=sys.stderr)
        return 2
    rows = []
    for label, arch, snaps in TINY:
        t, dr = d / f"{arch}.gguf", d / f"{arch}-draft.gguf"
        sess = open_session(str(t), str(dr), SessionOptions(threads=a.threads, rs_snapshots=snaps, n_ctx=1024))
        greedy = SamplingConfig(temp=0.0)
        ar_rate, rate, tgt_ms, dft_ms, py_ms, same, peer_same, tau = [], [], [], [], [], [], [], []
        for p in PROMPTS:
            ar = drain(sess.generate(p, GenConfig(method="ar", n_predict=a.n_predict, sampling=greedy)))
            sd = drain(sess.generate(p, GenConfig(method="sd", L=a.L, n_predict=a.n_predict, sampling=greedy,
                                                  dynamic_draft=False)))
            st = sd.stats
            it = max(st.iterations, 1)
            ar_rate.append(ar.stats.tok_per_s)
            rate.append(st.tok_per_s)
            tgt_ms.append(1e3 * st.verify_seconds / it)
            dft_ms.append(1e3 * st.draft_seconds / it)
            py_ms.append(1e3 * st.overhead_seconds / it)
            tau.append(sum(st.accepted_lengths) / it)
            same.append(sd.text == ar.text)
            if peer.peer_binaries() is not None:
                r = peer.run_speculative_simple(t, dr, p, a.n_predict, a.threads, a.L, 0, 0.0)
                norm = sd.text.replace("\r\n", "\n").replace("\r", "\n")
                peer_same.append(bool(r.text) and r.text.startswith(norm))
        sess.close()
        rows.append({"path": label, "ar_tok_per_s": median(ar_rate), "sd_vs_ar": median(rate) / median(ar_rate),
                     "accepted_per_iter": median(tau), "target_ms_per_iter": median(tgt_ms),
                     "draft_ms_per_iter": median(dft_ms), "python_ms_per_iter": median(py_ms),
                     "sd_text_is_ar": all(same), "peer_text_is_ours": all(peer_same) if peer_same else None})
    print(f"sd L={a.L}, greedy, {a.n_predict} tokens, -t {a.threads}, medians over {len(PROMPTS)} prompts")
    print("| path | AR tok/s | sd / AR | accepted/iter | target ms/iter | draft ms/iter | Python ms/iter | sd = AR | llama.cpp = ours |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        peer_s = "peer not built" if r["peer_text_is_ours"] is None else ("yes" if r["peer_text_is_ours"] else "NO")
        print(f"| {r['path']} | {r['ar_tok_per_s']:.1f} | {r['sd_vs_ar']:.2f} | {r['accepted_per_iter']:.2f} | "
              f"{r['target_ms_per_iter']:.2f} | {r['draft_ms_per_iter']:.2f} | {r['python_ms_per_iter']:.2f} | "
              f"{'yes' if r['sd_text_is_ar'] else 'NO'} | {peer_s} |")
    if a.out:
        write_json(a.out, {"machine": machine_info(a.threads), "rows": rows})
        print(f"wrote {a.out}", file=sys.stderr)
    return 0 if all(r["sd_text_is_ar"] and r["peer_text_is_ours"] is not False for r in rows) else 1


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tiny", default="bench/results/tmp/tiny", help="folder of scripts/write_tiny_models.py's files")
    p.add_argument("-n", "--n-predict", dest="n_predict", type=int, default=64)
    p.add_argument("-L", type=int, default=5, help="draft length (fixed)")
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("--out", default=None, help="also write the rows as JSON here")
