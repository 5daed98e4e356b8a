"""The editor's next request, guessed, so its prompt can be evaluated before it comes.

A warm FIM request (the user typed on past the suggestion) shares everything before the
cursor with the one before, but everything after the cursor -- the suffix, ~70 % of such a
request's latency on a CPU (docs/performance.md#fim-prefetch) -- sits after the typed text
in the prompt (`<PRE>prefix typed<SUF>suffix<MID>`), so no server can reuse it. Qwen2.5-Coder
answers badly with the suffix first (llama.cpp's --spm-infill: 0 of 18 right where the
usual order got 3), so the order stays. What a server can do is use the pause while the
user types: the next word the user types is, as often as the suggestion is right, the
suggestion's first word, and the request it brings is then known token for token. The
worker (server/worker.py) evaluates that prompt while the server is idle; the request it
guessed lets it finish (it is that request's own prompt) and finds it done, any other request
stops it at once (inside the decode: KVState.prefetch) and reuses whatever prefix it shares.
Nothing is approximated: a wrong guess costs idle time, never a different answer.
"""

from __future__ import annotations

import re
from dataclasses import replace

from localspec.session import FimInput

_WORD = re.compile(r"\S+\s*")


def next_request(fim: FimInput, answer: str) -> FimInput | None:
    """`fim` with the first word of `answer` (and the whitespace after it) typed at the
    cursor, as the editor would send it; None when the answer has no word short of its end
    (nothing left to type toward) or the word would start a new line in a request whose
    cursor line travels as `prompt` (llama.vim's shape: that line moves into the prefix)."""
    m = _WORD.search(answer)
    if m is None or m.end() >= len(answer.rstrip()):
        return None
    typed = answer[: m.end()]
    if fim.prompt:
        return None if "\n" in typed else replace(fim, prompt=fim.prompt + typed)
    return replace(fim, prefix=fim.prefix + typed)
