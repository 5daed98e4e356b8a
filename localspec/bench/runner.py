"""The one bench runner: configurations, the run record, and how a prompt is measured.

`bench speed` and `bench tables` differ in WHAT they run (a methods x K:L grid; Table 1
columns plus K/L/T sweeps) and in how they summarize it, not in how one generation is
measured; so both build `Job`s of `Spec`s and hand them to `Runner.run_all`, which runs
every spec of a prompt back to back on one loaded pair (AR first, the peer last, or the
whole sequence reversed for a job marked `reverse`) and records each generation as a `Run`. Everything goes through the public Session API: the
prompt reaches localspec as chat messages (or raw text) and llama.cpp's own tool as the
text `Session.render` makes of the same messages.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from localspec.bench import peer
from localspec.bench.common import Prompt
from localspec.config import DRAFT_LOOKAHEAD, GenConfig, SamplingConfig
from localspec.constrain.spec import ConstraintSpec
from localspec.events import Done, Event
from localspec.session import Prompt as SessionPrompt
from localspec.session import Session

PEER = "llama.cpp"
SINGLE_DRAFT = ("sd", "gbv")


@dataclass(frozen=True)
class Spec:
    """One decoding configuration: a table column or an ablation point.

    Frozen so it can key dicts: two ablations asking for the same configuration on the same
    prompt share one run instead of measuring it twice. `free`: `auto` may choose K and L
    itself (else K is fixed and L caps its dynamic length).
    """

    method: str
    K: int = 1
    L: int = 0
    T: float = 0.0
    free: bool = False
    proposers: str = ""  # --spec-type (localspec: draft / ngram; the peer: llama.cpp's names)
    hint: bool = False  # auto's draft hint (--draft-hint)
    cold: bool = False  # auto without the shipped priors (costmodel/priors.py): `auto-cold`
    predict: bool = False  # the prompt's quoted text as OpenAI's `prediction` (quoted_text): `auto-pred`
    myopic: bool = False  # the draft length decided on the next token alone (draft_lookahead 1): `auto-myopic`

    @property
    def label(self) -> str:
        via = f" [{self.proposers}]" if self.proposers else ""
        if self.method == "ar":
            return "ar"
        if self.method == PEER:
            return f"{PEER}{via} n_max={self.L}"
        if self.method == "auto":
            return (("auto" if self.free else f"auto K={self.K} L<={self.L}") + via + (" hint" if self.hint else "")
                    + (" cold" if self.cold else "") + (" pred" if self.predict else "") + (" myopic" if self.myopic else ""))
        return f"{self.method}{via} K={self.K} L={self.L}"

    def gen(self, a: argparse.Namespace, seed: int, constraint: ConstraintSpec | None = None,
            prompt: str = "") -> GenConfig:
        """The GenConfig of this spec under the bench flags `a` (n_predict, draft_temp and,
        for a free `auto`, --auto-free); `constraint`: the prompt's (its schema), the same for
        every spec of the prompt, AR included, so ratios compare like with like; `prompt`: the
        text a `predict` spec takes its prediction from."""
        free = self.method == "auto" and self.free and getattr(a, "auto_free", True)
        return GenConfig(
            method=self.method, K=self.K, L=max(self.L, 1), n_predict=a.n_predict, seed=seed,
            draft_temp=a.draft_temp, sampling=SamplingConfig(temp=self.T), auto_K=free, auto_L=free,
            spec_type=tuple(self.proposers.split(",")) if self.proposers else None, draft_hint=self.hint,
            constraint=constraint, prediction=quoted_text(prompt) if self.predict else None,
            draft_lookahead=1 if self.myopic else DRAFT_LOOKAHEAD,
        )  # fmt: skip


def quoted_text(prompt: str) -> str | None:
    """What an edit prompt quotes (everything after its first blank line: the split sets'
    edit prompts are an instruction, a blank line, then the code): the file a client that
    edits it would send as its `prediction`. None when the prompt has no blank line."""
    _, sep, rest = prompt.partition("\n\n")
    return rest if sep and rest.strip() else None


def spec(method: str, K: int = 1, L: int = 0, T: float = 0.0) -> Spec:
    """Normalised Spec: single-draft methods always have K = 1 and AR has no K or L, so a
    K sweep of `sd` collapses to one run per prompt (its reference line)."""
    if method == "ar":
        return Spec("ar", 1, 0, float(T))
    return Spec(method, 1 if method in SINGLE_DRAFT else int(K), int(L), float(T))


@dataclass
class Run:
    """One measured generation (localspec or the peer): the row every bench table is made of.

    `label` is the column it was run for (Spec.label); counts of 0 mean unknown (the peer
    reports neither target calls nor iterations).
    """

    dataset: str
    prompt_id: str
    method: str
    K: int
    L: int
    T: float
    tok_per_s: float
    n_tokens: int = 0
    target_calls: int = 0
    seconds: float = 0.0
    draft_s: float = 0.0
    verify_s: float = 0.0
    overhead_s: float = 0.0
    iterations: int = 0
    mean_accepted: float = 0.0
    reason: str = ""
    text: str = ""
    label: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def spec(self) -> Spec:
        return Spec(self.method, self.K, self.L, self.T)

    @property
    def block_efficiency(self) -> float | None:
        """Tokens per target call; None when the calls are unknown (the peer)."""
        return self.n_tokens / self.target_calls if self.target_calls else None

    def to_json(self) -> dict:
        return {**asdict(self), "block_efficiency": self.block_efficiency}


@dataclass
class Job:
    """The specs to run on one prompt, in order, with one seed; `extra` goes into every
    run's extra (e.g. whether the prompt is an ablation prompt)."""

    prompt: Prompt
    specs: list[Spec]
    seed: int
    peer: Spec | None = None
    extra: dict = field(default_factory=dict)
    more_peers: list[Spec] = field(default_factory=list)  # other llama.cpp --spec-type settings
    # run the sequence back to front (the peers first, AR last): a column's position within a
    # prompt moves its speed (docs/bench.md#paired), so `bench speed` alternates it by prompt
    reverse: bool = False

    @property
    def peers(self) -> list[Spec]:
        return ([self.peer] if self.peer is not None else []) + self.more_peers


def drain(events: Iterable[Event], keep: list[Event] | None = None) -> Done:
    """The Done that ends a generation, after consuming its events (appended to `keep`)."""
    done = None
    for ev in events:
        if keep is not None:
            keep.append(ev)
        if isinstance(ev, Done):
            done = ev
    if done is None:
        raise RuntimeError("a generation ended without its Done event")
    return done


def messages(p: Prompt) -> list[dict[str, str]]:
    return [{"role": "user", "content": p.text}]


def session_prompt(p: Prompt) -> SessionPrompt:
    """What `Session.generate` gets: the user turn as chat messages, or the raw text."""
    return messages(p) if p.chat else p.text


def peer_prompt(sess: Session, p: Prompt) -> str:
    """The text llama-speculative-simple must get to see localspec's prompt tokens."""
    if not p.chat:
        return p.text
    text = sess.render(messages(p))
    return peer.to_peer_prompt(text, add_bos=bool(sess.bos_text), bos_text=sess.bos_text)


def peer_paths(enabled: bool, target: str, draft: str | None) -> tuple[Path, Path] | None:
    """Model files for the peer column, or None (with one message) when it cannot run."""
    from localspec.models import resolve_model

    if not enabled or draft is None:
        return None
    if peer.peer_binaries() is None:
        print(f"llama.cpp peer not built (run {peer.BUILD_SCRIPT}): no peer column", file=sys.stderr)
        return None
    return resolve_model(target), resolve_model(draft)


class Runner:
    """Runs specs on one session and the peer on the same prompts.

    `a` holds the bench flags the runs read: n_predict, draft_temp, threads, ctx,
    peer_p_min (and auto_free for `bench speed`). The peer column drops out for the rest
    of the bench, with one message, the first time llama.cpp's tool fails.
    """

    def __init__(self, sess: Session, a: argparse.Namespace, peer_models: tuple[Path, Path] | None = None):
        self.sess = sess
        self.a = a
        self.peer_models = peer_models

    def local(self, p: Prompt, s: Spec, seed: int) -> Run:
        """One localspec generation of prompt p under spec s (the suffix store emptied first:
        the same prompt under an earlier spec must not be in it; with --first-turn, what auto
        learned too, so each prompt starts from the priors, or from none for a cold spec)."""
        self.sess.forget_lookups()
        if getattr(self.a, "first_turn", False):  # every prompt is a fresh process's first turn
            self.sess.forget_learning(priors=not s.cold)
        done = drain(self.sess.generate(session_prompt(p), s.gen(self.a, seed, p.constraint, p.text)))
        st = done.stats
        tau = sum(st.accepted_lengths) / len(st.accepted_lengths) if st.accepted_lengths else 0.0
        js = st.to_json()
        return Run(
            p.dataset, p.id, s.method, s.K, s.L, s.T, st.tok_per_s, st.n_tokens, st.target_calls,
            st.seconds, st.draft_seconds, st.verify_seconds, st.overhead_seconds, st.iterations, tau,
            done.reason, done.text, s.label, {"choice": st.choice_note, "method": st.method, "ran": st.ran,
                                               "predicted": [list(x) for x in st.predicted],
                                               # what auto expected of the iterations it ran:
                                               # [tokens, seconds, the AR step it priced]
                                               "forecast": ([*st.forecast, 1.0 / st.ar_estimate]
                                                            if st.forecast and st.ar_estimate else None),
                                               "stacked": st.stacked,
                                               # per drafter: {drafted, accepted, acceptance}
                                               "proposers": js["proposers"],
                                               # the constraint's kind (None: none) and the tokens
                                               # its grammar forced (the `grammar` drafter's)
                                               "constraint": js["constraint"], "forced": js["forced"]},
        )  # fmt: skip

    def peer(self, p: Prompt, s: Spec, seed: int) -> Run:
        """llama-speculative-simple on the same prompt tokens; s.L is its --spec-draft-n-max."""
        assert self.peer_models is not None
        text = peer_prompt(self.sess, p)
        a = self.a
        schema = {"json_schema": p.schema_text} if p.schema is not None else {}  # its --json-schema
        r = peer.run_speculative_simple(
            *self.peer_models, text, n_predict=a.n_predict, threads=a.threads or 2, draft_max=s.L,
            draft_min=0, p_min=a.peer_p_min, temp=s.T, seed=seed, ctx_size=a.ctx,
            spec_type=s.proposers or "draft-simple", **schema,
        )  # fmt: skip
        # its speed over the tokens localspec's figure covers (its own covers up to 64 more)
        tok_per_s, n_tokens, seconds = r.at(a.n_predict)
        return Run(
            p.dataset, p.id, PEER, 1, s.L, s.T, tok_per_s, n_tokens, 0, seconds, text=r.text or "",
            label=s.label, extra={"acceptance": r.acceptance, "command": r.command, "drafted": r.n_drafted,
                                  "accepted": r.n_accepted, "constraint": "json_schema" if schema else None,
                                  "tool_tok_per_s": r.tok_per_s, "tool_n_tokens": r.n_predict},
        )  # fmt: skip

    def run_all(self, jobs: Sequence[Job], desc: str) -> tuple[list[Run], bool]:
        """Every job's specs, then its peer runs (back to front where the job says
        `reverse`); (runs, interrupted). Each run's extra records its position in the
        prompt's sequence. Ctrl-C stops the bench but keeps what was measured, so a long run
        still writes its results."""
        from tqdm import tqdm

        runs: list[Run] = []
        interrupted = False
        with_peer = [len(j.peers) if self.peer_models is not None else 0 for j in jobs]
        total = sum(len(j.specs) + w for j, w in zip(jobs, with_peer, strict=True))
        bar = tqdm(total=total, desc=desc, unit="run", file=sys.stderr, dynamic_ncols=True)
        try:
            for job in jobs:
                p = job.prompt
                steps = [(False, s) for s in job.specs] + [(True, s) for s in job.peers]
                for pos, (is_peer, s) in enumerate(reversed(steps) if job.reverse else steps):
                    if is_peer and self.peer_models is None:  # not built, or failed earlier
                        continue
                    bar.set_postfix_str(f"{p.id} {s.label}" + ("" if is_peer else f" T={s.T:g}"))
                    if is_peer:
                        try:
                            r = self.peer(p, s, job.seed)
                        except (peer.PeerRunError, peer.PeerNotBuiltError) as e:
                            print(f"\nllama.cpp peer failed, no more peer runs: {e}", file=sys.stderr)
                            self.peer_models = None
                            bar.update(1)
                            continue
                    else:
                        r = self.local(p, s, job.seed)
                        r.extra.update(job.extra)
                    r.extra.update(position=pos, reversed=job.reverse)  # where in the prompt's sequence it ran
                    runs.append(r)
                    bar.update(1)
        except KeyboardInterrupt:
            interrupted = True
            print("\ninterrupted: writing the results measured so far", file=sys.stderr)
        finally:
            bar.close()
        return runs, interrupted
