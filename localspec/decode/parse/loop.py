"""PARSE (docs/algorithms.md#parse): the draft writes the whole answer, the target judges the
answer and its prefixes in ONE decode, keeps the longest valid prefix and writes the rest.

One round, top to bottom:
  1. draft   the draft model writes the rest of the answer (to EOG, a stop string, the token
             budget or what one target batch holds), streamed as Drafted events;
  2. cut     boundaries (line / sentence ends, blank lines) -> at most N cut points, the
             whole answer last (segment.py);
  3. judge   one llama_decode of pending + answer (+ one judge-suffix copy per cut for the
             prompt/hybrid judges), sequence ids doing the paper's attention mask
             (parse_pass.py); --parse-two-stage judges the whole answer first and decodes
             the prefix copies only when it is rejected;
  4. decide  t* = the cut before the first score under the threshold;
  5. verify  the rejected tail is a free token-level draft: the target's rows for it came
             with the same pass, so a lossless verifier (localspec.verify, gbv by default)
             extends t* with no extra decode and yields the target's next token;
  6. commit  the target keeps its KV for the accepted prefix (nothing is re-evaluated);
  7. resume  "iterative": the target writes to the end of the current line, then the draft
             re-drafts the rest (next round); "target": the target finishes alone;
             "spec": the target finishes with lossless speculative decoding (PARSE
             composed with sd / mdbv: the part after the cut is exactly the target's law).

Lossy by design (a judged-valid prefix is kept even where the target would have written
something else); the accuracy cost is measured by `localspec bench parse`.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from localspec.decode.autoregressive import target_step
from localspec.decode.blocks import one_hot, verify_rows
from localspec.decode.parse.judges import Judge, make_judge
from localspec.decode.parse.one_pass import AnswerRows, PassResult, judge_copies, judge_pass
from localspec.decode.parse.segment import boundaries, choose_cuts, decide
from localspec.decode.speculative import SpecSettings, run_blocks
from localspec.decode.state import MAIN
from localspec.decode.turn import Turn
from localspec.events import Accepted, Cut, Drafted, Event, Judged, Rejected, Stats, Written
from localspec.sampling import SparseRow, sample_row, transform_row
from localspec.verify import NumpyRNG

TAIL_VERIFIER = "gbv"  # lossless for K = 1 and at least as long as token-level sd
MAX_TARGET_SEGMENT = 48  # iterative resume: the target never writes more than this per round


@dataclass
class ParseStats(Stats):
    """Stats with the PARSE record (`run --json` prints `parse`); copy() keeps it."""

    parse: dict | None = None

    def copy(self) -> ParseStats:
        fields = dict(self.__dict__)
        for k in ("accepted_lengths", "position_accepts", "position_trials"):
            fields[k] = list(fields[k])
        if self.parse is not None:
            fields["parse"] = {**self.parse, "rounds": [dict(r) for r in self.parse["rounds"]]}
        return ParseStats(**fields)


@dataclass
class Draft:
    """One drafted answer: tokens, the rows they were drawn from (sampling only), cost."""

    tokens: list[int] = field(default_factory=list)
    q: list[SparseRow] = field(default_factory=list)
    decodes: int = 0


def _stop_hit(text: str, stops: Sequence[str]) -> bool:
    return any(s in text for s in stops)


def draft_answer(turn: Turn, budget: int) -> Generator[Event, None, Draft]:
    """The draft model writes up to `budget` tokens of the answer (streamed as Drafted).

    Ends at an end-of-generation token (kept: the target judges the ending too), at a stop
    string (kept: the emitter withholds it) or at the budget. The draft's KV then holds
    everything but the last token, which stays pending as the state invariant requires.
    """
    dft, model = turn.draft, turn.draft_model
    assert dft is not None and model is not None
    cfg = turn.cfg
    sampling = cfg.draft_sampling()
    ctx = dft.ctx
    dft.sync_to(turn.target.committed)
    out = Draft()
    stops = turn.emitter.stop
    recent = turn.emitter.text[-max((len(s) for s in stops), default=0) :] if stops else ""
    raw = b""
    b = ctx.batch.clear()
    row = b.add_sequence(dft.pending, dft.n_past, MAIN, True)
    ctx.decode()
    out.decodes += 1
    while True:
        logits = ctx.logits(row)
        if sampling.greedy:
            tok = int(np.argmax(logits))
            out.q.append(one_hot(tok))
        else:
            r = transform_row(logits, sampling)
            tok = sample_row(r, turn.rng)
            out.q.append(r)
        out.tokens.append(tok)
        dft.advance(tok)  # what was pending is evaluated; the new token waits its turn
        raw += model.piece(tok)
        text = raw.decode("utf-8", "replace")
        yield Drafted((tuple(out.tokens),), (text,))
        if model.is_eog(tok) or len(out.tokens) >= budget or (stops and _stop_hit(recent + text, stops)):
            break
        if turn.stop_flag.is_set():
            break
        b = ctx.batch.clear()
        row = b.add(tok, dft.n_past, MAIN, True)
        ctx.decode()
        out.decodes += 1
    return out


def verify_tail(turn: Turn, d: Draft, rows: AnswerRows, t_star: int, method: str = TAIL_VERIFIER) -> tuple[int, int]:
    """Extend the judged prefix with tail tokens a lossless verifier accepts; (keep, next).

    The target's rows for answer[t*:] (and the bonus row) came with the judge pass, so this
    costs no decode: it is the token-level speculative step on a draft we already paid for.
    """
    T = len(d.tokens)
    tail = d.tokens[t_star:]
    if rows.rows is not None:
        p_rows = rows.rows[t_star : T + 1]
    else:
        p_rows = [one_hot(int(a)) for a in rows.argmax[t_star : T + 1]]
    if not tail:
        return T, sample_row(p_rows[0], turn.rng)
    x = np.asarray(tail, dtype=np.int64).reshape(1, len(tail))
    dec = verify_rows(method, NumpyRNG(turn.rng), [p_rows], [d.q[t_star:T]], x)
    return t_star + int(dec.tau), dec.token


def _clamp_cuts(turn: Turn, judge: Judge, notes: list[str]) -> int:
    """N cuts fit n_seq_max - 1 sequence ids (prompt/hybrid copies) and one batch."""
    n = max(1, turn.cfg.parse.cuts)
    if judge.uses_copies:
        lim = turn.target.ctx.n_seq_max - 1
        if n > lim:
            notes.append(f"--parse-cuts {n} clamped to {lim} (n_seq_max - 1)")
            n = lim
    return n


def _budget(turn: Turn, judge: Judge) -> int:
    """Draft tokens that fit the token budget, both contexts and one target batch (with room
    for at least the whole-answer judge copy)."""
    tgt, dft = turn.target, turn.draft
    assert dft is not None
    used = tgt.n_past + len(tgt.pending)
    room_t = tgt.ctx.n_ctx - used - judge.copy_len - 1
    room_d = dft.ctx.n_ctx - len(tgt.committed) - 1
    batch = tgt.ctx.n_batch - len(tgt.pending) - judge.copy_len
    return min(turn.emitter.remaining, room_t, room_d, batch)


def _fit_cuts(turn: Turn, judge: Judge, n_cuts: int, T: int, notes: list[str]) -> int:
    """Judge copies of a T-token answer must share one batch and the KV cache with it."""
    if not judge.uses_copies:
        return n_cuts
    tgt = turn.target
    used = tgt.n_past + len(tgt.pending) + T
    free = min(tgt.ctx.n_batch - len(tgt.pending) - T, tgt.ctx.n_ctx - used)
    fit = max(1, free // max(1, judge.copy_len))
    if fit < n_cuts:
        notes.append(f"--parse-cuts {n_cuts} clamped to {fit} for this answer (n_batch / context)")
        return fit
    return n_cuts


def _target_write(turn: Turn, until_newline: bool) -> Iterator[Event]:
    """Plain target decoding: to the end of the line (iterative resume) or of the answer."""
    tgt, model = turn.target, turn.target_model
    n = 0
    while not turn.should_stop():
        if until_newline and (n >= MAX_TARGET_SEGMENT or b"\n" in model.piece(tgt.pending[-1])):
            return
        ev = target_step(turn) if turn.room(len(tgt.pending) + 1) else None
        if ev is None:
            turn.emitter.close("context_full")
            return
        n += 1
        yield ev


def _spec_finish(turn: Turn) -> Iterator[Event]:
    """Finish the answer with lossless speculative decoding (one target decode per block).

    With no -L given (the runtime then loads the cost model): what `--method auto` runs --
    its choice of method/K, the calibrated dynamic draft length, AR when nothing pays.
    With -L: greedy sd (exact for any draft), sampled mdbv with the configured K (K = 1 is
    block verification), L tokens per draft.
    """
    # the config decides, not the session: a cost model left by an earlier auto turn must
    # not override an explicit -L
    if turn.cfg.auto_L and turn.costs is not None:
        from localspec.decode.policy.auto import auto_loop

        yield from auto_loop(turn)
        return
    greedy = turn.cfg.sampling.greedy
    yield from run_blocks(turn, SpecSettings("sd" if greedy else "mdbv", 1 if greedy else turn.cfg.K, turn.cfg.L))


def judge_round(turn: Turn, judge: Judge, answer: list[int], cuts: list[int]) -> tuple[PassResult, list[float]]:
    """The target pass(es) of one round and the prefix scores (two-stage: whole answer first)."""
    tgt = turn.target
    copies = judge.copies(cuts)
    sampling = turn.cfg.sampling if not turn.cfg.sampling.greedy else None
    two = turn.cfg.parse.two_stage and judge.uses_copies and len(cuts) > 1
    first = [len(cuts) - 1] if two else None
    res = judge_pass(tgt, answer, copies, judge.reduce_ids, first_copies=first, sampling=sampling)
    if two:
        whole = judge.scores(cuts, res)[-1]
        if whole < judge.score_threshold:
            judge_copies(tgt, answer, copies, list(range(len(cuts) - 1)), judge.reduce_ids, res)
        else:  # accepted whole: the prefixes need no verdict
            return res, [whole] * len(cuts)
    return res, judge.scores(cuts, res)


def parse_loop(turn: Turn) -> Iterator[Event]:
    """Iterative PARSE over one turn (see the module docstring for one round)."""
    assert turn.draft is not None and turn.draft_model is not None, "PARSE needs a draft model"
    pcfg = turn.cfg.parse
    stats = ParseStats(**turn.stats.__dict__)
    turn.stats = stats
    judge = make_judge(turn.target_model, pcfg)
    stats.parse = {"judge": judge.name, "threshold": judge.score_threshold, "gamma": judge.gamma,
                   "resume": pcfg.resume, "two_stage": pcfg.two_stage, "rounds": []}
    notes: list[str] = []
    n_cuts = _clamp_cuts(turn, judge, notes)
    tgt, model, emitter = turn.target, turn.target_model, turn.emitter
    while not turn.should_stop():
        T = _budget(turn, judge)
        if T < 1:
            emitter.close("context_full")
            return
        t0 = time.perf_counter()
        d = yield from draft_answer(turn, T)
        t1 = time.perf_counter()
        answer = d.tokens
        pieces = [model.piece(t) for t in answer]
        n = _fit_cuts(turn, judge, n_cuts, len(answer), notes)
        if notes:
            stats.parse["notes"] = sorted(set(notes))
            stats.choice_note = "; ".join(stats.parse["notes"])
        cuts = choose_cuts(boundaries(pieces), len(answer), n, pcfg.min_seg)
        res, scores = judge_round(turn, judge, answer, cuts)
        t2 = time.perf_counter()
        i = decide(scores, judge.score_threshold)
        t_star = cuts[i] if i >= 0 else 0
        keep, nxt = verify_tail(turn, d, res.answer, t_star)
        tgt.commit(answer[:keep], nxt)  # the answer was evaluated on MAIN: keep its prefix
        # events: what was judged, where it was cut, what is kept, what the target writes
        char_of = _char_offsets(pieces)
        yield Judged(judge.name, tuple(cuts), tuple(char_of[c] for c in cuts), tuple(scores), judge.score_threshold)
        yield Cut(keep, len(answer), char_of[keep])
        taken, text = emitter.push(answer[:keep])
        yield Accepted(0, keep, tuple(answer[:taken]), text)
        if keep < len(answer):
            rej = tuple(answer[keep:])
            yield Rejected(0, rej, model.detokenize(list(rej)))
        if not emitter.done:
            _, text = emitter.push([nxt])
            yield Written((nxt,), text, "bonus" if keep == len(answer) else "correction")
        t3 = time.perf_counter()
        stats.iterations += 1
        stats.target_calls += res.n_decodes
        stats.draft_calls += d.decodes
        stats.record(keep, len(answer))
        stats.L = max(stats.L, len(answer))
        stats.draft_seconds += t1 - t0
        stats.verify_seconds += t2 - t1
        stats.overhead_seconds += t3 - t2
        stats.parse["rounds"].append({
            "cuts": list(cuts), "scores": [round(float(s), 4) for s in scores], "t_star": t_star,
            "judge_decodes": res.n_decodes, "draft_tokens": len(answer), "accepted_tokens": keep,
            "tail_accepted": keep - t_star, "draft_seconds": round(t1 - t0, 4), "judge_seconds": round(t2 - t1, 4),
        })
        if not emitter.done:
            n_before = len(emitter.tokens)
            if pcfg.resume == "spec":
                yield from _spec_finish(turn)
            else:
                yield from _target_write(turn, until_newline=pcfg.resume != "target")
            stats.parse["rounds"][-1]["target_tokens"] = 1 + len(emitter.tokens) - n_before
        yield turn.tick()


def _char_offsets(pieces: Sequence[bytes]) -> list[int]:
    """Character offset of every token boundary in the drafted text (len = T + 1)."""
    out = [0]
    raw = b""
    for p in pieces:
        raw += p
        out.append(len(raw.decode("utf-8", "replace")))
    return out


