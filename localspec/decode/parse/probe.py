"""The judge probe: what `bench parse calibrate` reads off the KV state, below the Session API
(reached through localspec.tools.parse_probe, the one door frontends have to it).

Why this module exists: calibrating PARSE's judges needs numbers no generation reports --
the target's per-token gaps / nll / entropy over a draft answer and the yes-share of every
judge phrasing, read from ONE batched target pass, plus the draft's own view of its answer.
So the probe drives the decoding core's own pieces (`draft_answer`, `judge_pass`,
`answer_features`) on the session's KV states, the same pieces PARSE runs. Nothing else in
localspec/bench goes below `Session`; the prompt tokens still come from it (the tokens its
last `generate` evaluated), so the probe measures exactly the prompt PARSE sees.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from localspec.config import GenConfig
from localspec.errors import ConfigError
from localspec.runtime import RuntimeSession


@dataclass
class DraftAnswer:
    """The draft's greedy answer as PARSE's first round drafts it, with its own gaps / nll."""

    tokens: list[int]
    text: str
    gaps: np.ndarray
    nll: np.ndarray
    seconds: float


@dataclass
class JudgeMaterial:
    """One target pass over a draft answer: the raw material of every judge."""

    cuts: list[int]
    whole: dict[str, float]  # yes-share of each phrasing on the whole answer
    prefix: list[float]  # yes-share of the default phrasing at each cut (last = whole answer)
    gaps: np.ndarray | None
    nll: np.ndarray | None
    entropy: np.ndarray | None
    agree: list[int]  # 1 where the target's argmax is the draft's token
    seconds: float


class Probe:
    """Judge raw material on one loaded pair (a RuntimeSession with a draft)."""

    DEFAULT_PHRASING = "code"

    def __init__(self, sess: RuntimeSession) -> None:
        from localspec.decode.parse.judges import PHRASINGS, render_suffix, verdict_tokens

        if sess.draft is None or sess.draft_model is None:
            raise ConfigError("bench parse calibrate needs a draft model (-md)")
        self.sess = sess
        tm = sess.target_model
        self.phrasings = list(PHRASINGS.values())
        self.default = list(PHRASINGS).index(self.DEFAULT_PHRASING)
        self.suffixes = [
            tm.tokenize(render_suffix(sess.template, ph.question), add_special=False, parse_special=True)
            for ph in self.phrasings
        ]
        self.verdicts = [verdict_tokens(tm, ph) for ph in self.phrasings]
        self.reduce_ids = np.unique(np.concatenate([v.ids for v in self.verdicts]))

    def draft_alone(self, toks: list[int], cfg: GenConfig) -> DraftAnswer:
        """Greedy draft answer as PARSE's first round drafts it, plus the draft's own gaps/nll."""
        from localspec.decode.emitter import Emitter
        from localspec.decode.parse.loop import draft_answer
        from localspec.decode.parse.one_pass import answer_features
        from localspec.decode.state import MAIN
        from localspec.decode.turn import Turn
        from localspec.events import Stats
        from localspec.stopflag import StopFlag

        sess = self.sess
        tgt, dft = sess.target, sess.draft
        assert dft is not None
        tgt.sync(toks)
        em = Emitter(sess.target_model, cfg.n_predict, cfg.stop)
        turn = Turn(sess.target_model, tgt, cfg, em, Stats(), np.random.default_rng(cfg.seed), StopFlag(),
                    sess.draft_model, dft)
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
        assert sess.draft_model is not None
        return DraftAnswer(d.tokens, sess.draft_model.detokenize(d.tokens),
                           f.gaps if f else np.zeros(0), f.nll if f else np.zeros(0), secs)

    def judge(self, toks: list[int], answer: list[int]) -> JudgeMaterial:
        """One target pass: every phrasing on the whole answer + the default one at each cut."""
        from localspec.decode.parse.one_pass import Copy, judge_pass
        from localspec.decode.parse.segment import boundaries, choose_cuts

        sess = self.sess
        pieces = [sess.target_model.piece(t) for t in answer]
        cuts = choose_cuts(boundaries(pieces), len(answer), 8, 8)
        copies = [Copy(len(answer), s) for s in self.suffixes]
        copies += [Copy(c, self.suffixes[self.default]) for c in cuts[:-1]]
        tgt = sess.target
        tgt.sync(toks)
        t0 = time.perf_counter()
        res = judge_pass(tgt, answer, copies, self.reduce_ids, want_nll=True, want_entropy=True)
        secs = time.perf_counter() - t0
        tgt.repair()
        whole = {}
        for c, (ph, v) in enumerate(zip(self.phrasings, self.verdicts, strict=True)):
            if c in res.copy_logits:
                whole[ph.name] = v.score(res.copy_logits[c][np.searchsorted(self.reduce_ids, v.ids)])
        vd = self.verdicts[self.default]
        prefix = []
        for i in range(len(cuts) - 1):
            lg = res.copy_logits.get(len(self.phrasings) + i)
            prefix.append(vd.score(lg[np.searchsorted(self.reduce_ids, vd.ids)]) if lg is not None else 1.0)
        prefix.append(whole.get(self.DEFAULT_PHRASING, 1.0))
        a = res.answer
        agree = [int(x == y) for x, y in zip(a.argmax[: len(answer)].tolist(), answer, strict=True)]
        return JudgeMaterial(cuts, whole, prefix, a.gaps, a.nll, a.entropy, agree, secs)
