"""Micro-benchmark of the verifiers: milliseconds per call, median over repeats.

    python -m localspec.bench.verify_speed [--K 4 --L 8 --V 151936 --repeats 30]

Inputs imitate one speculative iteration: K drafts of L tokens sampled from the draft rows
along a consistent draft tree (drafts sharing a prefix share its rows), target rows along
each draft plus the bonus row. Columns:
- full: float32 softmax rows over all V entries (temperature > 0, no truncation);
- top-k full width: the same rows truncated to their top-k entries, still V wide;
- compacted: the truncated rows remapped to the union of their supports (what the engine
  passes; V' in the header);
- greedy: one-hot target rows (temperature 0), V wide, auto-detected fast path.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

from localspec.verify import VERIFIERS, NumpyRNG

Inputs = tuple[np.ndarray, np.ndarray, np.ndarray]


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max())
    return (e / e.sum()).astype(np.float32)


def _truncate(row: np.ndarray, k: int) -> np.ndarray:
    out = np.zeros_like(row)
    top = np.argpartition(row, -k)[-k:]
    out[top] = row[top] / row[top].sum(dtype=np.float64)
    return out


def make_inputs(K: int, L: int, V: int, seed: int, topk: int = 0) -> Inputs:
    """(p, q, x) along a draft tree; rows truncated to top-k when topk > 0."""
    g = np.random.default_rng(seed)
    base = (g.standard_normal(V) * 2.5).astype(np.float32)
    cache: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]] = {}

    def rows(prefix: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        if prefix not in cache:
            noise = g.standard_normal((2, V)).astype(np.float32)
            p = _softmax(base + noise[0])
            q = _softmax(base + 0.9 * noise[0] + 0.45 * noise[1])
            if topk:
                p, q = _truncate(p, topk), _truncate(q, topk)
            cache[prefix] = (p, q)
        return cache[prefix]

    sampler = NumpyRNG(g)
    x = np.zeros((K, L), dtype=np.int64)
    p = np.zeros((K, L + 1, V), dtype=np.float32)
    q = np.zeros((K, L, V), dtype=np.float32)
    for k in range(K):
        for i in range(L + 1):
            pr, qr = rows(tuple(x[k, :i]))
            p[k, i] = pr
            if i < L:
                q[k, i] = qr
                x[k, i] = sampler.choose(qr)
    return p, q, x


def compact(p: np.ndarray, q: np.ndarray, x: np.ndarray) -> Inputs:
    """Remap to the union of the supports (what the engine does after truncation)."""
    vocab = np.flatnonzero((p > 0).any(axis=(0, 1)) | (q > 0).any(axis=(0, 1)))
    return p[..., vocab], q[..., vocab], np.searchsorted(vocab, x)


def greedy_inputs(p: np.ndarray, q: np.ndarray, x: np.ndarray) -> Inputs:
    """One-hot target rows at each row's argmax (temperature 0 for the target)."""
    hot = np.zeros_like(p)
    np.put_along_axis(hot, p.argmax(axis=-1)[..., None], 1.0, axis=-1)
    return hot, q, x


def time_calls(f: Callable, inputs: list[Inputs], repeats: int) -> tuple[float, float]:
    """Median (wall, CPU) milliseconds per call over `repeats` calls cycling through `inputs`.
    CPU time (this thread) is what a call costs on an idle core; on a busy machine the wall
    time is higher."""
    wall, cpu = [], []
    for r in range(repeats):
        p, q, x = inputs[r % len(inputs)]
        rng = NumpyRNG(r)
        t0, c0 = time.perf_counter(), time.thread_time()
        f(rng, p, q, x)
        cpu.append((time.thread_time() - c0) * 1e3)
        wall.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(wall), statistics.median(cpu)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--K", type=int, default=4, help="drafts per call")
    ap.add_argument("--L", type=int, default=8, help="tokens per draft")
    ap.add_argument("--V", type=int, default=151_936, help="vocabulary size")
    ap.add_argument("--topk", type=int, default=50, help="truncation for the top-k columns")
    ap.add_argument("--repeats", type=int, default=30, help="timed calls per cell (median)")
    ap.add_argument("--inputs", type=int, default=3, help="distinct input sets to cycle through")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--verifiers", default=",".join(VERIFIERS), help="comma-separated names")
    a = ap.parse_args(argv)
    names = [n.strip() for n in a.verifiers.split(",") if n.strip()]
    unknown = [n for n in names if n not in VERIFIERS]
    if unknown:
        ap.error(f"unknown verifier(s) {unknown}; choose from {sorted(VERIFIERS)}")
    seeds = range(a.seed, a.seed + a.inputs)
    full = [make_inputs(a.K, a.L, a.V, s) for s in seeds]
    trunc = [make_inputs(a.K, a.L, a.V, s, a.topk) for s in seeds]
    comp = [compact(*t) for t in trunc]
    hot = [greedy_inputs(*t) for t in full]
    width = int(np.median([c[0].shape[-1] for c in comp]))
    cols = [
        ("full", full),
        (f"top-{a.topk}, full width", trunc),
        (f"compacted (V'~{width})", comp),
        ("greedy", hot),
    ]
    print(
        f"K={a.K}, L={a.L}, V={a.V}, float32 rows; ms per call, median of {a.repeats} calls: "
        "wall (CPU)\n"
    )
    print("| verifier | " + " | ".join(c for c, _ in cols) + " |")
    print("|---" * (len(cols) + 1) + "|")
    for n in names:
        cells = [
            "{:.3f} ({:.3f})".format(*time_calls(VERIFIERS[n], inp, a.repeats)) for _, inp in cols
        ]
        print(f"| {n} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
