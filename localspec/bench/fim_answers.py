"""The target's greedy answers to an editor's FIM requests: what `bench priors --kinds fim` fits on.

A completion request is a different text from a chat turn: the prompt holds the code on
both sides of the cursor, and a lookup that copies the code after it (the suffix) or the
code before it (the prefix) is right at different rates than a chat answer's copies of its
prompt (docs/performance.md#origin). The requests are the ones `bench fim --rhythm` sends,
on the tuning half's holes only: each hole at the cursor, then after each of its first
`words` typed words, greedy, with the hole's indentation rule, through the public Session
API (the same prompt the server builds: Session.fim_prompt).
"""

from __future__ import annotations

import sys

from localspec.bench.ceiling import answer_tokens
from localspec.bench.fim_holes import cut_holes
from localspec.bench.fim_rhythm import typed_points


def fim_answers(model: str, n_holes: int, n_predict: int, threads: int, half: str,
                words: int = 3) -> tuple[list[tuple[str, list[int], list[int]]], tuple[int, int]]:
    """([(request id, prompt tokens, answer tokens)], (the FIM suffix id, the middle id))
    for the `half` holes among the first `n_holes` bench fim cuts."""
    from localspec.config import GenConfig, SamplingConfig
    from localspec.loading import open_session
    from localspec.session import FimInput, SessionOptions

    sess = open_session(model, None, SessionOptions(threads=threads))
    out = []
    try:
        ids = sess.fim_ids
        for hole in (h for h in cut_holes(n_holes) if h.half == half):
            for typed in [0, *typed_points(hole.middle, words)]:
                body = hole.body(n_predict, typed)
                fim = FimInput(body["input_prefix"], body["input_suffix"], tuple(body["input_extra"]))
                prompt = sess.fim_prompt(fim, n_predict)
                cfg = GenConfig(method="ar", n_predict=n_predict, sampling=SamplingConfig(temp=0.0),
                                n_indent=hole.n_indent)
                gen = answer_tokens(sess, prompt, cfg)
                out.append((f"{hole.id}@{typed}", prompt, gen))
                print(f"  {hole.id} typed {typed}: {len(prompt)} prompt + {len(gen)} answer tokens", file=sys.stderr)
    finally:
        sess.close()
    return out, ids
