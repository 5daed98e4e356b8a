"""Rendering of `bench tables` results: markdown tables and PNG plots.

Pure functions of the summaries that tables.py computes (no models, no timing), kept apart
so they can be tested on synthetic results and re-run on a saved tables.json without
measuring again. PNGs use matplotlib's Agg backend (no display on the bench machines);
matplotlib comes with the `bench` extra and the plots are skipped with a message when it is
missing, because the numbers matter more than the pictures.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

DASH = "—"
SINGLE_DRAFT = ("sd", "gbv")  # constant along a K sweep: drawn dashed, as a reference line


def _num(x: float | None, fmt: str = "{:.2f}", suffix: str = "") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return DASH
    return fmt.format(x) + suffix


def _cols(datasets: list[str]) -> list[str]:
    return [*datasets, "avg"] if len(datasets) > 1 else list(datasets)


# --------------------------------------------------------------------------- markdown


def table1_markdown(t1: dict[str, dict], datasets: list[str]) -> str:
    """SpecTr-GBV Table 1 shape: one row per method, per dataset block efficiency (BE) and
    speedup vs AR (×), then the average over datasets."""
    cols = _cols(datasets)
    head = "| method | " + " | ".join(f"{d} BE | {d} ×" for d in cols) + " |"
    rows = [head, "|---" * (1 + 2 * len(cols)) + "|"]
    for label, row in t1.items():
        cells = []
        for d in cols:
            c = row.get(d) or {}
            cells += [_num(c.get("block_efficiency")), _num(c.get("speedup"), suffix="x")]
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def throughput_markdown(t1: dict[str, dict], datasets: list[str]) -> str:
    """tok/s medians per dataset; "(1.10x)" = median per-prompt ratio to llama.cpp's
    speculative loop on the same prompts, when the peer ran."""
    cols = _cols(datasets)
    rows = ["| method | " + " | ".join(cols) + " |", "|---" * (1 + len(cols)) + "|"]
    for label, row in t1.items():
        cells = []
        for d in cols:
            c = row.get(d) or {}
            s = _num(c.get("tok_per_s"), "{:.1f}")
            if c.get("vs_peer") is not None:
                s += f" ({c['vs_peer']:.2f}x)"
            if c.get("acceptance") is not None:
                s += f" (acc. {c['acceptance']:.0%})"
            cells.append(s)
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def _group(rows: list[dict]) -> tuple[list[float], list[str], dict[tuple[float, str], dict]]:
    values = list(dict.fromkeys(r["value"] for r in rows))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    return values, methods, {(r["value"], r["method"]): r for r in rows}


def ablation_markdown(rows: list[dict], name: str) -> str:
    """One row per swept value, per method BE / speedup / tok/s (single-draft methods in a
    K sweep repeat their K = 1 numbers: the reference line)."""
    if not rows:
        return "(no runs)"
    values, methods, by = _group(rows)
    head = f"| {name} | " + " | ".join(f"{m} BE | {m} × | {m} tok/s" for m in methods) + " |"
    out = [head, "|---" * (1 + 3 * len(methods)) + "|"]
    for v in values:
        cells = []
        for m in methods:
            r = by.get((v, m), {})
            cells += [_num(r.get("block_efficiency")), _num(r.get("speedup"), suffix="x"), _num(r.get("tok_per_s"), "{:.1f}")]
        out.append(f"| {v:g} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def report_markdown(meta: dict, machine: dict, t1: dict[str, dict], datasets: list[str],
                    ablations: dict[str, list[dict]], greedy: dict[str, bool], pngs: dict[str, Path]) -> str:
    """The whole tables.md: header (pair, settings, machine, command), Table 1, throughput,
    one section per ablation, the greedy-identity line."""
    K, L, T = meta["K"], meta["L"], meta["T"]
    counts = ", ".join(f"{d} {n}" for d, n in meta["prompts"].items())
    md = [
        "# localspec bench tables", "",
        f"target `{meta['target']}` <- draft `{meta['draft']}`; prompts: {counts}; "
        f"n_predict={meta['n_predict']}; K={K} L={L} T={T:g}; threads={meta['threads']}"
        + (" — INTERRUPTED, partial results" if meta.get("interrupted") else ""), "",
        f"Machine: {machine['cpu']} ({machine['cores']} cores), threads {machine['threads']}; "
        f"llama-cpp-python {machine['llama_cpp_python']}; "
        f"llama.cpp peer {machine.get('llama_cpp_peer') or 'not built'}; {machine['date']}", "",
        f"Command: `{machine['command']}`", "",
        f"## Table 1: block efficiency (BE) and speedup vs AR (×), K={K}, L={L}, T={T:g}", "",
        table1_markdown(t1, datasets), "",
        "BE = tokens per target call, pooled over prompts; × = median over prompts of "
        "tok/s ÷ AR tok/s on the same prompt (same process, interleaved); avg = mean over datasets.", "",
        "## Throughput (tok/s, median over prompts; (r x) = ratio to llama.cpp's speculative loop)", "",
        throughput_markdown(t1, datasets), "",
    ]  # fmt: skip
    if "table1" in pngs:
        md += [f"![Table 1]({pngs['table1'].name})", ""]
    fixed = {"K": f"L={L}, T={T:g}", "L": f"K={K}, T={T:g}", "T": f"K={K}, L={L}"}
    for name, rows in ablations.items():
        md += [f"## Ablation over {name} ({fixed.get(name, '')}; {', '.join(meta['ablation_datasets'])}: "
               f"first {meta['ablation_limit']} prompt(s) each)", "", ablation_markdown(rows, name), ""]  # fmt: skip
        if name in pngs:
            md += [f"![ablation {name}]({pngs[name].name})", ""]
    if greedy:
        md += [f"Greedy (T=0) outputs identical to AR for every lossless method: "
               f"{sum(greedy.values())}/{len(greedy)} prompts", ""]  # fmt: skip
    return "\n".join(md)


# --------------------------------------------------------------------------- PNG


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        print("matplotlib not installed (pip install 'localspec[bench]'): no plots", file=sys.stderr)
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_table1(t1: dict[str, dict], datasets: list[str], path: Path, title: str = "") -> Path | None:
    """Grouped bars: block efficiency (left) and speedup vs AR (right) per dataset."""
    plt = _pyplot()
    if plt is None:
        return None
    labels = [lab for lab in t1 if lab != "ar"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    width = 0.8 / max(len(labels), 1)
    for ax, key, ylab in ((axes[0], "block_efficiency", "block efficiency (tokens / target call)"),
                          (axes[1], "speedup", "speedup vs AR (wall clock)")):  # fmt: skip
        for j, lab in enumerate(labels):
            ys = [(t1[lab].get(d) or {}).get(key) for d in datasets]
            xs = [i + (j - (len(labels) - 1) / 2) * width for i in range(len(datasets))]
            ax.bar(xs, [y if y is not None else 0.0 for y in ys], width, label=lab)
        ax.set_xticks(range(len(datasets)), datasets)
        ax.set_ylabel(ylab)
        ax.grid(axis="y", alpha=0.3)
    axes[1].axhline(1.0, color="black", lw=0.8, ls="--")
    axes[1].legend(fontsize=7, loc="best")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_ablation(rows: list[dict], name: str, path: Path, title: str = "") -> Path | None:
    """Block efficiency and speedup vs the swept parameter, one line per method."""
    plt = _pyplot()
    if plt is None or not rows:
        return None
    values, methods, by = _group(rows)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, key, ylab in ((axes[0], "block_efficiency", "block efficiency"),
                          (axes[1], "speedup", "speedup vs AR")):  # fmt: skip
        for m in methods:
            pts = [(v, by[(v, m)].get(key)) for v in values if (v, m) in by and by[(v, m)].get(key) is not None]
            if pts:
                ls = "--" if name == "K" and m in SINGLE_DRAFT else "-"
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ls=ls, label=m)
        ax.set_xticks(values)
        ax.set_xlabel(name)
        ax.set_ylabel(ylab)
        ax.grid(alpha=0.3)
    axes[1].axhline(1.0, color="black", lw=0.8, ls="--")
    axes[0].legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_all(out: Path, t1: dict[str, dict], datasets: list[str], ablations: dict[str, list[dict]],
              title: str = "") -> dict[str, Path]:
    """table1.png and ablation_<name>.png in `out`; {name: path} of those written."""
    got: dict[str, Path] = {}
    if t1 and datasets:
        p = plot_table1(t1, datasets, out / "table1.png", title)
        if p:
            got["table1"] = p
    for name, rows in ablations.items():
        p = plot_ablation(rows, name, out / f"ablation_{name}.png", f"{title} — sweep over {name}")
        if p:
            got[name] = p
    return got
