"""`localspec bench suffix`: the suffix proposer's Python cost per iteration, no model.

The issue's bar: at most 1.5 ms of Python work per iteration with 100k tokens stored. The
corpus is localspec's own source, cut into word / punctuation / space tokens (a Zipf-like
vocabulary, as real token streams are): every file but one is stored, as a long-running
server's store would hold earlier requests. Then the proposer runs a turn the way the loop
does -- propose (sync the history into the store, match, walk, build the trie), "verify"
against the text the turn really continues with, commit the accepted tokens and one more --
on two workloads:

- edit: the turn's answer repeats a stored file (a follow-up that returns the edited file);
- new: the answer is the held-out file (only common code patterns match).

With --shared the stored files are a pool's shared store of finished requests (what `serve
-np N` slots publish) and each turn runs on a slot's view: its own store, which holds only
the turn, plus the shared one -- two lookups per propose, under the shared store's lock.

Reported: the per-iteration cost (median, p99, max), drafted / accepted tokens per
iteration, the cost of storing a document per token, and of an eviction (the rebuild at the
memory bound).
"""

from __future__ import annotations

import argparse
import re
import statistics
import time
from importlib import resources

import numpy as np

from localspec import tools
from localspec.verify import Decision

WORD = re.compile(r"\w+|[^\w\s]|\s+")


def corpus() -> list[list[int]]:
    """localspec's .py files as token-id lists (one vocabulary over all of them), sorted by path."""
    vocab: dict[str, int] = {}
    root = resources.files("localspec")
    files = sorted((p for p in _walk(root) if p.name.endswith(".py")), key=lambda p: str(p))
    return [[vocab.setdefault(w, len(vocab)) for w in WORD.findall(p.read_text(encoding="utf-8"))] for p in files]


def _walk(node):
    for child in node.iterdir():
        if child.is_dir():
            yield from _walk(child)
        else:
            yield child


def run_turn(store, prompt: list[int], answer: list[int], L: int, depth: int,
             min_prob: float) -> tuple[list[float], list[float], int, int]:
    """One turn on `store`: (wall and CPU seconds per propose, tokens drafted, accepted).
    The first propose of a turn also stores its prompt: it is timed apart (`first`)."""
    prop = tools.suffix_proposer(store, depth, min_prob)
    history, i = list(prompt), 0
    wall, cpu, drafted, accepted = [], [], 0, 0
    while i < len(answer):
        t0, c0 = time.perf_counter(), time.thread_time()
        trie = prop.propose(tools.draft_request(history, 1, L))
        cpu.append(time.thread_time() - c0)
        wall.append(time.perf_counter() - t0)
        draft = [n.token for n in trie.nodes] if trie is not None else []
        tau = 0
        while tau < len(draft) and i + tau < len(answer) and draft[tau] == answer[i + tau]:
            tau += 1
        drafted += len(draft)
        accepted += tau
        step = answer[i : i + tau + 1]  # the accepted tokens and the target's own next one
        history += step
        i += len(step)
        if trie is not None:
            prop.accept(trie, Decision(0, tau, step[-1]))
    return wall, cpu, drafted, accepted


def main(a: argparse.Namespace) -> int:
    docs = corpus()
    held = max(range(len(docs)), key=lambda k: len(docs[k]) if len(docs[k]) < 6000 else 0)
    stored = [d for k, d in enumerate(docs) if k != held]
    pool = [t for d in stored for t in d]
    # the stored corpus cut (or repeated) to --tokens, in documents of the files' sizes
    want, out, k = a.tokens, [], 0
    while sum(map(len, out)) < want:
        out.append(stored[k % len(stored)])
        k += 1
    shared = tools.shared_suffix(a.max_tokens) if a.shared else None
    store = tools.suffix_store(a.max_tokens) if shared is None else shared.store
    t0 = time.perf_counter()
    for d in out:
        if shared is None:
            store.insert(d)
        else:
            shared.publish(d)
    insert_s = time.perf_counter() - t0
    print(f"corpus: {len(docs)} files of localspec's source, {len(set(pool))} distinct tokens; "
          f"stored {store.live} tokens in {store.n_docs} documents ({len(store.index)} pairs)")
    print(f"insert: {insert_s * 1e3:.0f} ms = {insert_s / max(store.live, 1) * 1e6:.2f} us per token")
    edit = max((d for d in stored if len(d) < 3000), key=len)  # a mid-sized stored file
    fresh = max(pool) + 1  # every 50th token of the answer is one the store never saw
    edited = [fresh + i if i % 50 == 49 else t for i, t in enumerate(edit)]
    prompt_of = {"edit": [0, 1, 2, *edit], "new": docs[held][:200]}
    answer_of = {"edit": edited, "new": docs[held][200:]}
    run_turn(tools.suffix_store(a.max_tokens), stored[0][:100], stored[0][100:400], a.L, a.depth, a.min_prob)  # numpy's first calls
    print(f"\nL={a.L} depth={a.depth} min_prob={a.min_prob}{'; a slot over the shared store' if shared else ''}; "
          "ms of Python per propose, wall (CPU); the first one of a turn also stores its prompt:\n")
    print("| workload | prompt / answer tokens | first | median | p99 | max | drafted / iter | accepted / iter |")
    print("|---|---|---|---|---|---|---|---|")
    for name in ("edit", "new"):
        turn_store = store if shared is None else tools.slot_suffix(shared, a.max_tokens)  # a fresh slot
        wall, cpu, drafted, accepted = run_turn(turn_store, prompt_of[name], answer_of[name], a.L, a.depth, a.min_prob)
        w, c = np.array(wall[1:]) * 1e3, np.array(cpu[1:]) * 1e3
        n = len(wall)
        cells = [f"{f(w):.3f} ({f(c):.3f})" for f in (statistics.median, lambda x: np.percentile(x, 99), np.max)]
        print(f"| {name} | {len(prompt_of[name])} / {len(answer_of[name])} | {wall[0] * 1e3:.3f} ({cpu[0] * 1e3:.3f}) "
              f"| {' | '.join(cells)} | {drafted / n:.2f} | {accepted / n:.2f} |")
    t0 = time.perf_counter()
    store.max_tokens = store.live - 1
    store.insert([1, 2])  # over the bound: evict to 3/4 of it and rebuild
    print(f"\neviction at {store.max_tokens + 1} tokens (rebuild of {store.live}): "
          f"{(time.perf_counter() - t0) * 1e3:.0f} ms")
    return 0


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tokens", type=int, default=100_000, help="tokens stored before the turns run")
    p.add_argument("--max-tokens", type=int, default=1_000_000, help="the store's memory bound")
    p.add_argument("-L", dest="L", type=int, default=16, help="longest draft")
    p.add_argument("--depth", type=int, default=24, help="longest suffix matched")
    p.add_argument("--min-prob", type=float, default=0.1, help="a drafted token's least estimated chance")
    p.add_argument("--shared", action="store_true",
                   help="store the corpus as serve -np N's shared store and run each turn as a slot (two stores)")
