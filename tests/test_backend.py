"""Backend: multi-sequence batches, seq ops, tokenizer/detokenizer, vocab check."""

from __future__ import annotations

import numpy as np
import pytest

from localspec.backend import Context, Detokenizer, check_vocab_compat
from localspec.errors import ConfigError, VocabMismatchError
from tests.support.helpers import model

PREFIX = "The capital of France is Paris. The capital of Germany is"
SUFFIXES = [" Berlin. The", " Bonn, and the", " not"]


def _alone(m, tokens: list[int]) -> np.ndarray:
    ctx = Context(m, n_ctx=256, n_batch=64, n_seq_max=1, threads=1)
    row = ctx.batch.clear().add_sequence(tokens, 0, 0, True)
    ctx.decode()
    return ctx.logits(row).copy()


def test_shared_prefix_multi_sequence_matches_separate(smollm2_path):
    m = model(smollm2_path)
    pre = m.tokenize(PREFIX)
    sfx = [m.tokenize(s) for s in SUFFIXES]
    ctx = Context(m, n_ctx=256, n_batch=64, n_seq_max=4, threads=1)
    b = ctx.batch.clear()
    for j, t in enumerate(pre):
        b.add(t, j, [0, 1, 2], False)
    rows = [b.add_sequence(s, len(pre), [k], True) for k, s in enumerate(sfx)]
    ctx.decode()
    assert ctx.n_decodes == 1
    for k, s in enumerate(sfx):
        got = ctx.logits(rows[k])
        ref = _alone(m, pre + s)
        assert np.argmax(got) == np.argmax(ref)
        assert np.abs(got - ref).max() <= 1.0


def test_token_without_seq_id_is_invisible(smollm2_path):
    """Sequence 1 holds a distracting sentence that sequence 0 must not see."""
    m = model(smollm2_path)
    noise = m.tokenize("Bananas are yellow and monkeys love them a lot.")
    probe = m.tokenize("The capital of France is")
    ctx = Context(m, n_ctx=256, n_batch=64, n_seq_max=2, threads=1)
    b = ctx.batch.clear()
    b.add_sequence(noise, 0, 1, False)
    row = b.add_sequence(probe, 0, 0, True)  # same positions, other sequence
    ctx.decode()
    ref = _alone(m, probe)
    assert np.abs(ctx.logits(row) - ref).max() <= 1.0
    # and a sequence that DOES see the noise gets different logits
    ctx2 = Context(m, n_ctx=256, n_batch=64, n_seq_max=2, threads=1)
    r2 = ctx2.batch.clear().add_sequence(noise + probe, 0, 0, True)
    ctx2.decode()
    assert np.abs(ctx2.logits(r2) - ref).max() > 1.0


def test_seq_rm_then_new_suffix_matches_fresh(smollm2_path):
    m = model(smollm2_path)
    pre, a, b2 = m.tokenize(PREFIX), m.tokenize(" Munich and"), m.tokenize(" Berlin, and")
    ctx = Context(m, n_ctx=256, n_batch=64, n_seq_max=2, threads=1)
    ctx.batch.clear().add_sequence(pre + a, 0, 0, True)
    ctx.decode()
    ctx.seq_rm(0, len(pre), -1)
    assert ctx.pos_max(0) == len(pre) - 1
    row = ctx.batch.clear().add_sequence(b2, len(pre), 0, True)
    ctx.decode()
    ref = _alone(m, pre + b2)
    assert np.argmax(ctx.logits(row)) == np.argmax(ref)
    assert np.abs(ctx.logits(row) - ref).max() <= 1.0


def test_seq_cp_gives_independent_continuations(smollm2_path):
    m = model(smollm2_path)
    pre = m.tokenize(PREFIX)
    c1, c2 = m.tokenize(" Berlin."), m.tokenize(" a city")
    ctx = Context(m, n_ctx=256, n_batch=64, n_seq_max=2, threads=1)
    ctx.batch.clear().add_sequence(pre, 0, 0, False)
    ctx.decode()
    ctx.seq_cp(0, 1, 0, -1)
    b = ctx.batch.clear()
    r0 = b.add_sequence(c1, len(pre), 0, True)
    r1 = b.add_sequence(c2, len(pre), 1, True)
    ctx.decode()
    for row, cont in ((r0, c1), (r1, c2)):
        ref = _alone(m, pre + cont)
        assert np.argmax(ctx.logits(row)) == np.argmax(ref)
        assert np.abs(ctx.logits(row) - ref).max() <= 1.0


def test_batch_limits_name_the_flag(smollm2_path):
    ctx = Context(model(smollm2_path), n_ctx=64, n_batch=4, n_seq_max=2, threads=1)
    b = ctx.batch.clear()
    with pytest.raises(ConfigError, match="n_seq_max"):
        b.add(1, 0, [0, 2])
    for i in range(4):
        b.add(1, i, 0)
    with pytest.raises(ConfigError, match="n_batch"):
        b.add(1, 4, 0)


def test_detokenizer_never_splits_utf8(smollm2_path):
    m = model(smollm2_path)
    text = "naïve café 🙂 日本語 done"
    toks = m.tokenize(text, parse_special=False)
    d = Detokenizer(m)
    pieces = [d.push([t]) for t in toks] + [d.flush()]
    assert "".join(pieces) == text
    assert all("\ufffd" not in p for p in pieces)


def test_vocab_compat_same_family_passes(smollm2_path, smollm2_q8_path):
    check_vocab_compat(model(smollm2_path), model(smollm2_q8_path))


@pytest.mark.slow
def test_vocab_mismatch_smollm_vs_qwen(smollm2_path, qwen_draft_path):
    with pytest.raises(VocabMismatchError, match="vocabulary sizes differ"):
        check_vocab_compat(model(qwen_draft_path), model(smollm2_path))
